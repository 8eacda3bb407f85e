"""Activation patching on a pairs file of three lengths, end to end through the patching rules
(and their figures) of the real Snakefile, in a temporary folder."""
import pandas as pd
import pytest

from headwatch.tableio import read_note, read_record
from test_pairs import ROWS
from workflow import deep_merge, make_workdir, planned_jobs, snakemake, tiny_config, write_config

MODEL = "tiny-llama"
TARGETS = [f"results/{MODEL}/patching/{t}.parquet" for t in ("heads", "resid", "positions")] + [
    f"results/{MODEL}/patching/guards.json"] + [f"figures/{MODEL}/patching/{n}.png" for n in ("heads", "resid", "top_heads")]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir):
    workdir = make_workdir(tmp_path_factory.mktemp("pairs_workflow"))
    pd.DataFrame(ROWS).to_csv(workdir / "pairs.csv", index=False)
    config = deep_merge(tiny_config(tiny_model_dir), {"patching": {"templates": None, "pairs": "pairs.csv"}})
    configfile = write_config(workdir, config)
    result = snakemake(workdir, *TARGETS, "--configfile", str(configfile))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir, configfile, config


def test_a_pairs_file_of_three_lengths_runs_through_the_patching_rules(run):
    workdir, _, _ = run
    res = workdir / "results" / MODEL / "patching"
    prompts = pd.read_parquet(res / "prompts.parquet")
    lengths = sorted(prompts["clean_ids"].map(len))
    assert len(prompts) == 3 and len(set(lengths)) == 3
    note = read_note(res / "resid.parquet")
    assert note["pairs"] == "pairs.csv" and len(note["pairs_sha256"]) == 64 and note["lengths"] == lengths
    resid = pd.read_parquet(res / "resid.parquet")
    assert sorted(set(resid["position"])) == list(range(-lengths[-1], 0))
    assert resid.groupby("position")["prompts"].first().to_dict()[-lengths[-1]] == 1
    record = read_record(workdir / "results" / MODEL / "patching" / "guards.json")
    assert record["passed"] and record["padded_vs_alone"]["passed"]
    for name in ("heads", "resid", "top_heads"):
        assert (workdir / "figures" / MODEL / "patching" / f"{name}.png").stat().st_size > 0


def test_a_changed_pairs_file_reruns_the_prompts_and_a_hostile_one_stops_before_any_job(run):
    workdir, configfile, _ = run
    assert planned_jobs(snakemake(workdir, "-n", *TARGETS, "--configfile", str(configfile))) == {}
    pd.DataFrame(ROWS[::-1]).to_csv(workdir / "pairs.csv", index=False)
    jobs = planned_jobs(snakemake(workdir, "-n", *TARGETS, "--configfile", str(configfile)))
    assert jobs.get("patching_prompts") == 1 and jobs.get("patching_sweep") == 1
    (workdir / "pairs.csv").write_text("clean,corrupted,answer,distractor\nMary met John,Alice met Bob and Tom, "
                                       "Mary, John\n")
    result = snakemake(workdir, "-n", *TARGETS, "--configfile", str(configfile))
    assert result.returncode != 0
    assert "pairs.csv, line 2: the clean prompt gives" in result.stdout + result.stderr
