"""A new user's first own patched pairs, in two prompt families (:data:`FAMILIES`), each from a ready
environment to the user's own patched pairs and their figure, in a fresh process:

* **names** — the README's notebook block, from its first line to its first figure, run as the README
  gives it; then, in the same process, ``hw.patch_heads`` on four pairs of a user's own
  (:data:`FOUR_PAIRS`: antonyms of five tokens, whose logit differences of about 11 and −8 once
  failed an absolute guard bound by float32 rounding alone), guards included, each of its phases timed;
* **arithmetic** — the README's lines up to the model's load, then four sums of a user's own
  (:data:`ARITHMETIC`: each prompt ends with the space, the answer a digit, as the README says for
  SmolLM2's digits) patched and drawn; its row says whether the pairs separate clean from corrupted
  (protocol §5d: SmolLM2 barely adds, and its scores there are not resolved).

Each row says whether the model came from a warm cache of the prepared model (``hw.load_model``'s
cache, headwatch/model/sources/cache.py) or was converted from its GGUF (``--cold``: an empty cache).

It times the parts a user waits for — importing headwatch and loading the bundled SmolLM2, then
``patch_heads`` on the README's pair with its figure saved, then ``patch_heads`` on the four pairs
(target: at most :data:`FOUR_PAIRS_TARGET_S` s on 2 idle cores) — and, with ``--setup-seconds`` (the
wall time of ``make venv`` in the same fresh clone), the whole way from a fresh clone to the figure.
``--record`` adds both rows to ``benchmarks/records/targets.json`` (``benchmarks/page.py`` writes
them into docs/benchmarks.md). Time it alone on the machine (the rows record the load before and
after).

    git clone <repo> fresh && cd fresh && time make venv
    .venv/bin/python benchmarks/first_pair.py --setup-seconds <make venv's wall seconds> [--cold] [--record]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import shutil
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from page import add_row  # noqa: E402  (the records' one writer)
from timed import clean_commit  # noqa: E402  (a clean tree but the records just written)
MARK = "__first_pair_loaded__"
FOUR = "__four_pairs__"
#: Four pairs of a user's own (the README's columns): each prompt five tokens, each answer one token.
FOUR_PAIRS = dict(clean=["The opposite of hot is", "The opposite of up is", "The opposite of light is",
                         "The opposite of wet is"],
                  corrupted=["The opposite of big is", "The opposite of fast is", "The opposite of good is",
                             "The opposite of old is"],
                  answer=[" cold", " down", " dark", " dry"], distractor=[" small", " slow", " bad", " new"])
#: The four pairs' target on 2 idle cores, guards included (seconds).
FOUR_PAIRS_TARGET_S = 15
#: Four sums of a user's own, the README's way for SmolLM2's digits: each prompt ends with the space, the
#: answer and the distractor one digit each.
ARITHMETIC = dict(clean=["3 + 4 = ", "2 + 5 = ", "1 + 6 = ", "4 + 2 = "],
                  corrupted=["3 + 5 = ", "2 + 6 = ", "1 + 7 = ", "4 + 3 = "],
                  answer=["7", "7", "7", "6"], distractor=["8", "8", "8", "7"])
FAMILY = "__family__"
FAMILIES = ("names", "arithmetic")
#: A new user's target from a ready environment to their own patched pairs and figure, each family, on 2 idle
#: cores (seconds).
FAMILY_TARGET_S = 300


def readme_block(readme: Path) -> list[str]:
    """The README's notebook block (the python fence after '## From a notebook') up to and including
    its first line that draws a figure (``hw.plot_``)."""
    text = readme.read_text()
    section = text.split("## From a notebook", 1)
    if len(section) < 2:
        raise SystemExit(f"{readme}: no '## From a notebook' section")
    fence = re.search(r"```python\n(.*?)```", section[1], re.S)
    if fence is None:
        raise SystemExit(f"{readme}: the notebook section has no python block")
    lines = fence.group(1).splitlines()
    last = next((i for i, line in enumerate(lines) if "hw.plot_" in line), None)
    if last is None:
        raise SystemExit(f"{readme}: the notebook block draws no figure (hw.plot_…)")
    return lines[:last + 1]


def program(lines: list[str]) -> str:
    """The block with a timestamp printed after the model has loaded (the line with ``load_model``),
    then ``hw.patch_heads`` on :data:`FOUR_PAIRS` with the model the block loaded: its seconds, each
    phase's (from the ``headwatch.progress`` log) and its guards' largest ratio to their bound, as
    one JSON line."""
    out = ["import time as _t; _t0 = _t.time()"]
    for line in lines:
        out.append(line)
        if "load_model(" in line:
            out.append(f"print('{MARK}', _t.time() - _t0, flush=True)")
    out.append("print('__first_pair_done__', _t.time() - _t0, flush=True)")
    out += ["import json as _json, logging as _logging, pandas as _pd, headwatch as _hw",
            "_m = next(v for v in list(globals().values()) if type(v).__name__ == 'LoadedModel')",
            "_said = []",
            "class _Phases(_logging.Handler):",
            "    def emit(self, record): _said.append((_t.time(), record.getMessage()))",
            "_log = _logging.getLogger('headwatch.progress'); _log.setLevel(_logging.INFO); _log.addHandler(_Phases())",
            "_t1 = _t.time()",
            f"_heads = _hw.patch_heads(_m, _pd.DataFrame({FOUR_PAIRS!r}))",
            "_t2 = _t.time()",
            "_ends = [t for t, _ in _said[1:]] + [_t2]",
            "_phases = [(m.split(': ', 1)[1].rsplit(' (phase', 1)[0], round(b - a, 2)) "
            "for (a, m), b in zip(_said, _ends)]",
            "_ratios = _hw.guards_of(_heads)['ratio'].dropna()",
            "assert len(_ratios), 'no guard of patch_heads compared within a bound'",
            "_ratio = _ratios.max()",
            f"print('{FOUR}', _json.dumps(dict(seconds=_t2 - _t1, phases=_phases, "
            "passed=bool(_heads.attrs['guards']['passed']), ratio=float(_ratio))), flush=True)"]
    return "\n".join(out) + "\n"


def arithmetic_program(lines: list[str]) -> str:
    """The README's lines up to the model's load (its imports and ``hw.load_model``), then :data:`ARITHMETIC`
    patched and drawn as the README's block draws its pair, timed: one JSON line with the seconds to the loaded
    model and to the figure, and the pairs' verdict (the note's ``pairs_separate`` and ``separation``)."""
    load = next(i for i, line in enumerate(lines) if "load_model(" in line)
    model = lines[load].split("=", 1)[0].strip()
    out = ["import time as _t; _t0 = _t.time()", *lines[:load + 1], "_t1 = _t.time()",
           "import json as _json, warnings as _warnings",
           f"pairs = pd.DataFrame({ARITHMETIC!r})",
           "with _warnings.catch_warnings(record=True) as _seen:",
           "    _warnings.simplefilter('always')",
           f"    heads = hw.patch_heads({model}, pairs)",
           "hw.plot_heads(heads).savefig('arithmetic.pdf')",
           "_note = heads.attrs['note']",
           f"print('{FAMILY}', _json.dumps(dict(loaded=_t1 - _t0, seconds=_t.time() - _t0, "
           "separate=bool(_note['pairs_separate']), separation=_note['separation'], "
           "warned=sum(issubclass(w.category, hw.WeakPairsWarning) for w in _seen))), flush=True)"]
    return "\n".join(out) + "\n"


def family_text(family: str, run: dict, cache: str) -> str:
    """A family's row: its seconds from a ready environment to its figure against the target, the model's part,
    the cache it loaded from and, for the arithmetic, whether its pairs separate."""
    said = (f"{family}: {run['seconds']:.1f} s from a ready environment to the patched pairs and their figure (target: "
            f"at most {FAMILY_TARGET_S // 60} min on 2 idle cores) — import and model {run['loaded']:.1f} s ({cache})")
    if "separate" in run:
        said += (f"; the pairs {'separate' if run['separate'] else 'do not separate'} clean from corrupted"
                 f"{'' if run['separate'] else ' (hw.WeakPairsWarning ×' + str(run['warned']) + ')'}")
    return said


def model_cache() -> str:
    """Whether the bundled model's entry is in the cache of prepared models now (``warm``: verified) or not."""
    import yaml

    from headwatch.model.sources import cache, source_of

    cfg = {k: v for k, v in yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["models"]["smollm2-135m"]
           .items() if k != "dtype"}
    files = cache.source_files(cfg)
    key = cache.source_key(files, source_of(cfg)[1])
    entry = cache.entry_path(key, Path(files[0]).stem)
    return "model from a warm cache" if cache.damage(entry, key) is None else "model converted from its GGUF (cold cache)"


def four_pairs_text(four: dict) -> str:
    """The four pairs' row: their seconds against the target, each phase's, the guards' verdict."""
    phases = ", ".join(f"{name} {s:.1f} s" for name, s in four["phases"])
    verdict = ("a guard failed" if not four["passed"] else
               "every guard passed, each with no difference at all (max |Δ| 0)" if four["ratio"] == 0 else
               f"every guard passed, the closest at {four['ratio']:.2g} × its bound")
    return (f"hw.patch_heads on four pairs of five tokens: {four['seconds']:.1f} s wall (target: at most "
            f"{FOUR_PAIRS_TARGET_S} s on 2 idle cores) — {phases}; {verdict}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup-seconds", type=float, help="make venv's wall time in the same fresh clone")
    ap.add_argument("--record", action="store_true", help="add the row to benchmarks/records/targets.json")
    ap.add_argument("--cold", action="store_true", help="start each family with an empty cache of prepared models "
                                                         "(the bundled GGUF converted, as at a first load)")
    args = ap.parse_args(argv)
    from headwatch.workflow.run_record import machine

    commit = clean_commit(ROOT) if args.record else None     # refused before the minute it takes, not after
    lines = readme_block(ROOT / "README.md")
    with tempfile.TemporaryDirectory() as cwd:                    # the figure lands there, not in the checkout
        env = dict(os.environ, PYTHONPATH=str(ROOT), **({"HEADWATCH_CACHE": str(Path(cwd) / "cache")} if args.cold else {}))
        load_before = os.getloadavg()[0]
        cache = model_cache() if not args.cold else "model converted from its GGUF (cold cache)"
        done = subprocess.run([sys.executable, "-c", program(lines)], cwd=cwd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"the README's block failed:\n{done.stderr[-3000:]}")
        figures = sorted(p.name for p in Path(cwd).iterdir() if p.is_file())
        if args.cold:
            shutil.rmtree(Path(cwd) / "cache")                     # the second family starts cold too
        sums = subprocess.run([sys.executable, "-c", arithmetic_program(lines)], cwd=cwd, capture_output=True,
                              text=True, env=env)
        if sums.returncode != 0:
            raise SystemExit(f"the arithmetic family failed:\n{sums.stderr[-3000:]}")
    load_after = os.getloadavg()[0]
    marks = dict(line.split()[:2] for line in done.stdout.splitlines() if line.startswith("__first_pair_"))
    loaded, finished = float(marks[MARK]), float(marks["__first_pair_done__"])
    figures_text = (f"the README's block to its first figure ({', '.join(figures)}): {finished:.1f} s — import and "
                    f"model {loaded:.1f} s, patch_heads and the figure {finished - loaded:.1f} s")
    if args.setup_seconds is not None:
        total = args.setup_seconds + finished
        figures_text += f"; with make venv's {args.setup_seconds / 60:.1f} min: {total / 60:.1f} min from a fresh clone"
    four = json.loads(next(line for line in done.stdout.splitlines() if line.startswith(FOUR)).split(" ", 1)[1])
    four_text = four_pairs_text(four)
    arithmetic = json.loads(next(line for line in sums.stdout.splitlines() if line.startswith(FAMILY)).split(" ", 1)[1])
    families = [family_text("names (the README's pair)", dict(loaded=loaded, seconds=finished), cache),
                family_text("arithmetic (four sums)", arithmetic, cache)]
    print(figures_text)
    print(four_text)
    print(*families, sep="\n")
    if args.record:
        m = machine()
        where = dict(machine=f"{m['usable_cores']} {m['cpu_model']} cores",
                     load=f"load average {load_before:.2f} before, {load_after:.2f} after",
                     command="time make venv; .venv/bin/python benchmarks/first_pair.py --setup-seconds S"
                             + " --cold" * args.cold + " --record",
                     commit=commit, date=date.today().isoformat())
        add_row("targets", dict(what="a new user's first own patched pair with its figure (README)",
                                figures=figures_text, **where))
        add_row("targets", dict(what="hw.patch_heads on four pairs of five tokens, guards included "
                                     "(benchmarks/first_pair.py's FOUR_PAIRS)", figures=four_text, **where))
        path = add_row("targets", dict(what="a new user's own patched pairs and figure, two prompt families, from a ready "
                                            "environment (benchmarks/first_pair.py)", figures="; ".join(families),
                                       **where))
        print(f"added to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
