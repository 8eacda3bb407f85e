/* headwatch explorer: vanilla JavaScript, no dependencies. Reads the JSON embedded in
 * <script id="explorer-data"> (written by headwatch/explorer/build.py) and draws every view.
 *
 * Stable hooks for tests and users:
 *   #phrase-select, canvas.head-cell#cell-L{l}-H{h}[data-layer][data-head],
 *   #head-view[data-layer][data-head], rect.map-cell[data-row][data-col][data-weight],
 *   #readout[data-row][data-col][data-weight] with #readout-text,
 *   button.score-btn#score-{name}, #bars[data-score] > .bar#bar-L{l}-H{h}[data-rank][data-value],
 *   .attr-cell#attr-L{l}-H{h}[data-drop], input[name=topk-method]#topk-method-{method},
 *   #topk-methods[data-method], .patch-cell#patch-{exact,estimate}-L{l}-H{h}[data-score],
 *   #patch-readout[data-layer][data-head][data-score][data-estimate], .patch-cell#patch-resid-L{l}-P{p},
 *   #edge-threshold, #edge-count[data-shown], path.edge#edge-{i}[data-sender][data-receiver][data-input][data-score],
 *   circle.node#node-L{l}-H{h}, #edge-readout[data-sender][data-receiver][data-input][data-score],
 *   #rotary-distance, input[name=rotary-base],
 *   #rotary-summary[data-unwrapped][data-pairs][data-reach], #kv-* inputs, #kv-row-{key}[data-value],
 *   a notebook's page (hw.explore): #text-select, #text-layer, #text-head, #lines-svg with
 *   text.line-tok#line-row-{i} / #line-col-{j} and line.attn[data-row][data-col][data-weight],
 *   #lines-readout[data-row][data-col], span.tok#tok-{j}[data-weight] in #tokens-view[data-from],
 *   #tokens-readout[data-from][data-to][data-weight], canvas#head-canvas (a map of more than
 *   MAP_SVG_TOKENS tokens), input[name=edge-score-method]#edge-score-method-{method},
 *   body[data-ready][data-ready-ms] (milliseconds from the page's start to drawn).
 *
 * The data element holds the JSON, or (data-encoding="zlib-base64", a notebook's page) the JSON
 * zlib-compressed in base64, which the browser's own DecompressionStream reads before the page draws.
 */
(function load(explorer) {
  'use strict';
  const box = document.getElementById('explorer-data');
  if (box.dataset.encoding !== 'zlib-base64') { explorer(box.textContent, null); return; }
  const failed = function (err) {
    document.getElementById('title').textContent = 'headwatch explorer: this page could not be drawn (' + err + ')';
    throw err;
  };
  if (typeof DecompressionStream === 'undefined') {
    failed(new Error('this browser has no DecompressionStream; open the page in a current Chromium, Firefox or Safari'));
  }
  const bin = atob(box.textContent.trim());
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'))).text()
    .then(function (json) { explorer(json, bin.length); }).catch(failed);
})(function explorer(json, compressedBytes) {
  'use strict';

  const D = JSON.parse(json);
  const S = D.shape;
  const L = S.layers, H = S.heads, Q = D.quantum;
  const SVGNS = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#0072B2', '#E69F00', '#009E73', '#D55E00', '#CC79A7', '#56B4E9'];
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------ small helpers
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else if (k === 'style') e.style.cssText = v; else e.setAttribute(k, v);
    }
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function headLabel(l, h) { return 'L' + l + ' H' + h; }
  function headId(l, h) { return 'L' + l + '-H' + h; }
  function fmtNum(x) {
    if (x === null || x === undefined) return '–';
    if (typeof x !== 'number') return String(x);
    if (Number.isInteger(x)) return x.toLocaleString('en-US');
    const a = Math.abs(x);
    if (a >= 1e15 || (a !== 0 && a < 1e-3)) return x.toExponential(3);
    if (a >= 1000) return Math.round(x).toLocaleString('en-US');
    return x.toPrecision(4).replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');
  }
  function fmtBytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = b, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
    return b.toLocaleString('en-US') + ' B' + (u ? ' (' + v.toFixed(v >= 100 ? 0 : 1) + ' ' + units[u] + ')' : '');
  }
  function pct(p) { return (100 * p).toFixed(2) + ' %'; }
  // percentage points: 2 decimals, or 2 significant digits when smaller than 0.01
  function fmtPts(d) { return d !== 0 && Math.abs(d) < 0.01 ? d.toPrecision(2) : d.toFixed(2); }
  // probabilities: 2 decimals, or 2 significant digits below 0.01 % (tiny models spread their mass)
  function pctProb(p) { const v = 100 * p; return (v !== 0 && Math.abs(v) < 0.01 ? v.toPrecision(2) : v.toFixed(2)) + ' %'; }
  function hexRgb(h) { return [parseInt(h.slice(1, 3), 16), parseInt(h.slice(3, 5), 16), parseInt(h.slice(5, 7), 16)]; }
  const SEQ = D.colormaps.sequential, DIV = D.colormaps.diverging;
  const SEQ_RGB = SEQ.map(hexRgb);
  function seqIndex(w) {
    const v = st.sqrt ? Math.sqrt(Math.max(0, w)) : w;
    return Math.max(0, Math.min(255, Math.round(v * 255)));
  }
  // the colour of every stored weight q / Q as one pixel (RGBA bytes read as one number in this
  // machine's byte order), looked up: the grid draws every cell of every head
  const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  function pixel(rgb) {
    return (LITTLE ? ((255 << 24) | (rgb[2] << 16) | (rgb[1] << 8) | rgb[0])
      : ((rgb[0] << 24) | (rgb[1] << 16) | (rgb[2] << 8) | 255)) >>> 0;
  }
  function seqTable() {
    const out = new Uint32Array(Q + 1);
    for (let q = 0; q <= Q; q++) out[q] = pixel(SEQ_RGB[seqIndex(q / Q)]);
    return out;
  }
  const MASKED = pixel([242, 242, 242]);     // above the diagonal: the token cannot look ahead
  function divColor(x, vmax) {  // x in [-vmax, vmax] -> diverging colour, 0 in the middle
    const t = vmax > 0 ? (x / vmax + 1) / 2 : 0.5;
    return DIV[Math.max(0, Math.min(255, Math.round(t * 255)))];
  }

  // ------------------------------------------------------------ decode the maps
  function bytesOf(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function u32Of(b64) {
    const b = bytesOf(b64);
    const dv = new DataView(b.buffer);
    const out = new Uint32Array(b.length / 4);
    for (let i = 0; i < out.length; i++) out[i] = dv.getUint32(4 * i, true);
    return out;
  }
  const PHRASES = D.phrases.map(function (p) {
    const esc = new Map();
    const ei = u32Of(p.escape_index), ev = u32Of(p.escape_value);
    for (let i = 0; i < ei.length; i++) esc.set(ei[i], ev[i]);
    return Object.assign({}, p, { q: bytesOf(p.maps), esc: esc, per: p.n * (p.n + 1) / 2 });
  });
  // q / quantum is the stored weight exactly (the maps are quantized to 1/quantum).
  function qFlat(P, i) {
    const v = P.q[i];
    return v === 255 ? P.esc.get(i) : v;
  }
  function qAt(P, l, h, r, c) {
    return c > r ? 0 : qFlat(P, (l * H + h) * P.per + r * (r + 1) / 2 + c);
  }
  function weightAt(P, l, h, r, c) { return qAt(P, l, h, r, c) / Q; }

  // ------------------------------------------------------------ scores
  const SC = D.scores;
  const NH = SC.layer.length;
  function scoreIndex(l, h) { return l * H + h; }
  const SCORE_DEFS = {
    sink: 'sink: mean attention to token 0, over the prose sentences (row 0 excluded).',
    prev: 'prev: mean attention to the token just before (row r → column r−1), prose.',
    self: 'self: mean attention to itself (row r → column r), prose.',
    induction: 'induction: on repeated random tokens, attention to the token that followed the earlier occurrence of the current token (rows T … 2T−2).'
  };

  const st = { phrase: 0, layer: 0, head: 0, score: D.score_names.includes('induction') ? 'induction' : D.score_names[0], nbars: 20,
               sqrt: false };
  (function initialHead() {
    const ranks = SC[st.score + '_rank'];
    let best = 0;
    for (let i = 1; i < NH; i++) if (ranks[i] < ranks[best]) best = i;
    st.layer = SC.layer[best]; st.head = SC.head[best];
  })();

  // ------------------------------------------------------------ header
  function header() {
    $('title').textContent = 'headwatch explorer — ' + D.model;
    document.title = 'headwatch explorer — ' + D.model;
    const parts = [S.family + ': ' + L + ' layers × ' + H + ' heads'];
    if (S.kv_heads && S.kv_heads !== H) parts[0] += ' (' + S.kv_heads + ' key/value heads)';
    if (S.width) parts.push('width ' + S.width);
    if (S.head_dim) parts.push('head size ' + S.head_dim);
    if (S.rotary_dims) parts.push('rotary ' + S.rotary_dims + ' dims, base ' + fmtNum(S.rotary_base));
    if (S.context) parts.push('context ' + S.context.toLocaleString('en-US') + ' tokens');
    $('shape-line').textContent = parts.join(' · ');
    const toc = $('toc');
    for (const s of document.querySelectorAll('main > section')) {
      if (s.hidden) continue;
      const a = el('a', { href: '#' + s.id }, s.querySelector('h2').textContent);
      toc.appendChild(a);
    }
  }

  // ------------------------------------------------------------ phrase + grid
  function buildPhraseSelect() {
    const sel = $('phrase-select');
    PHRASES.forEach(function (p, i) {
      sel.appendChild(el('option', { value: String(i) }, p.name + ' (' + p.n + ' tokens)'));
    });
    sel.value = String(st.phrase);
    sel.addEventListener('change', function () { st.phrase = Number(sel.value); tx.from = null; renderPhrase(); });
    st.sqrt = $('sqrt-scale').checked;
    $('sqrt-scale').addEventListener('change', function () {
      st.sqrt = $('sqrt-scale').checked; renderGrid(); renderHead(); renderText();
    });
  }

  function buildGrid() {
    const g = $('grid');
    g.style.gridTemplateColumns = 'auto repeat(' + H + ', 36px)';
    g.appendChild(el('div', { class: 'lab' }, ''));
    for (let h = 0; h < H; h++) g.appendChild(el('div', { class: 'lab hlab' }, 'H' + h));
    for (let l = 0; l < L; l++) {
      g.appendChild(el('div', { class: 'lab' }, 'L' + l));
      for (let h = 0; h < H; h++) {
        const c = el('canvas', { class: 'head-cell', id: 'cell-' + headId(l, h), 'data-layer': String(l),
                                 'data-head': String(h), title: headLabel(l, h), role: 'gridcell' });
        c.addEventListener('click', function () { selectHead(l, h, false); });
        g.appendChild(c);
      }
    }
  }

  function renderGrid() {
    const P = PHRASES[st.phrase];
    const n = P.n, lut = seqTable();
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const c = $('cell-' + headId(l, h));
        c.width = n; c.height = n;
        const ctx = c.getContext('2d');
        const img = ctx.createImageData(n, n), px = new Uint32Array(img.data.buffer), base = (l * H + h) * P.per;
        px.fill(MASKED);
        for (let r = 0; r < n; r++) {
          const row = base + r * (r + 1) / 2;
          for (let col = 0; col <= r; col++) px[r * n + col] = lut[qFlat(P, row + col)];
        }
        ctx.putImageData(img, 0, 0);
        c.classList.toggle('selected', l === st.layer && h === st.head);
      }
    }
  }

  function predictionLine() {
    const p = PHRASES[st.phrase].prediction;
    if (!p) { $('prediction-line').textContent = ''; return; }
    if (p.expected === null) {            // your own text: no expected token, the model's top alone
      $('prediction-line').textContent = 'next token, the model’s top: ' + p.top.slice(0, 3).map(function (t) {
        return t.token + ' ' + pctProb(t.prob);
      }).join(', ');
      return;
    }
    let s = 'next token: expected ' + p.expected + ' p = ' + pctProb(p.expected_prob) + ' (rank ' + p.expected_rank + ')';
    if (p.also) s += '; also ' + p.also + ' p = ' + pctProb(p.also_prob) + ' (rank ' + p.also_rank + ')';
    if (p.top && p.top.length) s += '; model’s top: ' + p.top[0].token + ' ' + pctProb(p.top[0].prob);
    $('prediction-line').textContent = s;
  }

  // ------------------------------------------------------------ one head enlarged
  // A phrase of up to MAP_SVG_TOKENS tokens: one SVG cell per weight, the tokens on both axes; a
  // longer one (a notebook's own text): one canvas, the read-out naming the tokens of the cell hovered.
  const MAP_SVG_TOKENS = 64;
  function headScoresText(l, h) {
    const i = scoreIndex(l, h);
    return D.score_names.map(function (s) {
      return s + ' ' + SC[s][i].toFixed(3) + ' (rank ' + SC[s + '_rank'][i] + ')';
    }).join(' · ');
  }
  function renderHead() {
    const P = PHRASES[st.phrase];
    const n = P.n, l = st.layer, h = st.head;
    const view = $('head-view');
    view.dataset.layer = String(l); view.dataset.head = String(h); view.dataset.phrase = P.name;
    const i = scoreIndex(l, h);
    let title = headLabel(l, h);
    if (SC.kv_group && S.kv_heads && S.kv_heads !== H) title += ' · key/value group ' + SC.kv_group[i];
    $('head-title').textContent = title + ' on “' + P.name + '”';
    $('head-scores').textContent = headScoresText(l, h);
    if (n > MAP_SVG_TOKENS) { renderHeadCanvas(P); return; }

    const maxLen = Math.min(16, Math.max.apply(null, P.display.map(function (t) { return t.length; })));
    const cs = Math.max(12, Math.min(26, Math.floor(560 / n)));
    const ml = 14 + 7 * maxLen, mt = 14 + 7 * maxLen;
    const W = ml + n * cs + 8, Ht = mt + n * cs + 8;
    const svg = sv('svg', { width: W, height: Ht, viewBox: '0 0 ' + W + ' ' + Ht, id: 'head-svg' });
    const short = function (t) { return t.length > 16 ? t.slice(0, 15) + '…' : t; };
    for (let r = 0; r < n; r++) {
      const gr = sv('g');
      gr.appendChild(sv('title', {}, 'row ' + r + ' (looks): ' + P.display[r]));
      gr.appendChild(sv('text', { x: ml - 4, y: mt + r * cs + cs / 2, 'text-anchor': 'end', 'dominant-baseline': 'middle',
                                  id: 'rowlab-' + r, class: 'rowlab', 'data-token': P.display[r] }, short(P.display[r])));
      svg.appendChild(gr);
      const x = ml + r * cs + cs / 2;
      const gc = sv('g');
      gc.appendChild(sv('title', {}, 'column ' + r + ' (looked at): ' + P.display[r]));
      gc.appendChild(sv('text', { x: x, y: mt - 4, transform: 'rotate(-90 ' + x + ' ' + (mt - 4) + ')', 'dominant-baseline': 'middle',
                                  id: 'collab-' + r, class: 'collab', 'data-token': P.display[r] }, short(P.display[r])));
      svg.appendChild(gc);
    }
    // above the diagonal: masked (the token cannot look ahead)
    svg.appendChild(sv('path', { d: 'M' + (ml + cs) + ' ' + mt + ' H' + (ml + n * cs) + ' V' + (mt + (n - 1) * cs) + ' Z',
                                 fill: '#f2f2f2' }));
    for (let r = 0; r < n; r++) {
      for (let c = 0; c <= r; c++) {
        const w = weightAt(P, l, h, r, c);
        svg.appendChild(sv('rect', { x: ml + c * cs, y: mt + r * cs, width: cs, height: cs, fill: SEQ[seqIndex(w)],
                                     class: 'map-cell', id: 'map-cell-' + r + '-' + c,
                                     'data-row': String(r), 'data-col': String(c), 'data-weight': String(w) }));
      }
    }
    svg.addEventListener('mouseover', function (e) {
      const t = e.target;
      if (!t.classList || !t.classList.contains('map-cell')) return;
      setReadout(Number(t.dataset.row), Number(t.dataset.col));
    });
    const box = $('head-map');
    box.innerHTML = '';
    box.appendChild(svg);
    colorbar();
    const ro = $('readout');
    if (ro.dataset.row !== '' && Number(ro.dataset.row) < n && Number(ro.dataset.col) <= Number(ro.dataset.row)) {
      setReadout(Number(ro.dataset.row), Number(ro.dataset.col));
    } else {
      clearReadout();
    }
  }

  function renderHeadCanvas(P) {
    const n = P.n, cs = Math.max(1, Math.floor(560 / n)), lut = seqTable();
    const c = el('canvas', { id: 'head-canvas', class: 'head-canvas', width: String(n * cs), height: String(n * cs),
                             'data-n': String(n) });
    const ctx = c.getContext('2d');
    const img = ctx.createImageData(n * cs, n * cs), px = new Uint32Array(img.data.buffer);
    for (let r = 0; r < n; r++) {
      for (let col = 0; col < n; col++) {
        const v = col > r ? MASKED : lut[qAt(P, st.layer, st.head, r, col)];
        for (let y = r * cs; y < (r + 1) * cs; y++) px.fill(v, y * n * cs + col * cs, y * n * cs + (col + 1) * cs);
      }
    }
    ctx.putImageData(img, 0, 0);
    c.addEventListener('mousemove', function (e) {
      const b = c.getBoundingClientRect();
      const r = Math.floor((e.clientY - b.top) / b.height * n), col = Math.floor((e.clientX - b.left) / b.width * n);
      if (r >= 0 && r < n && col >= 0 && col <= r) setReadout(r, col);
    });
    const box = $('head-map');
    box.innerHTML = '';
    box.appendChild(c);
    colorbar();
    const ro = $('readout');
    if (ro.dataset.row !== '' && Number(ro.dataset.row) < n) setReadout(Number(ro.dataset.row), Number(ro.dataset.col));
    else clearReadout();
  }

  function clearReadout() {
    const ro = $('readout');
    ro.dataset.row = ''; ro.dataset.col = ''; ro.dataset.weight = '';
    ro.dataset.layer = String(st.layer); ro.dataset.head = String(st.head);
    $('readout-text').textContent = 'hover a cell: row token → column token: percentage';
    $('readout-where').textContent = '';
  }

  function setReadout(r, c) {
    const P = PHRASES[st.phrase];
    const w = weightAt(P, st.layer, st.head, r, c);
    const ro = $('readout');
    ro.dataset.row = String(r); ro.dataset.col = String(c); ro.dataset.weight = String(w);
    ro.dataset.layer = String(st.layer); ro.dataset.head = String(st.head); ro.dataset.phrase = P.name;
    $('readout-text').textContent = P.display[r] + ' → ' + P.display[c] + ': ' + pct(w);
    $('readout-where').textContent = headLabel(st.layer, st.head) + ', row ' + r + ' (looks) → column ' + c +
      ' (looked at); weight ' + qAt(P, st.layer, st.head, r, c) + '/' + Q;
    for (const e of document.querySelectorAll('#head-map text.hot')) e.classList.remove('hot');
    const a = $('rowlab-' + r), b = $('collab-' + c);
    if (a) a.classList.add('hot');
    if (b) b.classList.add('hot');
  }

  function colorbar() {
    const box = $('colorbar');
    box.innerHTML = '';
    const W = 260, svg = sv('svg', { width: W + 40, height: 40 });
    const defs = sv('defs');
    const grad = sv('linearGradient', { id: 'seq-grad' });
    const sq = st.sqrt;
    for (let k = 0; k <= 16; k++) {
      const t = k / 16;
      grad.appendChild(sv('stop', { offset: (100 * t) + '%', 'stop-color': SEQ[seqIndex(sq ? t * t : t)] }));
    }
    defs.appendChild(grad); svg.appendChild(defs);
    svg.appendChild(sv('rect', { x: 10, y: 4, width: W, height: 10, fill: 'url(#seq-grad)' }));
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      const x = 10 + W * (sq ? Math.sqrt(v) : v);
      svg.appendChild(sv('line', { x1: x, x2: x, y1: 14, y2: 18, stroke: '#555' }));
      svg.appendChild(sv('text', { x: x, y: 28, 'text-anchor': 'middle', 'font-size': 10 }, String(v)));
    });
    svg.appendChild(sv('text', { x: 10 + W / 2, y: 39, 'text-anchor': 'middle', 'font-size': 10 },
                       'attention weight (stored to 1/' + Q + ')' + (sq ? ', √ scale' : '')));
    box.appendChild(svg);
  }

  function selectHead(l, h, scroll) {
    st.layer = l; st.head = h;
    for (const c of document.querySelectorAll('canvas.head-cell.selected')) c.classList.remove('selected');
    const cell = $('cell-' + headId(l, h));
    if (cell) cell.classList.add('selected');
    for (const b of document.querySelectorAll('.bar.selected')) b.classList.remove('selected');
    const bar = $('bar-' + headId(l, h));
    if (bar) bar.classList.add('selected');
    renderHead();
    renderText();
    if (D.lens) renderLensHead(l, h);
    if (scroll) $('heads-section').scrollIntoView({ block: 'start' });
  }

  function renderPhrase() {
    renderGrid();
    predictionLine();
    renderHead();
    renderAttribution();
    renderText();
  }

  // ------------------------------------------------------------ ranked bars
  function buildBars() {
    const box = $('score-buttons');
    D.score_names.forEach(function (s) {
      const b = el('button', { type: 'button', class: 'score-btn', id: 'score-' + s, 'data-score': s }, s);
      b.addEventListener('click', function () { st.score = s; renderBars(); });
      box.appendChild(b);
    });
    const sel = $('bar-count');
    const opts = [10, 20, 30, 50].filter(function (k) { return k < NH; });
    opts.forEach(function (k) { sel.appendChild(el('option', { value: String(k) }, 'top ' + k)); });
    sel.appendChild(el('option', { value: String(NH) }, 'all ' + NH));
    st.nbars = opts.includes(20) ? 20 : NH;
    sel.value = String(st.nbars);
    sel.addEventListener('change', function () { st.nbars = Number(sel.value); renderBars(); });
  }

  function rankedOrder(score) {
    const ranks = SC[score + '_rank'];
    const idx = [];
    for (let i = 0; i < NH; i++) idx.push(i);
    idx.sort(function (a, b) {
      return (ranks[a] - ranks[b]) || (SC.layer[a] - SC.layer[b]) || (SC.head[a] - SC.head[b]);
    });
    return idx;
  }

  function renderBars() {
    const s = st.score;
    for (const b of document.querySelectorAll('.score-btn')) b.setAttribute('aria-pressed', String(b.dataset.score === s));
    $('score-def').textContent = (SCORE_DEFS[s] || s) + (D.text && D.text.scores_on ? ' ' + D.text.scores_on : '');
    const box = $('bars');
    box.dataset.score = s;
    box.innerHTML = '';
    const vals = SC[s], ranks = SC[s + '_rank'];
    rankedOrder(s).slice(0, st.nbars).forEach(function (i) {
      const l = SC.layer[i], h = SC.head[i];
      const bar = el('div', { class: 'bar', id: 'bar-' + headId(l, h), 'data-layer': String(l), 'data-head': String(h),
                              'data-rank': String(ranks[i]), 'data-value': String(vals[i]), 'data-score': s,
                              title: headLabel(l, h) + ': ' + s + ' = ' + vals[i] });
      bar.appendChild(el('span', { class: 'rank' }, '#' + ranks[i]));
      bar.appendChild(el('span', { class: 'lab' }, headLabel(l, h)));
      const wrap = el('div', { class: 'fill-wrap' });
      wrap.appendChild(el('div', { class: 'fill', style: 'width:' + (100 * Math.max(0, Math.min(1, vals[i]))) + '%' }));
      bar.appendChild(wrap);
      bar.appendChild(el('span', { class: 'val' }, vals[i].toFixed(3)));
      if (l === st.layer && h === st.head) bar.classList.add('selected');
      bar.addEventListener('click', function () { selectHead(l, h, true); });
      box.appendChild(bar);
    });
  }

  // ------------------------------------------------------------ tables and plots
  function table(containerId, rec, caption) {
    const box = $(containerId);
    box.innerHTML = '';
    if (!rec) return;
    const t = el('table', { class: 'data', id: containerId.replace(/-table$/, '') + '-data' });
    if (caption) t.appendChild(el('caption', {}, caption));
    const head = el('tr');
    const numeric = rec.columns.map(function (c, j) {
      return rec.rows.every(function (r) { return r[j] === null || typeof r[j] === 'number'; });
    });
    rec.columns.forEach(function (c, j) { head.appendChild(el('th', { class: numeric[j] ? '' : 'txt' }, c)); });
    const thead = el('thead'); thead.appendChild(head); t.appendChild(thead);
    const tb = el('tbody');
    rec.rows.forEach(function (r) {
      const tr = el('tr');
      r.forEach(function (v, j) {
        const txt = Array.isArray(v) ? v.map(fmtNum).join('; ') : fmtNum(v);
        tr.appendChild(el('td', { class: numeric[j] ? '' : 'txt', title: Array.isArray(v) ? txt : String(v) }, txt));
      });
      tb.appendChild(tr);
    });
    t.appendChild(tb);
    box.appendChild(t);
  }
  // the table's maker named in a caption: the notebook's function, or the workflow's file
  function madeBy(key, file) { return (D.made_by || {})[key] || file; }
  function col(rec, name) {
    const j = rec.columns.indexOf(name);
    return j < 0 ? null : rec.rows.map(function (r) { return r[j]; });
  }

  // a tick label with as many decimals as the tick step needs (no two ticks print alike)
  function tickFmt(v, ticks) {
    if (ticks.length < 2) return fmtNum(v);
    const step = Math.abs(ticks[1] - ticks[0]);
    const dec = Math.max(0, Math.min(10, -Math.floor(Math.log10(step) + 1e-9)));
    return Math.abs(v) >= 1000 && dec === 0 ? Math.round(v).toLocaleString('en-US') : v.toFixed(dec);
  }
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) { hi = lo + 1; }
    const span = hi - lo, step0 = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(step0)));
    const err = step0 / mag;
    const step = mag * (err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1);
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
    return ticks;
  }

  // A small line/point plot: series [{name, color, dash, points: [{x, y, lo, hi}]}], hlines [{y, label}].
  function plot(container, o) {
    const W = o.width || 380, Ht = o.height || 250, m = { l: 70, r: 12, t: 26, b: 44 };
    const xs = [], ys = [];
    o.series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p.x); ys.push(p.y); if (p.lo !== undefined) { ys.push(p.lo, p.hi); } }); });
    (o.hlines || []).forEach(function (h) { ys.push(h.y); });
    const fx = o.xlog2 ? function (x) { return Math.log2(x); } : function (x) { return x; };
    let x0 = Math.min.apply(null, xs.map(fx)), x1 = Math.max.apply(null, xs.map(fx));
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    const padx = (x1 - x0) * 0.06; x0 -= padx; x1 += padx;
    let y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const pady = (y1 - y0) * 0.08; y0 -= pady; y1 += pady;
    const X = function (x) { return m.l + (fx(x) - x0) / (x1 - x0) * (W - m.l - m.r); };
    const Y = function (y) { return Ht - m.b - (y - y0) / (y1 - y0) * (Ht - m.t - m.b); };
    const svg = sv('svg', { width: W, height: Ht, class: 'plot-svg' });
    if (o.id) svg.setAttribute('id', o.id);
    svg.appendChild(sv('text', { x: m.l, y: 14, 'font-weight': 'bold' }, o.title || ''));
    const ax = sv('g', { class: 'axis' });
    ax.appendChild(sv('line', { x1: m.l, x2: W - m.r, y1: Ht - m.b, y2: Ht - m.b }));
    ax.appendChild(sv('line', { x1: m.l, x2: m.l, y1: m.t, y2: Ht - m.b }));
    const xt = o.xticks || (o.xlog2 ? [] : niceTicks(x0, x1, 5));
    xt.forEach(function (v) {
      const x = X(v);
      ax.appendChild(sv('line', { x1: x, x2: x, y1: Ht - m.b, y2: Ht - m.b + 4 }));
      ax.appendChild(sv('text', { x: x, y: Ht - m.b + 15, 'text-anchor': 'middle' }, fmtNum(v)));
    });
    const yt = niceTicks(y0, y1, 5);
    yt.forEach(function (v) {
      const y = Y(v);
      ax.appendChild(sv('line', { x1: m.l - 4, x2: m.l, y1: y, y2: y }));
      ax.appendChild(sv('text', { x: m.l - 6, y: y, 'text-anchor': 'end', 'dominant-baseline': 'middle' }, tickFmt(v, yt)));
    });
    ax.appendChild(sv('text', { x: (m.l + W - m.r) / 2, y: Ht - 8, 'text-anchor': 'middle' }, o.xlabel || ''));
    const yl = sv('text', { x: 12, y: (m.t + Ht - m.b) / 2, 'text-anchor': 'middle',
                            transform: 'rotate(-90 12 ' + ((m.t + Ht - m.b) / 2) + ')' }, o.ylabel || '');
    ax.appendChild(yl);
    svg.appendChild(ax);
    (o.hlines || []).forEach(function (h) {
      svg.appendChild(sv('line', { x1: m.l, x2: W - m.r, y1: Y(h.y), y2: Y(h.y), stroke: '#888', 'stroke-dasharray': '2 3' }));
      svg.appendChild(sv('text', { x: W - m.r - 2, y: Y(h.y) - 4, 'text-anchor': 'end', 'font-size': 10, fill: '#666' }, h.label));
    });
    o.series.forEach(function (s, k) {
      const pts = s.points.slice().sort(function (a, b) { return a.x - b.x; });
      const g = sv('g', { class: 'series', 'data-name': s.name });
      pts.forEach(function (p) {
        if (p.lo !== undefined) {
          g.appendChild(sv('line', { x1: X(p.x), x2: X(p.x), y1: Y(p.lo), y2: Y(p.hi), stroke: s.color, 'stroke-width': 1.2 }));
          [p.lo, p.hi].forEach(function (v) { g.appendChild(sv('line', { x1: X(p.x) - 3, x2: X(p.x) + 3, y1: Y(v), y2: Y(v), stroke: s.color })); });
        }
      });
      g.appendChild(sv('polyline', { points: pts.map(function (p) { return X(p.x) + ',' + Y(p.y); }).join(' '), fill: 'none',
                                     stroke: s.color, 'stroke-width': 1.6, 'stroke-dasharray': s.dash || '' }));
      pts.forEach(function (p) {
        const c = sv('circle', { cx: X(p.x), cy: Y(p.y), r: 3, fill: s.color });
        c.appendChild(sv('title', {}, s.name + ': ' + fmtNum(p.x) + ', ' + fmtNum(p.y) + (p.lo !== undefined ? ' [' + fmtNum(p.lo) + ', ' + fmtNum(p.hi) + ']' : '')));
        g.appendChild(c);
      });
      svg.appendChild(g);
      svg.appendChild(sv('line', { x1: m.l + 8, x2: m.l + 26, y1: m.t + 8 + 14 * k, y2: m.t + 8 + 14 * k, stroke: s.color, 'stroke-width': 2, 'stroke-dasharray': s.dash || '' }));
      svg.appendChild(sv('text', { x: m.l + 30, y: m.t + 8 + 14 * k, 'dominant-baseline': 'middle', 'font-size': 10.5 }, s.name));
    });
    container.appendChild(svg);
    return svg;
  }

  // a layers × heads grid of cells made by cell(l, h): head numbers above, layer 0 on top
  function headGrid(box, cell) {
    box.style.gridTemplateColumns = 'auto repeat(' + H + ', 20px)';
    box.appendChild(el('div', { class: 'lab' }, ''));
    for (let h = 0; h < H; h++) box.appendChild(el('div', { class: 'lab', style: 'text-align:center' }, String(h)));
    for (let l = 0; l < L; l++) {
      box.appendChild(el('div', { class: 'lab' }, 'L' + l));
      for (let h = 0; h < H; h++) box.appendChild(cell(l, h));
    }
  }

  // ------------------------------------------------------------ ablation
  function renderAblation() {
    const A = D.ablation;
    if (!A) return;
    $('ablation-section').hidden = false;
    if (A.topk) {
      $('topk-block').hidden = false;
      // one view per cut method (the table holds every method, the configured one first)
      const methods = A.topk.columns.indexOf('method') < 0 ? [null]
        : col(A.topk, 'method').filter(function (m, i, all) { return all.indexOf(m) === i; });
      const box = $('topk-methods');
      box.innerHTML = '';
      $('topk-method-row').hidden = methods.length < 2;
      if (methods.length > 1) {
        methods.forEach(function (m, i) {
          const lab = el('label');
          const r = el('input', { type: 'radio', name: 'topk-method', id: 'topk-method-' + m, value: m });
          if (i === 0) r.checked = true;
          r.addEventListener('change', function () { renderTopk(m); });
          lab.appendChild(r);
          lab.appendChild(document.createTextNode(' ' + m + ' cut' + (i === 0 ? ' (configured)' : '')));
          box.appendChild(lab);
        });
      }
      renderTopk(methods[0]);
    }
    if (A.circuit_scores || A.circuit_loss) {
      $('circuit-block').hidden = false;
      table('circuit-scores-table', A.circuit_scores, 'induction score of the top induction heads: intact, after the previous-token cut, and the largest shift of a random cut (circuit_scores.parquet)');
      table('circuit-loss-table', A.circuit_loss, 'loss per token (nats) on the circuit set (circuit_loss.parquet)');
    }
    if (A.attribution) {
      $('attribution-block').hidden = false;
      headGrid($('attribution-grid'), function (l, h) {
        const c = el('div', { class: 'attr-cell', id: 'attr-' + headId(l, h), 'data-layer': String(l), 'data-head': String(h) });
        c.addEventListener('mouseenter', function () { attrReadout(l, h); });
        c.addEventListener('click', function () { selectHead(l, h, true); });
        return c;
      });
    }
    if (A.attribution_summary) {
      $('attribution-block').hidden = false;
      table('attribution-summary-table', A.attribution_summary, 'per phrase: the costliest head, heads without effect, the N costliest cut together (attribution_summary.parquet)');
    }
  }

  function rowsWhere(rec, name, value) {
    const j = rec.columns.indexOf(name);
    return { columns: rec.columns, rows: rec.rows.filter(function (r) { return r[j] === value; }) };
  }

  function renderTopk(method) {
    const T = method === null ? D.ablation.topk : rowsWhere(D.ablation.topk, 'method', method);
    $('topk-methods').dataset.method = method === null ? '' : method;
    const nT = col(T, 'n_cut_targeted') || col(T, 'k'), nR = col(T, 'n_cut_random') || col(T, 'k');
    const box = $('topk-plot');
    box.innerHTML = '';
    [['copy1', 'copy 1 (unpredictable: the control)'], ['copy2', 'copy 2 (repeated: induction can predict it)']].forEach(function (c) {
      const tg = col(T, 'targeted_' + c[0]), rm = col(T, 'random_' + c[0] + '_mean');
      if (!tg || !rm) return;
      const rlo = col(T, 'random_' + c[0] + '_min'), rhi = col(T, 'random_' + c[0] + '_max');
      const intact = col(T, 'intact_' + c[0]);
      const draws = col(T, 'n_draws');
      plot(box, {
        id: 'topk-plot-' + c[0], title: c[1] + (method ? ', ' + method + ' cut' : ''), xlabel: 'heads cut',
        ylabel: 'loss per token (nats)',
        xticks: Array.from(new Set(nT.concat(nR))).sort(function (a, b) { return a - b; }),
        series: [
          { name: 'targeted (top induction heads)', color: PALETTE[3], points: tg.map(function (y, i) { return { x: nT[i], y: y }; }) },
          { name: 'random heads' + (draws ? ' (mean, min–max of ' + draws[0] + ' draws)' : ''), color: PALETTE[0], dash: '5 3',
            points: rm.map(function (y, i) { return rlo ? { x: nR[i], y: y, lo: rlo[i], hi: rhi[i] } : { x: nR[i], y: y }; }) }
        ],
        hlines: intact ? [{ y: intact[0], label: 'intact ' + fmtNum(intact[0]) }] : []
      });
    });
    table('topk-table', T, madeBy('topk', 'results/' + D.model + '/ablation/topk.parquet') + (method ? ' (' + method + ' cut rows)' : ''));
  }

  function attrData() {
    const A = D.ablation;
    if (!A || !A.attribution) return null;
    return A.attribution[PHRASES[st.phrase].name] || null;
  }

  function renderAttribution() {
    const A = D.ablation;
    if (!A || !A.attribution) return;
    const a = attrData();
    let vmax = 0;
    if (a) a.drop.forEach(function (d) { vmax = Math.max(vmax, Math.abs(d)); });
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const c = $('attr-' + headId(l, h));
        if (!a) { c.style.background = '#eee'; c.dataset.drop = ''; continue; }
        const d = a.drop[l * H + h];
        c.style.background = divColor(d, vmax);
        c.dataset.drop = String(d);
        c.title = headLabel(l, h) + ': drop ' + fmtPts(d) + ' points';
      }
    }
    const line = $('attribution-line');
    if (!a) { line.textContent = 'no attribution for phrase “' + PHRASES[st.phrase].name + '”'; return; }
    let best = 0;
    a.drop.forEach(function (d, i) { if (d > a.drop[best]) best = i; });
    line.textContent = 'phrase “' + PHRASES[st.phrase].name + '”: p(' + a.expected + ') intact = ' + pctProb(a.p_intact) +
      '; costliest head ' + headLabel(Math.floor(best / H), best % H) + ' (drop ' + fmtPts(a.drop[best]) +
      ' points). Colour: drop in percentage points, ±' + fmtPts(vmax) + ' (' + D.colormaps.diverging_name + '; red = the head helps).';
    colorbarInto($('attr-colorbar'), vmax, 'drop (percentage points)',
                 function (v) { return (v < 0 ? '−' : '') + fmtPts(Math.abs(v)); });
  }

  function attrReadout(l, h) {
    const a = attrData();
    const ro = $('attr-readout');
    if (!a) return;
    const i = l * H + h;
    ro.dataset.layer = String(l); ro.dataset.head = String(h); ro.dataset.drop = String(a.drop[i]);
    ro.textContent = headLabel(l, h) + ': drop ' + fmtPts(a.drop[i]) + ' points (p ' + pctProb(a.p_intact) + ' → ' + pctProb(a.p_cut[i]) + ')';
  }

  // ------------------------------------------------------------ diverging colour bar, ±vmax
  function colorbarInto(box, vmax, label, fmt) {
    box.innerHTML = '';
    const W = 220, x0 = 24, svg = sv('svg', { width: W + 2 * x0, height: 36 });
    for (let k = 0; k < 44; k++) {
      const t = -vmax + (2 * vmax) * k / 43;
      svg.appendChild(sv('rect', { x: x0 + k * W / 44, y: 2, width: W / 44 + 0.5, height: 10, fill: divColor(t, vmax) }));
    }
    [-vmax, 0, vmax].forEach(function (v, k) {
      svg.appendChild(sv('text', { x: x0 + W * k / 2, y: 24, 'text-anchor': 'middle', 'font-size': 10 }, fmt(v)));
    });
    svg.appendChild(sv('text', { x: x0 + W / 2, y: 34, 'text-anchor': 'middle', 'font-size': 10 }, label));
    box.appendChild(svg);
  }

  // ------------------------------------------------------------ activation patching
  function renderPatching() {
    const P = D.patching;
    if (!P) return;
    $('patching-section').hidden = false;
    $('patching-title').textContent = P.title;
    if (P.separation) {       // whether the pairs separate clean from corrupted (protocol §5d): weak pairs, in red
      const sep = $('patching-separation');
      sep.hidden = false;
      sep.className = P.separation.weak ? 'weak-pairs' : 'muted';
      sep.textContent = P.separation.said;
      sep.dataset.weak = String(P.separation.weak);
    }
    const score = col(P.heads, 'score'), est = col(P.heads, 'estimate_score'), ld = col(P.heads, 'logit_diff');
    const m = P.summary;
    let vmax = 1e-9;
    score.concat(est, P.resid ? P.resid.score : []).forEach(function (x) { vmax = Math.max(vmax, Math.abs(x)); });
    $('patching-line').textContent = m.prompts + ' prompts; logit difference answer − distractor: clean ' + fmtNum(m.clean_logit_diff) +
      ', corrupted ' + fmtNum(m.corrupted_logit_diff) + '; score = (patched − corrupted) / (clean − corrupted). ' +
      (m.names_phrase ? m.names_phrase + '. ' : '') + 'Estimate vs exact: Pearson ' + fmtNum(m.estimate_pearson) + ', Spearman ' + fmtNum(m.estimate_spearman) +
      ', top-' + m.top10 + ' overlap ' + m.estimate_top10_overlap + '/' + m.top10 + '; exact sweep ' + fmtNum(m.exact_seconds) +
      ' s, estimate ' + fmtNum(m.estimate_seconds) + ' s. Colour: ±' + fmtNum(vmax) + ' (' + D.colormaps.diverging_name + '; red = the patch brings the clean answer back). Click a head to open its map.';
    const readout = function (l, h) {
      const i = l * H + h, ro = $('patch-readout');
      ro.dataset.layer = String(l); ro.dataset.head = String(h);
      ro.dataset.score = String(score[i]); ro.dataset.estimate = String(est[i]);
      ro.textContent = headLabel(l, h) + ': score ' + fmtNum(score[i]) + ' (logit difference ' + fmtNum(ld[i]) + '), estimate ' + fmtNum(est[i]);
    };
    [['patching-exact', 'exact', score], ['patching-estimate', 'estimate', est]].forEach(function (g) {
      headGrid($(g[0]), function (l, h) {
        const x = g[2][l * H + h];
        const c = el('div', { class: 'patch-cell', id: 'patch-' + g[1] + '-' + headId(l, h), 'data-layer': String(l),
                              'data-head': String(h), 'data-score': String(x), title: headLabel(l, h) + ': ' + fmtNum(x) });
        c.style.background = divColor(x, vmax);
        c.addEventListener('mouseenter', function () { readout(l, h); });
        c.addEventListener('click', function () { selectHead(l, h, true); });
        return c;
      });
    });
    colorbarInto($('patch-colorbar'), vmax, 'score (0 = corrupted, 1 = clean)', fmtNum);
    if (P.resid) renderResid(P.resid, vmax); else $('patching-resid-title').hidden = true;
    const order = score.map(function (_, i) { return i; }).sort(function (a, b) { return score[b] - score[a] || a - b; });
    table('patching-top-table', { columns: P.heads.columns, rows: order.slice(0, m.top10).map(function (i) { return P.heads.rows[i]; }) },
      'the top ' + m.top10 + ' heads by patching score (' + madeBy('patching_heads', 'patching/heads.parquet') + ')');
    if (P.kv_groups) {
      const k = Math.min(10, P.kv_groups.rows.length);
      table('patching-kv-table', { columns: P.kv_groups.columns, rows: P.kv_groups.rows.slice(0, k) },
        'the top ' + k + ' of ' + P.kv_groups.rows.length + ' key (k) and value (v) groups by patching score, each read by ' +
        'the query heads listed (patching/kv_groups.parquet)');
    }
  }

  // the residual stream patched at one layer and position (the rule's; hw.patch_heads(..., resid=True))
  function renderResid(R, vmax) {
    const T = R.tokens.length, box = $('patching-resid');
    if (R.positions[0] < 0) {
      $('patching-resid-title').textContent += ', positions counted from the end (−1 = each prompt\'s last token; ' +
        'a position is scored over the prompts long enough to have it)';
    }
    box.style.gridTemplateColumns = 'auto repeat(' + T + ', 20px)';
    box.appendChild(el('div', { class: 'lab' }, ''));
    R.tokens.forEach(function (t) { box.appendChild(el('div', { class: 'tok' }, t)); });
    for (let l = 0; l < R.layers; l++) {
      box.appendChild(el('div', { class: 'lab' }, 'L' + l));
      for (let p = 0; p < T; p++) {
        const x = R.score[l * T + p];
        // a pairs file's positions count from the end (-1 = each prompt's last token)
        const c = el('div', { class: 'patch-cell', id: 'patch-resid-L' + l + '-P' + p, 'data-score': String(x),
                              title: 'block ' + l + ' input, position ' + R.positions[p] + (R.positions[p] < 0 ? ' from the end' : '') +
                                     ' (' + R.tokens[p] + '): ' + fmtNum(x) });
        c.style.background = divColor(x, vmax);
        box.appendChild(c);
      }
    }
  }

  // ------------------------------------------------------------ path patching
  // The edges sender → receiver's q, k or v (circuits/paths.parquet, strongest first), drawn on
  // the heads laid out as the grid above (heads across, layers down) and listed, those whose
  // |score| reaches the threshold: circuits.edge_threshold from the table's note, editable.
  const INPUT_COLOURS = { q: PALETTE[0], k: PALETTE[1], v: PALETTE[2] };
  function renderCircuits() {
    const C = D.circuits;
    if (!C) return;
    $('circuits-section').hidden = false;
    const m = C.summary;
    $('circuits-line').textContent = m.edges + ' edges into ' + m.receivers + ' (receivers: ' + m.receivers_from +
      '; senders: ' + m.senders_from + '), each the corrupted run with the sender\'s output clean along the path into ' +
      'the receiver\'s q, k or v only; ' + m.prompts + ' prompts, logit difference clean ' + fmtNum(m.clean_logit_diff) +
      ', corrupted ' + fmtNum(m.corrupted_logit_diff) + '; score = (path-patched − corrupted) / (clean − corrupted). ' +
      m.grouped_note + '. The threshold starts at circuits.edge_threshold = ' + fmtNum(m.edge_threshold) +
      '. Colour: the receiver\'s input; width: |score|; dashed: a negative score. Click a head to open its map.';
    const box = $('edge-threshold');
    box.value = String(m.edge_threshold);
    box.addEventListener('input', function () {
      const t = parseFloat(box.value);
      drawEdges(Number.isFinite(t) && t >= 0 ? t : m.edge_threshold);
    });
    drawEdges(m.edge_threshold);
  }

  function drawEdges(threshold) {
    const E = D.circuits.edges;
    const sl = col(E, 'sender_layer'), sh = col(E, 'sender_head'), rl = col(E, 'receiver_layer'),
      rh = col(E, 'receiver_head'), inp = col(E, 'input'), sc = col(E, 'score'), ld = col(E, 'logit_diff');
    const shown = [];
    sc.forEach(function (x, i) { if (Math.abs(x) >= threshold) shown.push(i); });
    const count = $('edge-count');
    count.dataset.shown = String(shown.length);
    count.textContent = shown.length + ' of ' + sc.length + ' edges';
    const top = shown.length ? Math.max(Math.abs(sc[shown[0]]), 1e-12) : 1;  // the strongest shown: the widest line
    const dx = 40, dy = 30, x0 = 36, y0 = 22;
    const X = function (h) { return x0 + h * dx; }, Y = function (l) { return y0 + l * dy; };
    // room on the right for the curves' bend (below: 0.3 × the layers spanned, half of it drawn)
    const width = Math.max(220, Math.ceil(X(H - 1) + 16 + 0.15 * (L - 1) * dy));
    const svg = sv('svg', { width: width, height: y0 + L * dy + 12 });
    const defs = sv('defs');
    Object.keys(INPUT_COLOURS).forEach(function (k, j) {
      const mk = sv('marker', { id: 'arrow-' + k, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
                                markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse' });
      mk.appendChild(sv('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: INPUT_COLOURS[k] }));
      defs.appendChild(mk);
      const lx = x0 + 60 * j, ly = y0 + L * dy;                 // the legend, below the last layer
      svg.appendChild(sv('line', { x1: lx, y1: ly, x2: lx + 14, y2: ly, stroke: INPUT_COLOURS[k], 'stroke-width': 2 }));
      svg.appendChild(sv('text', { x: lx + 18, y: ly + 3 }, 'into ' + k));
    });
    svg.appendChild(defs);
    for (let h = 0; h < H; h++) svg.appendChild(sv('text', { x: X(h), y: 10, 'text-anchor': 'middle' }, String(h)));
    for (let l = 0; l < L; l++) svg.appendChild(sv('text', { x: 4, y: Y(l) + 3 }, 'L' + l));
    const readout = function (i) {
      const ro = $('edge-readout');
      ro.dataset.sender = headLabel(sl[i], sh[i]); ro.dataset.receiver = headLabel(rl[i], rh[i]);
      ro.dataset.input = inp[i]; ro.dataset.score = String(sc[i]);
      ro.textContent = headLabel(sl[i], sh[i]) + ' → ' + headLabel(rl[i], rh[i]) + ' (' + inp[i] + '): score ' +
        fmtNum(sc[i]) + ' (logit difference ' + fmtNum(ld[i]) + ')';
    };
    shown.slice().reverse().forEach(function (i) {           // the strongest drawn last, on top
      const x1 = X(sh[i]), y1 = Y(sl[i]), x2 = X(rh[i]), y2 = Y(rl[i]);
      const bend = 0.3 * (y2 - y1) + 6;                      // curved: edges along one column stay apart
      const e = sv('path', { class: 'edge', id: 'edge-' + i, d: 'M ' + x1 + ' ' + y1 + ' Q ' + ((x1 + x2) / 2 + bend) + ' ' +
                             ((y1 + y2) / 2) + ' ' + x2 + ' ' + (y2 - 5), stroke: INPUT_COLOURS[inp[i]],
                             'stroke-width': (0.8 + 2.4 * Math.abs(sc[i]) / top).toFixed(2),
                             'marker-end': 'url(#arrow-' + inp[i] + ')', 'data-sender': headLabel(sl[i], sh[i]),
                             'data-receiver': headLabel(rl[i], rh[i]), 'data-input': inp[i], 'data-score': String(sc[i]) });
      if (sc[i] < 0) e.setAttribute('stroke-dasharray', '4 3');
      e.appendChild(sv('title', {}, headLabel(sl[i], sh[i]) + ' → ' + headLabel(rl[i], rh[i]) + ' (' + inp[i] + '): ' + fmtNum(sc[i])));
      e.addEventListener('mouseenter', function () { readout(i); });
      svg.appendChild(e);
    });
    const receivers = new Set(rl.map(function (l, i) { return headId(l, rh[i]); }));
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const c = sv('circle', { class: 'node' + (receivers.has(headId(l, h)) ? ' receiver' : ''), id: 'node-' + headId(l, h),
                                 cx: X(h), cy: Y(l), r: 4, 'data-layer': String(l), 'data-head': String(h) });
        c.appendChild(sv('title', {}, headLabel(l, h) + (receivers.has(headId(l, h)) ? ' (a receiver)' : '')));
        c.addEventListener('click', function () { selectHead(l, h, true); });
        svg.appendChild(c);
      }
    }
    const graph = $('circuits-graph');
    graph.innerHTML = '';
    graph.appendChild(svg);
    table('circuits-edges-table', { columns: E.columns, rows: shown.map(function (i) { return E.rows[i]; }) },
      shown.length + ' edges with |score| ≥ ' + fmtNum(threshold) + ', strongest first (' +
      madeBy('circuits_paths', 'circuits/paths.parquet') + ')');
  }

  // ------------------------------------------------------------ edge circuits
  // The smallest circuit whose faithfulness reaches edges.faithful (edges/circuit.parquet, strongest
  // edge first, with the roles §5d–§5e give its heads) and every method's CPR and CMD (edges/areas.parquet).
  function renderEdges() {
    const G = D.edges;
    if (!G) return;
    $('edges-section').hidden = false;
    const m = G.summary;
    $('edges-line').textContent = m.found
      ? m.method + ': the smallest circuit of the benchmark\'s sizes whose faithfulness reaches ' + fmtNum(m.threshold) +
        ' (edges.faithful) is the top ' + m.edges + ' edges by score (' + fmtNum(m.fraction) + ' of every edge), ' +
        m.kept + ' after pruning, faithfulness ' + fmtNum(m.faithfulness) + '. Every edge outside it is patched to ' +
        'the corrupted run.'
      : m.method + ': no circuit of the benchmark\'s sizes reaches faithfulness ' + fmtNum(m.threshold) +
        ' (edges.faithful; the best: ' + fmtNum(m.best) + ').';
    table('edges-circuit-table', G.circuit, G.circuit.rows.length + ' edges, strongest first (edges/circuit.parquet)');
    table('edges-areas-table', G.areas, 'CPR (area under faithfulness, signed ranking) and CMD (area under ' +
      '|1 − faithfulness|, absolute ranking) per method; random: per draw, mean and range (edges/areas.parquet)');
  }

  // ------------------------------------------------------------ sweep
  function renderSweep() {
    const W = D.sweep;
    if (!W || !W.summary) return;
    $('sweep-section').hidden = false;
    const T = W.summary;
    const sweeps = col(T, 'sweep') || [];
    const names = Array.from(new Set(sweeps));
    const box = $('sweep-plot');
    const widths = col(T, 'width'), heads = col(T, 'heads'), mean = col(T, 'val_loss_mean'), sd = col(T, 'val_loss_std');
    const seeds = col(T, 'seeds'), shape = col(T, 'shape');
    if (!mean) { table('sweep-summary-table', T, 'results/sweep/summary.parquet'); return; }
    names.forEach(function (name, k) {
      const rows = [];
      sweeps.forEach(function (s, i) { if (s === name) rows.push(i); });
      const hv = new Set(rows.map(function (i) { return heads ? heads[i] : null; }));
      const wv = new Set(rows.map(function (i) { return widths ? widths[i] : null; }));
      let xname, xv;
      if (heads && hv.size > 1 && wv.size === 1) { xname = 'heads (width ' + widths[rows[0]] + ')'; xv = heads; }
      else if (widths && wv.size > 1) { xname = 'width' + (heads ? ' (head size ' + (widths[rows[0]] / heads[rows[0]]) + ')' : ''); xv = widths; }
      else { xname = 'configuration'; xv = rows.map(function (_, j) { return j + 1; }); }
      const pts = rows.map(function (i, j) {
        const x = xv === widths || xv === heads ? xv[i] : j + 1;
        const s = sd ? sd[i] : 0;
        return { x: x, y: mean[i], lo: mean[i] - s, hi: mean[i] + s, label: shape ? shape[i] : '' };
      });
      const log2 = (xv === widths || xv === heads) && pts.every(function (p) { return p.x > 0; });
      const nseeds = seeds ? Array.from(new Set(rows.map(function (i) { return seeds[i]; }))).join('/') : '?';
      plot(box, {
        id: 'sweep-plot-' + name, title: 'sweep “' + name + '”', xlabel: xname + (log2 ? ', log scale' : ''),
        ylabel: 'val. loss (nats/char)', xlog2: log2,
        xticks: pts.map(function (p) { return p.x; }),
        series: [{ name: 'mean ± std over ' + nseeds + ' seeds', color: PALETTE[k % PALETTE.length], points: pts }]
      });
    });
    if (W.contrast) table('sweep-contrast-table', W.contrast, 'the split sweep’s spread against seed noise and the capacity gain (results/sweep/contrast.parquet)');
    table('sweep-summary-table', T, 'results/sweep/summary.parquet');
  }

  // ------------------------------------------------------------ rotary clock
  const rot = { base: 0, d: D.rotary.distance };
  function periods(base, P) {
    const out = [];
    for (let n = 1; n <= P; n++) out.push(2 * Math.PI * Math.pow(base, (n - 1) / P));
    return out;
  }
  function buildRotary() {
    const opts = D.rotary.options;
    const P = Math.floor((S.rotary_dims || 0) / 2);
    if (!P || !opts.length) { $('rotary-body').hidden = true; $('rotary-none').hidden = false; return; }
    const bases = $('rotary-bases');
    opts.forEach(function (o, i) {
      const lab = el('label');
      const r = el('input', { type: 'radio', name: 'rotary-base', id: 'rotary-base-' + i, value: String(i), 'data-base': String(o.base) });
      if (i === 0) r.checked = true;
      r.addEventListener('change', function () { rot.base = i; renderRotary(); });
      lab.appendChild(r);
      lab.appendChild(document.createTextNode(' base ' + fmtNum(o.base) + ' (' + o.label + ')'));
      bases.appendChild(lab);
    });
    let far = S.context || 1000;
    opts.forEach(function (o) { far = Math.max(far, periods(o.base, P)[P - 1]); });
    rot.max = Math.ceil(far * 1.5);
    const slider = $('rotary-slider'), num = $('rotary-distance');
    num.max = String(rot.max);
    const toSlider = function (d) { return Math.round(1000 * Math.log1p(d) / Math.log1p(rot.max)); };
    const fromSlider = function (v) { return Math.round(Math.expm1(v / 1000 * Math.log1p(rot.max))); };
    slider.value = String(toSlider(rot.d)); num.value = String(rot.d);
    slider.addEventListener('input', function () { rot.d = fromSlider(Number(slider.value)); num.value = String(rot.d); renderRotary(); });
    num.addEventListener('input', function () {
      const d = Math.max(0, Math.round(Number(num.value) || 0));
      rot.d = d; slider.value = String(toSlider(d)); renderRotary();
    });
    renderRotary();
  }
  function renderRotary() {
    const P = Math.floor(S.rotary_dims / 2);
    const o = D.rotary.options[rot.base];
    const per = periods(o.base, P);
    const d = rot.d;
    const reach = per[P - 1];
    let unwrapped = 0;
    per.forEach(function (p) { if (p > d) unwrapped += 1; });
    const sm = $('rotary-summary');
    sm.dataset.unwrapped = String(unwrapped); sm.dataset.pairs = String(P); sm.dataset.reach = String(reach);
    sm.dataset.base = String(o.base); sm.dataset.distance = String(d);
    let txt = 'At distance ' + d.toLocaleString('en-US') + ' tokens, with base ' + fmtNum(o.base) + ' (' + o.label + '): ' +
      unwrapped + ' of ' + P + ' rotary pairs have not yet wrapped (period > distance). Pair n turns by 2π·d / T_n with period T_n = 2π·base^((n−1)/P); ' +
      'reach (the slowest pair’s period) = ' + fmtNum(reach) + ' tokens';
    if (S.context) txt += '; declared context ' + S.context.toLocaleString('en-US') + ' → margin reach ÷ context = ' + fmtNum(reach / S.context);
    sm.textContent = txt + '. This model rotates ' + S.rotary_dims + ' of its ' + S.head_dim + ' head dimensions (P = ' + P + ' pairs).';
    const box = $('rotary-clocks');
    box.innerHTML = '';
    per.forEach(function (T, k) {
      const wrapped = T <= d;
      const ang = (2 * Math.PI * d / T) % (2 * Math.PI);
      const c = el('div', { class: 'clock' + (wrapped ? ' wrapped' : ''), id: 'clock-' + (k + 1), 'data-period': String(T),
                            'data-angle': String(ang), 'data-wrapped': String(wrapped) });
      const svg = sv('svg', { width: 46, height: 46 });
      svg.appendChild(sv('circle', { class: 'face', cx: 23, cy: 23, r: 20, fill: '#fff', stroke: wrapped ? '#bbb' : PALETTE[0], 'stroke-width': 1.4 }));
      svg.appendChild(sv('line', { x1: 23, y1: 3, x2: 23, y2: 7, stroke: '#999' }));
      const turns = d / T;
      if (!wrapped) {  // the arc swept so far (less than one turn)
        const a = 2 * Math.PI * turns, x = 23 + 16 * Math.sin(a), y = 23 - 16 * Math.cos(a);
        if (turns > 0) svg.appendChild(sv('path', { d: 'M23 7 A16 16 0 ' + (a > Math.PI ? 1 : 0) + ' 1 ' + x + ' ' + y, fill: 'none', stroke: '#9ecae1', 'stroke-width': 3 }));
      }
      svg.appendChild(sv('line', { x1: 23, y1: 23, x2: 23 + 17 * Math.sin(ang), y2: 23 - 17 * Math.cos(ang),
                                   stroke: wrapped ? '#999' : PALETTE[3], 'stroke-width': 2, 'stroke-linecap': 'round' }));
      svg.appendChild(sv('circle', { cx: 23, cy: 23, r: 2, fill: '#333' }));
      svg.appendChild(sv('title', {}, 'pair ' + (k + 1) + ': period ' + fmtNum(T) + ' tokens; ' + fmtNum(turns) + ' turns at distance ' + d));
      c.appendChild(svg);
      c.appendChild(el('div', {}, 'n=' + (k + 1)));
      c.appendChild(el('div', {}, 'T=' + fmtNum(T)));
      box.appendChild(c);
    });
  }

  // ------------------------------------------------------------ KV cache
  const KV_IN = { layers: 'kv-layers', heads: 'kv-heads', kv: 'kv-kvheads', hd: 'kv-headdim', ctx: 'kv-context', bytes: 'kv-bytes' };
  const MODEL_KV = { layers: L, heads: H, kv: S.kv_heads || H, hd: S.head_dim || 0, ctx: S.context || 2048, bytes: S.bytes || 4 };
  function kvValues(v) {
    const perTok = 2 * v.layers * v.kv * v.hd * v.bytes;
    const perTokFull = 2 * v.layers * v.heads * v.hd * v.bytes;
    return [
      ['per_token', 'KV cache per token', '2 × layers × kv heads × head size × bytes', perTok, fmtBytes],
      ['at_context', 'KV cache at full context', 'per token × context', perTok * v.ctx, fmtBytes],
      ['per_token_no_sharing', 'per token without key sharing (kv heads = query heads)', '2 × layers × query heads × head size × bytes', perTokFull, fmtBytes],
      ['at_context_no_sharing', 'at full context without key sharing', 'the line above × context', perTokFull * v.ctx, fmtBytes],
      ['sharing', 'query heads per key/value head', 'query heads ÷ kv heads', v.heads / v.kv, fmtNum],
      ['cells', 'attention weights of one full pass', 'context² × query heads × layers', v.ctx * v.ctx * v.heads * v.layers, fmtNum],
      ['query_heads', 'attention maps per layer', 'query heads (one map each, shared keys or not)', v.heads, fmtNum]
    ];
  }
  function readKv() {
    const v = {};
    for (const [k, id] of Object.entries(KV_IN)) v[k] = Math.max(1, Math.round(Number($(id).value) || 0));
    return v;
  }
  function buildKv() {
    const reset = function () { for (const [k, id] of Object.entries(KV_IN)) $(id).value = String(MODEL_KV[k]); renderKv(); };
    for (const id of Object.values(KV_IN)) { $(id).addEventListener('input', renderKv); $(id).addEventListener('change', renderKv); }
    $('kv-reset').addEventListener('click', reset);
    reset();
  }
  function renderKv() {
    const v = readKv();
    const model = kvValues(MODEL_KV), mine = kvValues(v);
    const tb = document.querySelector('#kv-table tbody');
    tb.innerHTML = '';
    mine.forEach(function (row, i) {
      const same = row[3] === model[i][3];
      const tr = el('tr', { id: 'kv-row-' + row[0], class: same ? 'same' : 'changed', 'data-value': String(row[3]),
                            'data-model': String(model[i][3]) });
      tr.appendChild(el('td', { class: 'txt' }, row[1]));
      tr.appendChild(el('td', { class: 'txt muted' }, row[2]));
      tr.appendChild(el('td', {}, row[4](model[i][3])));
      tr.appendChild(el('td', {}, row[4](row[3])));
      const ratio = model[i][3] ? row[3] / model[i][3] : NaN;
      tr.appendChild(el('td', { class: 'flag' }, same ? 'unchanged' : 'changes ×' + fmtNum(ratio)));
      tb.appendChild(tr);
    });
    if (v.heads % v.kv !== 0) {
      const tr = el('tr', { class: 'changed' });
      tr.appendChild(el('td', { class: 'txt', colspan: '5' }, 'note: ' + v.kv + ' key/value heads do not divide ' + v.heads + ' query heads; a grouped-query model needs kv heads | query heads.'));
      tb.appendChild(tr);
    }
  }

  // ------------------------------------------------------------ your text (a notebook's page, hw.explore)
  // One head's reading of the text: lines from each token (left) to the tokens it reads (right), each
  // line's opacity its weight (the √ colour scale applies); hovering a token keeps its lines alone (on
  // the left: what it reads; on the right: who reads it). And the text's tokens coloured by the head's
  // attention from one position (the last, or the one clicked). The head is the page's one selected
  // head: the grid, the ranked bars and the selects of this section all set it.
  const tx = { from: null };
  const LINE_H = 16, LINE_X = [150, 290];
  function shortTok(t) { return t.length > 16 ? t.slice(0, 15) + '…' : t; }
  function buildText() {
    if (!D.text) return;
    $('text-section').hidden = false;
    $('text-line').textContent = D.text.note;
    const sel = $('text-select');
    PHRASES.forEach(function (p, i) { sel.appendChild(el('option', { value: String(i) }, p.name + ' (' + p.n + ' tokens)')); });
    sel.addEventListener('change', function () {
      st.phrase = Number(sel.value); $('phrase-select').value = sel.value; tx.from = null; renderPhrase();
    });
    const ls = $('text-layer'), hs = $('text-head');
    for (let l = 0; l < L; l++) ls.appendChild(el('option', { value: String(l) }, String(l)));
    for (let h = 0; h < H; h++) hs.appendChild(el('option', { value: String(h) }, String(h)));
    const pick = function () { selectHead(Number(ls.value), Number(hs.value), false); };
    ls.addEventListener('change', pick);
    hs.addEventListener('change', pick);
  }

  function renderText() {
    if (!D.text) return;
    const P = PHRASES[st.phrase];
    $('text-select').value = String(st.phrase);
    $('text-layer').value = String(st.layer);
    $('text-head').value = String(st.head);
    $('text-scores').textContent = headLabel(st.layer, st.head) + ' on “' + P.name + '”: ' + headScoresText(st.layer, st.head);
    if (tx.from === null || tx.from >= P.n) tx.from = P.n - 1;
    drawLines();
    drawTokens();
  }

  function lineY(i) { return 10 + i * LINE_H + LINE_H / 2; }
  function drawLines() {
    const P = PHRASES[st.phrase], n = P.n;
    const svg = sv('svg', { id: 'lines-svg', width: LINE_X[1] + 150, height: lineY(n) });
    svg.appendChild(sv('g', { id: 'lines' }));
    for (let i = 0; i < n; i++) {
      const a = sv('text', { x: LINE_X[0] - 6, y: lineY(i), 'text-anchor': 'end', 'dominant-baseline': 'middle',
                             class: 'line-tok', id: 'line-row-' + i, 'data-pos': String(i) }, shortTok(P.display[i]));
      const b = sv('text', { x: LINE_X[1] + 6, y: lineY(i), 'dominant-baseline': 'middle', class: 'line-tok',
                             id: 'line-col-' + i, 'data-pos': String(i) }, shortTok(P.display[i]));
      a.appendChild(sv('title', {}, 'position ' + i + ': ' + P.display[i]));
      b.appendChild(sv('title', {}, 'position ' + i + ': ' + P.display[i]));
      a.addEventListener('mouseenter', function () { showLines(i, null); });
      b.addEventListener('mouseenter', function () { showLines(null, i); });
      svg.appendChild(a);
      svg.appendChild(b);
    }
    svg.addEventListener('mouseleave', function () { showLines(null, null); });
    const box = $('lines-view');
    box.innerHTML = '';
    box.appendChild(svg);
    showLines(null, null);
  }

  // row: the lines from that token; col: the lines into it; neither: every line of weight above 0
  function showLines(row, col) {
    const P = PHRASES[st.phrase], n = P.n, l = st.layer, h = st.head, g = $('lines');
    g.replaceChildren();
    const one = row !== null || col !== null;
    const rows = row !== null ? [row] : [];
    if (row === null) for (let r = col === null ? 0 : col; r < n; r++) rows.push(r);
    rows.forEach(function (r) {
      const c0 = col === null ? 0 : col, c1 = col === null ? r : col;
      for (let c = c0; c <= c1; c++) {
        const q = qAt(P, l, h, r, c);
        if (q === 0) continue;
        const w = q / Q;
        g.appendChild(sv('line', { x1: LINE_X[0], y1: lineY(r), x2: LINE_X[1], y2: lineY(c), class: 'attn',
                                   'stroke-opacity': (seqIndex(w) / 255).toFixed(3), 'stroke-width': one ? 2.5 : 1.5,
                                   'data-row': String(r), 'data-col': String(c), 'data-weight': String(w) }));
      }
    });
    for (const e of document.querySelectorAll('#lines-svg text.hot')) e.classList.remove('hot');
    const ro = $('lines-readout');
    ro.dataset.row = row === null ? '' : String(row);
    ro.dataset.col = col === null ? '' : String(col);
    if (!one) { ro.textContent = 'hover a token: on the left, what it reads; on the right, who reads it'; return; }
    $(row !== null ? 'line-row-' + row : 'line-col-' + col).classList.add('hot');
    const got = Array.from(g.childNodes).map(function (e) {
      return { r: Number(e.dataset.row), c: Number(e.dataset.col), w: Number(e.dataset.weight) };
    }).sort(function (a, b) { return b.w - a.w; }).slice(0, 3);
    ro.textContent = (row !== null ? P.display[row] + ' (position ' + row + ') reads most: ' +
        got.map(function (x) { return P.display[x.c] + ' ' + pct(x.w); }).join(', ')
      : P.display[col] + ' (position ' + col + ') is read most by: ' +
        got.map(function (x) { return P.display[x.r] + ' ' + pct(x.w); }).join(', '));
  }

  function drawTokens() {
    const P = PHRASES[st.phrase], n = P.n, f = tx.from;
    const box = $('tokens-view');
    box.innerHTML = '';
    box.dataset.from = String(f);
    for (let j = 0; j < n; j++) {
      const w = j <= f ? weightAt(P, st.layer, st.head, f, j) : null;
      const t = el('span', { class: 'tok' + (j === f ? ' from' : '') + (j > f ? ' after' : ''), id: 'tok-' + j,
                             'data-pos': String(j), 'data-weight': w === null ? '' : String(w),
                             title: 'position ' + j + (w === null ? ' (after the position read from)' : ': ' + pct(w)) }, P.display[j]);
      if (w !== null) {
        const a = seqIndex(w) / 255;
        t.style.background = 'rgba(0, 114, 178, ' + a.toFixed(3) + ')';
        if (a > 0.5) t.style.color = '#fff';
      }
      t.addEventListener('click', function () { tx.from = j; drawTokens(); });
      t.addEventListener('mouseenter', function () { tokensReadout(j); });
      box.appendChild(t);
    }
    tokensReadout(null);
  }

  function tokensReadout(j) {
    const P = PHRASES[st.phrase], f = tx.from, ro = $('tokens-readout');
    ro.dataset.from = String(f);
    if (j === null || j > f) {
      ro.dataset.to = ''; ro.dataset.weight = '';
      ro.textContent = 'from ' + P.display[f] + ' (position ' + f + '); click a token to read from it';
      return;
    }
    const w = weightAt(P, st.layer, st.head, f, j);
    ro.dataset.to = String(j); ro.dataset.weight = String(w);
    ro.textContent = P.display[f] + ' → ' + P.display[j] + ': ' + pct(w);
  }

  // ------------------------------------------------------------ edge scores (hw.edge_scores)
  // The strongest edges of the graph by one method's |score|; the page holds each method's top.
  function renderEdgeScores() {
    const G = D.edge_scores;
    if (!G) return;
    $('edge-scores-section').hidden = false;
    $('edge-scores-line').textContent = G.total.toLocaleString('en-US') + ' edges scored: each one\'s score is how much the ' +
      'logit difference falls when that edge alone carries the corrupted run (first order; ' + G.methods.join(', ') +
      '). The page holds the strongest ' + G.top + ' by each method.';
    const box = $('edge-score-methods');
    G.methods.forEach(function (m, i) {
      const lab = el('label');
      const r = el('input', { type: 'radio', name: 'edge-score-method', id: 'edge-score-method-' + m, value: m });
      if (i === 0) r.checked = true;
      r.addEventListener('change', function () { edgeScoresTable(m); });
      lab.appendChild(r);
      lab.appendChild(document.createTextNode(' ' + m));
      box.appendChild(lab);
    });
    edgeScoresTable(G.methods[0]);
  }

  function edgeScoresTable(method) {
    const G = D.edge_scores, j = G.edges.columns.indexOf(method);
    const rows = G.edges.rows.slice().sort(function (a, b) { return Math.abs(b[j]) - Math.abs(a[j]); }).slice(0, G.top);
    $('edge-score-methods').dataset.method = method;
    table('edge-scores-table', { columns: G.edges.columns, rows: rows }, 'the ' + rows.length + ' strongest of ' +
      G.total.toLocaleString('en-US') + ' edges by |' + method + '| (' + madeBy('edge_scores', 'edges/scores.parquet') + ')');
  }

  // ------------------------------------------------------------ what a head writes, reads and feeds (the lens)
  // Per head: its OV copying score (a grid coloured by it, click a head), its QK same-token score, the earlier head
  // it reads most from and the later one it feeds most by the weights' composition, its direct against its total
  // effect, the strongest path patching measured into it; the verdict rows; the logit lens at the last position.
  function lensRow(l, h) {
    const G = D.lens, L0 = col(G.heads, 'layer'), H0 = col(G.heads, 'head');
    for (let i = 0; i < L0.length; i++) if (L0[i] === l && H0[i] === h) return i;
    return -1;
  }
  function lensValue(name, i) { const c = col(D.lens.heads, name); return c === null ? null : c[i]; }
  function renderLensHead(l, h) {
    const G = D.lens, i = lensRow(l, h), p = $('lens-head');
    if (!G || i < 0) return;
    p.dataset.head = headLabel(l, h);
    const parts = [headLabel(l, h) + ' writes: OV copying ' + fmtNum(lensValue('ov_copying', i)) + ' (z ' +
      fmtNum(lensValue('ov_copying_z', i)) + ')', 'matches the same token: QK ' + fmtNum(lensValue('qk_same_token', i))];
    const reads = lensValue('reads', i), feeds = lensValue('feeds', i);
    parts.push(reads ? 'reads most from ' + reads + ' (z ' + fmtNum(lensValue('reads_z', i)) + ')' : 'reads from no head');
    parts.push(feeds ? 'feeds ' + feeds + ' most (z ' + fmtNum(lensValue('feeds_z', i)) + ')' : 'feeds no head');
    if (lensValue('direct', i) !== null) {
      parts.push('direct ' + fmtNum(lensValue('direct', i)) + ' of total ' + fmtNum(lensValue('total', i)) +
        (lensValue('through_others', i) ? ': acts mostly through others' + (lensValue('resolved', i) ? '' : ' (not resolved)') : ''));
    }
    if (lensValue('strongest_path', i)) parts.push('strongest measured path in: ' + lensValue('strongest_path', i) + ' (' + fmtNum(lensValue('strongest_path_score', i)) + ')');
    p.textContent = parts.join('; ');
    for (const c of document.querySelectorAll('#lens-grid .selected')) c.classList.remove('selected');
    const cell = $('lens-cell-' + headId(l, h));
    if (cell) cell.classList.add('selected');
  }
  function renderLens() {
    const G = D.lens;
    if (!G) return;
    $('lens-section').hidden = false;
    const copying = col(G.heads, 'ov_copying'), vmax = Math.max.apply(null, copying.map(function (x) { return Math.abs(x || 0); })) || 1;
    $('lens-line').textContent = 'From the weights alone (' + madeBy('lens_circuits', 'lens/circuits.parquet') + '): each head’s OV ' +
      'copying score (1: it copies what it reads; the grid’s colour) and the heads it reads from and feeds by composition; ' +
      (G.heads.columns.indexOf('direct') >= 0 ? 'its direct effect on the answer beside patching’s total; ' : '') +
      'click a head.';
    headGrid($('lens-grid'), function (l, h) {
      const i = lensRow(l, h);
      const c = el('div', { class: 'cell', id: 'lens-cell-' + headId(l, h), title: headLabel(l, h) + ': OV copying ' + fmtNum(copying[i]) });
      c.style.background = divColor(copying[i] || 0, vmax);
      c.addEventListener('click', function () { renderLensHead(l, h); });
      return c;
    });
    if (G.verdict) table('lens-verdict-table', G.verdict, 'do the weights predict the paths that matter? Spearman’s ρ, its ' +
      'interval and the null’s (lens/verdict.parquet)');
    if (G.logit_lens) {
      const runs = Array.from(new Set(col(G.logit_lens, 'run')));
      const depth = col(G.logit_lens, 'depth'), ld = col(G.logit_lens, 'logit_diff'), run = col(G.logit_lens, 'run');
      plot($('lens-logit-lens'), { id: 'lens-logit-lens-plot', title: 'the logit lens at the last position',
        xlabel: 'depth (0: the embeddings)', ylabel: 'logit difference', hlines: [{ y: 0, label: '0' }],
        series: runs.map(function (r, k) {
          return { name: r, color: PALETTE[k % PALETTE.length], points: depth.map(function (d, i) { return { x: d, y: ld[i], run: run[i] }; })
            .filter(function (p) { return p.run === r; }) };
        }) });
    }
    table('lens-heads-table', G.heads, 'every head (' + madeBy('lens_circuits', 'lens/circuits.parquet') + ')');
    renderLensHead(st.layer, st.head);
  }

  // ------------------------------------------------------------ footer
  function footer() {
    const dataLen = json.length;
    let mapLen = 0;
    D.phrases.forEach(function (p) { mapLen += p.maps.length + p.escape_index.length + p.escape_value.length; });
    let txt = 'Attention maps are stored quantized to 1/' + Q + ' (as in attention/maps.parquet; rows sum to 1 only within that step), ' +
      'one byte per lower-triangle cell, base64: ' + (mapLen / 1024).toFixed(0) + ' KiB of ' + (dataLen / 1024).toFixed(0) + ' KiB embedded data' +
      (compressedBytes === null ? '. ' : ', zlib-compressed to ' + (compressedBytes / 1024).toFixed(0) + ' KiB. ') +
      'Colours: ' + D.colormaps.sequential_name + ' (weights), ' + D.colormaps.diverging_name + ' (signed drops).';
    const src = Object.entries(D.sources || {});
    if (src.length) txt += ' Tables: ' + src.map(function (e) { return e[0] + ' = ' + e[1]; }).join('; ') + '.';
    $('footer-note').textContent = txt;
  }

  // ------------------------------------------------------------ start
  buildPhraseSelect();
  buildText();
  buildGrid();
  buildBars();
  renderAblation();
  renderPatching();
  renderCircuits();
  renderEdges();
  renderEdgeScores();
  renderLens();
  renderSweep();
  buildRotary();
  buildKv();
  renderPhrase();
  renderBars();
  header();
  footer();
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = 'true';
});
