"""docs/benchmarks.md and the README's peers block are what benchmarks/page.py writes from the
records: a timing typed into either, or a record changed without writing the page again, fails here."""
import subprocess
import sys

import pytest

from conftest import ROOT


def test_the_benchmarks_page_and_the_readme_block_are_the_records():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "page.py"), "--check"], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_first_pair_benchmark_runs_the_readmes_block_to_its_first_figure(tmp_path):
    """benchmarks/first_pair.py times the README's own lines (a README that changes its example
    changes what is timed), stopping at the first figure, with a mark after the model has loaded,
    then patch_heads on four pairs with the model the block loaded, phase by phase; a README whose
    block draws nothing is refused."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import first_pair

    lines = first_pair.readme_block(ROOT / "README.md")
    assert lines[0] == "import headwatch as hw" and "hw.plot_" in lines[-1]
    assert sum("hw.plot_" in x for x in lines) == 1 and any("hw.patch_heads(" in x for x in lines)
    code = first_pair.program(lines)
    assert code.index("load_model(") < code.index(first_pair.MARK) < code.index("hw.patch_heads(")
    assert code.index("hw.plot_") < code.index("_hw.patch_heads(_m, ") < code.index(first_pair.FOUR)
    compile(code, "first_pair", "exec")
    four = dict(seconds=12.34, phases=[["patch every head", 6.0], ["guard batched_vs_loop", 2.5]], passed=True,
                ratio=0.0094)
    assert first_pair.four_pairs_text(four) == (
        "hw.patch_heads on four pairs of five tokens: 12.3 s wall (target: at most 15 s on 2 idle cores) — patch every "
        "head 6.0 s, guard batched_vs_loop 2.5 s; every guard passed, the closest at 0.0094 × its bound")
    assert first_pair.four_pairs_text(dict(four, ratio=0.0)).endswith("each with no difference at all (max |Δ| 0)")
    assert first_pair.four_pairs_text(dict(four, passed=False)).endswith("; a guard failed")
    bare = tmp_path / "README.md"
    bare.write_text("## From a notebook\n\n```python\nimport headwatch as hw\n```\n")
    with pytest.raises(SystemExit, match="draws no figure"):
        first_pair.readme_block(bare)


def test_the_first_pair_benchmark_records_two_prompt_families(smollm2_tokenizer):
    """Besides the README's names pair, benchmarks/first_pair.py times four sums of a user's own from the README's
    lines up to the model to their figure (the README's way for SmolLM2's digits: pairs every check accepts), and
    each family's row says the cache the model came from; the sums' row says whether its pairs separate."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import first_pair
    from headwatch.settings.pairs import pair_errors

    assert first_pair.FAMILIES == ("names", "arithmetic")
    rows = [dict(line=i, **{c: first_pair.ARITHMETIC[c][i] for c in first_pair.ARITHMETIC}) for i in range(4)]
    assert pair_errors(rows, smollm2_tokenizer, "ARITHMETIC", "smollm2-135m") == []
    lines = first_pair.readme_block(ROOT / "README.md")
    code = first_pair.arithmetic_program(lines)
    compile(code, "arithmetic", "exec")
    load = next(line for line in lines if "load_model(" in line)
    assert code.index("import headwatch as hw") < code.index(load) < code.index("hw.patch_heads(m, pairs)") \
        < code.index("savefig('arithmetic.pdf')") < code.index(first_pair.FAMILY)
    run = dict(loaded=8.94, seconds=31.26, separate=False, separation="WEAK PAIRS: …", warned=1)
    assert first_pair.family_text("arithmetic (four sums)", run, "model from a warm cache") == (
        "arithmetic (four sums): 31.3 s from a ready environment to the patched pairs and their figure (target: at "
        "most 5 min on 2 idle cores) — import and model 8.9 s (model from a warm cache); the pairs do not separate "
        "clean from corrupted (hw.WeakPairsWarning ×1)")
    assert first_pair.family_text("names", dict(loaded=2.0, seconds=10.0), "c").endswith("import and model 2.0 s (c)")
    assert first_pair.model_cache() in ("model from a warm cache", "model converted from its GGUF (cold cache)")


def test_timed_measures_a_command_in_a_clean_checkout_and_refuses_a_dirty_one(tmp_path):
    """benchmarks/timed.py times what it runs (a command that sleeps shows its wall time, one that
    burns CPU its CPU time), passes a failure's exit status on, and refuses to time a tree with
    uncommitted changes (its figure would name a commit that is not what ran)."""
    git = dict(cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **git)
    (tmp_path / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "a.txt"], **git)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"], **git)
    timed = [sys.executable, str(ROOT / "benchmarks" / "timed.py"), "--what", "w", "--"]
    burn = "import time; time.sleep(1.2); t = time.process_time()\nwhile time.process_time() - t < 1.2: pass"
    run = subprocess.run(timed + [sys.executable, "-c", burn], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    wall = run.stdout.split("w: ", 1)[1]
    minutes, seconds = int(wall.split(" min ")[0]), float(wall.split(" min ")[1].split(" s wall")[0])
    assert 60 * minutes + seconds >= 2
    user, system = wall.split("(")[1].split(" s user + ")
    assert int(user) + int(system.split(" s system")[0]) >= 1
    failed = subprocess.run(timed + [sys.executable, "-c", "raise SystemExit(3)"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert failed.returncode == 3 and "FAILED (exit 3)" in failed.stdout
    records = tmp_path / "benchmarks" / "records"
    records.mkdir(parents=True)
    (records / "targets.json").write_text("{}\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text("")
    subprocess.run(["git", "add", "benchmarks", "docs"], **git)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r"], **git)
    (records / "targets.json").write_text('{"rows": []}\n')          # a record just written is no change,
    (tmp_path / "docs" / "benchmarks.md").write_text("# B\n")           # nor the page written from it
    assert subprocess.run(timed + ["true"], cwd=tmp_path, capture_output=True).returncode == 0
    (tmp_path / "a.txt").write_text("b\n")
    dirty = subprocess.run(timed + ["true"], cwd=tmp_path, capture_output=True, text=True)
    assert dirty.returncode == 1 and "uncommitted changes" in dirty.stderr


def test_a_new_row_replaces_its_own_days_row_only_and_the_page_follows(tmp_path, monkeypatch):
    """add_row puts the row first, replaces the row of the same name and day (not another day's, not
    another name's), refuses a row without its machine, and writes the page from the records at once."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import page

    monkeypatch.setattr(page, "RECORDS", tmp_path)
    monkeypatch.setattr(page, "PAGE", tmp_path / "benchmarks.md")
    (tmp_path / "targets.json").write_text('{"title": "T", "method": "m", "rows": []}\n')
    row = dict(what="make x", figures="1 min", machine="2 cores", load="idle", command="make x", commit="abc",
               date="2026-12-05")
    page.add_row("targets", dict(row, date="2026-12-04"))
    page.add_row("targets", dict(row, what="make y"))
    page.add_row("targets", row)
    page.add_row("targets", dict(row, figures="2 min"))
    rows = page.records()[0][1]["rows"]
    assert [(r["what"], r["date"], r["figures"]) for r in rows] == [
        ("make x", "2026-12-05", "2 min"), ("make y", "2026-12-05", "1 min"), ("make x", "2026-12-04", "1 min")]
    assert "| make x | 2 min |" in (tmp_path / "benchmarks.md").read_text()
    with pytest.raises(SystemExit, match="machine"):
        page.add_row("targets", dict(row, machine=""))


def test_the_laptop_page_says_what_a_resumed_run_and_an_older_laptop_run_mean(tmp_path):
    """A run in attempts: the times are their sums, each load names its attempt. A studies' run made at
    another commit than `make laptop`'s names that run's commit (its dense references may be that run's);
    none at the same commit or without a laptop record. A study whose every arm is best at its last
    step says the best reading is the last one, in one line."""
    import json

    import pandas as pd
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import laptop_tables

    one = dict(command="make laptop-more", started="s", ended="e", wall_s=600.0, cpu_s=1200.0, load_before=[1, 1, 1],
               load_after=[2, 2, 2], cpu_model="cpu", usable_cores=2, logical_cores=2, memory_gib=8.0, commit="b" * 40)
    two = laptop_tables.machine_lines([one, dict(one, load_before=[3, 3, 3])], "laptop-more")[0]
    assert "in 2 attempts" in two and "the times below are the attempts' sums" in two and "**20.0 min**" in two
    assert "attempt 1: 1.00, 1.00, 1.00 before" in two and "attempt 2: 3.00, 3.00, 3.00 before" in two
    assert "attempt 1" not in laptop_tables.machine_lines([one], "laptop-more")[0]

    assert laptop_tables.reference_run(tmp_path, [one]) == []                    # no laptop record
    record = tmp_path / "results" / "timing" / "laptop.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(dict(name="laptop", attempts=[dict(one, commit="a" * 40)])))
    said = laptop_tables.reference_run(tmp_path, [one])
    assert len(said) == 1 and "commit `aaaaaaa`" in said[0] and "trained at `bbbbbbb`" in said[0]
    assert laptop_tables.reference_run(tmp_path, [dict(one, commit="a" * 40)]) == []

    last = pd.DataFrame(dict(shape=["w256-h4", "w256-h4-kv1"], rise_mean=[0.0, 0.0], best_step_min=[600, 600],
                             best_step_max=[600, 600]))
    lines = laptop_tables.study_best(tmp_path, "kv_sharing", "kv", last, None, None)
    assert lines == ["At each run's best (protocol §7, \"Two readings\"): every arm's best validation loss is its "
                     "last (step 600): the best reading is the last one, its contrasts those above."]
