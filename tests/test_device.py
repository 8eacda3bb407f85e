"""Every tensor made where the model is: the public functions and every rule script run on a device
that is not the host (tests/elsewhere.py emulates one on the CPU), so that a tensor left on the host
stops the test here as it stops the job on a GPU — the first GPU run's edges_scores did
(``index_select``: input ids on the CPU, the model on cuda:0)."""
from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import headwatch as hw
from elsewhere import DEVICE, ENV, DeviceMixingError, elsewhere, on_device
from tiny import random_ids, tiny_model
from warmstart import SITE_DIR

ROOT = Path(__file__).resolve().parents[1]

#: A tiny model has 3 layers × 4 heads: the cut's targeted set and its random pool made to fit.
TINY_CUT = dict(top_n=3, k=[1, 2, 3], random_draws=2, guard_sequences=1)


def test_a_host_tensor_handed_to_a_model_on_the_device_is_caught():
    """The emulation can fail: host ids into a model on the device raise as CUDA does (the first GPU
    run's error), ids moved there give the CPU's numbers exactly; a number (a 0-d host tensor) and a
    host index are allowed, as on CUDA; ``.numpy()`` of a device tensor is refused."""
    model = tiny_model("llama").eval()
    ids = random_ids(2, 9)
    available = torch.cuda.is_available
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
    with elsewhere(), torch.no_grad():
        model.to("cuda")                                      # CUDA as asked for: the emulated device
        assert on_device(next(model.parameters())) and next(model.parameters()).device == DEVICE
        with pytest.raises(DeviceMixingError, match="at least two devices"):
            model(input_ids=ids, use_cache=False)
        got = model(input_ids=ids.to(DEVICE), use_cache=False).logits
        assert on_device(got) and torch.equal(got.cpu(), want)
        x = torch.ones(3, device=DEVICE)
        assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))
        assert torch.equal(x[[0, 2]].cpu(), torch.ones(2)) and x.sum().item() == 3.0
        with pytest.raises(DeviceMixingError):
            torch.index_select(x, 0, torch.tensor([0, 1]))
        with pytest.raises(TypeError, match="Use Tensor.cpu"):
            x.numpy()
        model.cpu()
    assert torch.cuda.is_available is available                                   # restored on exit


def _run_every_function(model_dir) -> dict[str, pd.DataFrame]:
    """Every public function of ``hw`` on a tiny model (``device`` auto: the emulated GPU inside
    :func:`elsewhere`, the CPU outside)."""
    m = hw.load_model(model_dir)
    cfg = hw.load_config("config/quick.yaml")
    out = {}
    sets = {name: hw.token_set(m, name, cfg) for name in ("induction", "prose", "phrases", "eval", "circuit")}
    out["token_set"] = sets["induction"]
    out["sequences"] = hw.sequences(m, ["a text of one's own", "and another"], repeat=True)
    out["attention_maps"] = hw.attention_maps(m, sets["phrases"], 100, 3)
    out["head_scores"] = scores = hw.head_scores(m, sets["induction"], sets["prose"], 4)
    out["top_heads"] = pd.DataFrame(hw.top_heads(scores, "induction", 2), columns=["layer", "head"])
    cut = dict(cfg["ablation"], **TINY_CUT)
    out["cut_heads"] = hw.cut_heads(m, scores, sets["eval"], settings=cut)
    out["cut_circuit"] = hw.cut_circuit(m, scores, sets["circuit"], sets["eval"], settings=cut)
    out["cut_each_head"] = hw.cut_each_head(m, sets["phrases"], sets["prose"], sets["eval"], settings=cut)
    patching = dict(cfg["patching"], n=4, guard_prompts=2, top_k=2)
    out["prompt_pairs"] = prompts = hw.prompt_pairs(m, settings=patching)
    out["patch_heads"] = heads = hw.patch_heads(m, prompts, patching, resid=True, positions=True, phrases=sets["phrases"])
    out["patch_positions"] = hw.patch_positions(m, prompts, heads, patching, positions_all_heads=2)
    out["patch_kv_groups"] = hw.patch_kv_groups(m, prompts, patching)
    out["attribution"] = hw.attribution(m, prompts, top_k=3)
    out["path_patching"] = hw.path_patching(m, prompts, heads, patching=patching, receivers_top_k=1)
    out["edge_scores"] = edges = hw.edge_scores(m, prompts)
    out["edge_faithfulness"] = hw.edge_faithfulness(m, prompts, edges, random_draws=5)
    out["direct_effects"] = direct = hw.direct_effects(m, prompts, heads)
    out["logit_lens"] = hw.logit_lens(m, prompts)
    out["weight_circuits"] = hw.weight_circuits(m, null_draws=20)
    out["guards_of"] = hw.guards_of(heads)
    assert direct.attrs["tables"]["heads"] is not None
    out["explore"] = _explored(hw.explore(m, "a text of one's own", scores, heads=heads), m)
    out["load_config"] = pd.DataFrame([{"n": cfg["patching"]["n"]}])
    out["load_model"] = pd.DataFrame([{"device": str(next(m.model.parameters()).device)}])
    return out


def _explored(page, m) -> pd.DataFrame:
    """The attention maps an explorer page holds, decoded: what the page shows, as a table."""
    import base64
    import json
    import zlib

    from headwatch.explorer.build import COMPRESSED, decode_phrase

    packed = page.html.split(f'data-encoding="{COMPRESSED}">', 1)[1].split("</script>", 1)[0]
    payload = json.loads(zlib.decompress(base64.b64decode(packed)))
    (entry,) = payload["phrases"]
    dense = decode_phrase(entry, entry["n"], m.adapter.n_layers, m.adapter.n_heads, payload["quantum"])
    return pd.DataFrame({"weight": dense.ravel()})


#: Columns that time or size a run: not results.
RUN_OWN = {"seconds", "forward_passes", "backward_passes"}


def test_every_public_function_keeps_its_tensors_on_the_models_device(tiny_model_dir):
    """Each function of ``hw.__all__`` runs on a model on the device (none hands the model a host
    tensor), and its table equals the CPU's within float32 rounding: where a computation runs
    changes no number. (Not bit for bit: torch splits some operations of a tensor subclass into
    other kernels — ``linear`` into a transpose and a product — so sums may round in another order.)"""
    with elsewhere():
        on = _run_every_function(tiny_model_dir)
    takes_a_model = {n for n in hw.__all__ if inspect.isfunction(getattr(hw, n))
                     and next(iter(inspect.signature(getattr(hw, n)).parameters), None) == "m"}
    assert takes_a_model <= set(on) <= set(hw.__all__), "every public function that takes a model is run on the device"
    assert on["load_model"].device.iloc[0] == str(DEVICE)
    off = _run_every_function(tiny_model_dir)
    assert off["load_model"].device.iloc[0] == "cpu"
    for name in on:
        if name == "load_model":
            continue
        a, b = on[name], off[name]
        keep = [c for c in a.columns if c not in RUN_OWN]
        pd.testing.assert_frame_equal(a[keep], b[keep], check_exact=False, rtol=1e-5, atol=1e-6, obj=name)


# ------------------------------------------------------------------ every rule script
#: The rules whose script places tensors on a device (it names one: ``device``), read from rules/*.smk.
DEVICE_RULES = {rule for f in (ROOT / "rules").glob("*.smk")
                for rule, body in re.findall(r"^rule (\w+):(.*?)(?=^\S|\Z)", f.read_text(), re.M | re.S)
                for script in re.findall(r"^    script:\s*\"\.\./(scripts/\w+\.py)\"", body, re.M)
                if "device" in (ROOT / script).read_text()}


def test_every_rule_script_runs_on_the_device(dag_run, tmp_path):
    """Every rule whose script places tensors on a device (:data:`DEVICE_RULES`: the model rules, the
    sweep's and induction's training) runs one of its jobs with ``device: auto``, which picks the
    emulated GPU, on the CPU run's own inputs (its results copied), and each table it remakes equals
    the CPU run's within float32 rounding. One job a rule: a rule's jobs run one script, and the
    emulated device costs every operation a check (a tiny training job 0.4 s on the CPU, 3 s on it);
    the rules that place nothing (tables, tokenizing, the figures and pages) would run as on the CPU."""
    import time

    from workflow import job_env, make_workdir, pristine

    workdir, configfile, _ = dag_run
    here = make_workdir(tmp_path / "device")
    shutil.copy(configfile, here / configfile.name)
    made = pristine(workdir)                 # the run's results as made (the sweep's tests add to its folder)
    shutil.copytree(made / "results", here / "results", symlinks=True)
    if (made / ".snakemake" / "metadata").is_dir():           # what each file was made from: nothing stale
        shutil.copytree(made / ".snakemake" / "metadata", here / ".snakemake" / "metadata")
    env = dict(job_env(), **{ENV: "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE_DIR), env.get("PYTHONPATH")) if p)
    targets = device_targets(here, configfile.name, env)
    assert set(targets) == DEVICE_RULES and {"sweep_train", "induction_train", "lens_direct"} <= DEVICE_RULES
    started = time.time()
    result = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", configfile.name, "--force",
                             *targets.values(), "--cores", "2", "--resources", "gpu=1"], cwd=here, env=env,
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stale = {rule: f for rule, f in targets.items() if (here / f).stat().st_mtime < started}
    assert not stale, f"every rule's job ran again: {stale}"
    logs = [p for p in (here / "results" / "logs").rglob("*.log") if p.stat().st_mtime >= started]
    placed = [p for p in logs if "device=cuda" in p.read_text() or "device cuda" in p.read_text()]
    assert len(placed) >= 10, "the model jobs ran on the (emulated) GPU"
    for rel, rtol in DEVICE_TABLES.items():
        remade = [on for on in sorted((here / "results").glob(rel)) if on.stat().st_mtime >= started]
        assert remade, f"no table {rel} was made on the device"
        for on in remade:
            off = made / on.relative_to(here)
            a, b = pd.read_parquet(on), pd.read_parquet(off)
            keep = [c for c in a.columns if not any(w in c for w in ("seconds", "tokens_per_s", "memory"))]
            pd.testing.assert_frame_equal(a[keep], b[keep], check_exact=False, rtol=rtol, atol=rtol,
                                          obj=str(on.relative_to(here)))


def device_targets(workdir: Path, configfile: str, env: dict) -> dict[str, str]:
    """{rule: one of its output files} for every rule of :data:`DEVICE_RULES` in the DAG (Snakemake's
    ``--summary``): a table :data:`DEVICE_TABLES` compares where the rule makes one, else its first."""
    out = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", configfile, "--summary", "--cores", "1"],
                         cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    files = {}
    for line in out.stdout.splitlines()[1:]:
        cells = line.split("\t")
        if len(cells) > 2 and cells[2] in DEVICE_RULES:
            files.setdefault(cells[2], []).append(cells[0])
    tables = {str(p.relative_to(workdir)) for pattern in DEVICE_TABLES for p in (workdir / "results").glob(pattern)}
    compared = lambda f: any(t == f or t.startswith(f"{f}/") for t in tables)      # a table, or a folder of them
    return {rule: sorted(fs, key=lambda f: (not compared(f), f))[0] for rule, fs in sorted(files.items())}


#: Tables compared between the device run and the CPU run, with their relative tolerance: float32
#: rounding for the model rules; training carries a rounding difference on through its steps (up to
#: ~1e-4 relative after the tiny runs' steps, 2e-4 absolute on scores near 0), so its tables are
#: compared more loosely.
DEVICE_TABLES = {"tiny-llama/scores.parquet": 1e-5, "tiny-llama/ablation/topk.parquet": 1e-5,
                 "tiny-llama/patching/heads.parquet": 1e-5, "tiny-llama/edges/scores.parquet": 1e-5,
                 "tiny-llama/circuits/paths.parquet": 1e-5, "sweep/heads_split/stacks/*/*/seed0/metrics.parquet": 1e-3,
                 "induction/markov/*/curves.parquet": 1e-3}

