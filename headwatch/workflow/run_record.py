"""The run a report describes (protocol §8), and the time a timed run took.

Every run that executes jobs (``make quick``/``run``/``quick-more`` or a plain
``snakemake --configfile ...``) records its merged configuration in
``results/run_config.yaml`` (:func:`write_record`, called by rules/report.smk when
the run starts; dry runs and ``--report`` record nothing), and ``make report``
hands that file back with ``--configfile``. The captions name the scale of the
configuration they are rendered with (:func:`run_scale`: paper, quick, quick with
the studies, or custom with the keys that differ), and the workflow page says
where it differs from the recorded run (:func:`recorded_run`).
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import resource
import shlex
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from .. import paths
from ..markup import escaped
from .provenance import DirtyTreeError, RunRecordError, require_clean_tree
from ..settings.sweep import train_of

# The overlays that define the scales (Makefile: make quick, quick-more, laptop, laptop-more).
SCALES = [
    ("paper", "paper scale", []),
    ("quick", "quick scale", ["config/quick.yaml"]),
    ("quick+studies", "quick scale with the sweep studies", ["config/quick.yaml", "config/quick_more.yaml"]),
    ("laptop", "laptop scale (the sweep only)", ["config/laptop.yaml"]),
    ("laptop+studies", "laptop scale with the sweep studies (the sweep only)",
     ["config/laptop.yaml", "config/laptop_more.yaml"]),
    ("laptop-long", "laptop scale, 4x longer (1, 4 and 32 heads; the sweep only)",
     ["config/laptop.yaml", "config/laptop_long.yaml"]),
]
COMPUTED_KEY = "report_run"
"""The key the report's own description of the run is stored under (not part of the run's config)."""


def leaves(d: dict, prefix: tuple = ()) -> dict:
    """{path tuple: value} of a nested dict; lists and empty dicts are values."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(leaves(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def differences(a: dict, b: dict) -> list[str]:
    """Dotted keys whose values differ between two configs (a key missing on one side included)."""
    la, lb = leaves(a), leaves(b)
    return sorted(".".join(map(str, k)) for k in set(la) | set(lb) if la.get(k, KeyError) != lb.get(k, KeyError))


@functools.lru_cache(maxsize=32)
def _config_file(path: str, stamp: tuple) -> dict:
    """One config file as data, read once per version (``stamp``: its modification time and size).
    Every Snakemake run reads the scales' files (:func:`run_scale`), one after another: read with
    libyaml and once each, they cost a run 0.1 s instead of 1.4 s of pure-Python parsing
    (23 readings of 6 files)."""
    return yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def _read_config(path: Path) -> dict:
    st = path.stat()
    return copy.deepcopy(_config_file(str(path), (st.st_mtime_ns, st.st_size)))


def config_of(basedir, *files: str) -> dict:
    """config/config.yaml with ``files`` laid over it, merged the way Snakemake merges --configfile."""
    # Snakemake here, not at the top: the Makefile's timed runs (`python -m headwatch.workflow.run_record timed`)
    # start without it; the Snakefile's parse has it already.
    from snakemake.utils import update_config

    out: dict = {}
    for name in ("config/config.yaml",) + tuple(files):
        update_config(out, _read_config(Path(basedir) / name))
    return out


def without_report_key(config: dict) -> dict:
    """The configuration as the run uses it (without the report's own computed key)."""
    return {k: v for k, v in config.items() if k != COMPUTED_KEY}


def run_scale(cfg: dict, basedir) -> tuple[str, str]:
    """(scale name, sentence) of a config: which of :data:`SCALES` its scale keys — every key
    the quick overlays set — match, or 'custom' with the keys that differ from the paper scale."""
    keys = set()
    for _, _, files in SCALES:
        for name in files:
            keys |= set(leaves(_read_config(Path(basedir) / name)))
    mine = leaves(cfg)
    for name, label, files in SCALES:
        ref = leaves(config_of(basedir, *files))
        if all(mine.get(k, KeyError) == ref.get(k, KeyError) for k in keys):
            over = " and ".join(files)
            return name, f"{label} ({over + ' over ' if over else ''}config/config.yaml{'' if over else ' as it is'})"
    paper = leaves(config_of(basedir))
    off = sorted(".".join(map(str, k)) for k in keys if mine.get(k, KeyError) != paper.get(k, KeyError))
    shown = ", ".join(off[:12]) + (f" and {len(off) - 12} more keys" if len(off) > 12 else "")
    return "custom", f"custom scale (differs from the paper scale of config/config.yaml at {shown})"


def recorded_run(record, cfg: dict) -> tuple[str | None, list[str]]:
    """(config files, differences from ``cfg``) of the recorded run, or (None, []) when none is."""
    record = Path(record)
    if not record.exists():
        return None, []
    text = record.read_text()
    try:
        recorded = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise RunRecordError(f"{record} (the record of the last run) is not valid YAML; "
                             f"delete it, the next run writes it again ({err})") from err
    files = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("# config files:")), "")
    return files, differences(recorded, cfg)


def describe(config: dict, basedir, record) -> dict:
    """What the captions and the workflow page say about the run (``config["report_run"]``),
    and ``rst``: the run's config with this description, every string value escaped for
    reStructuredText (:func:`headwatch.markup.escaped`), which the captions print from. In
    ``rst`` each sweep's ``train`` is the one it trains with (:func:`train_of`: its own keys over
    the scale's ``sweep.train``), so that a caption reads one mapping per sweep."""
    cfg = without_report_key(config)
    scale, text = run_scale(cfg, basedir)
    files, diff = recorded_run(record, cfg)
    out = dict(scale=scale, scale_text=text, record=str(record), recorded_files=files,
               recorded_differences=diff)
    sw = cfg["sweep"]     # required by config/schema.yaml, validated before rules/report.smk runs this
    sweep = dict(sw, sweeps={name: dict(s, train=train_of(sw, name)) for name, s in sw["sweeps"].items()})
    return dict(out, rst=escaped(dict(cfg, sweep=sweep, **{COMPUTED_KEY: out})))


def config_files(configfiles, given) -> str:
    """The config files of a run in merge order: the Snakefile's own (``configfiles``), then
    those given with --configfile (``given``; paths relative to the working directory when
    inside it)."""
    given = [os.path.relpath(f) if not os.path.relpath(f).startswith("..") else str(f) for f in map(str, given)]
    own = [str(f) for f in configfiles if os.path.relpath(str(f)) not in given and str(f) not in given]
    return " + ".join(own + given)


def write_record(record, config: dict, files: str) -> None:
    """Record a run's merged configuration, with the files it came from.

    Two runs may start in one folder at once (``--nolock``, two users, two nodes of a cluster): each
    writes its whole record through a name of its own (:func:`headwatch.paths.written`) and puts it
    in place by one rename, so the file is always one run's record, never a mix, and no run's start
    fails on another's file. Where two runs with different configurations overlap, the record is the
    one of the run whose start came last; its header names that run (host, process, time), and the
    report's workflow page says where the configuration it is rendered with differs from it."""
    record = Path(record)
    record.parent.mkdir(parents=True, exist_ok=True)
    with paths.written(record) as tmp, open(tmp, "w") as fh:
        fh.write("# The merged configuration of the last run that executed jobs (the one that started\n"
                 "# last, where runs overlapped), written by rules/report.smk (onstart). `make report`\n"
                 "# passes it back with --configfile.\n"
                 f"# config files: {files}\n"
                 f"# written: {datetime.now().isoformat(timespec='seconds')} by process {os.getpid()} "
                 f"on {socket.gethostname()}\n")
        # (a JSON round trip turns a JSON config's OrderedDicts into plain dicts for YAML)
        yaml.safe_dump(json.loads(json.dumps(without_report_key(config))), fh, sort_keys=False, allow_unicode=True)


# ------------------------------------------------------------------ a timed run (make laptop)
def machine() -> dict:
    """The CPU model, its logical cores, the cores this process may use and the memory (Linux)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                 "unknown")
    mem = Path("/proc/meminfo").read_text().split()[1] if Path("/proc/meminfo").exists() else "0"
    return dict(cpu_model=model, logical_cores=os.cpu_count(), usable_cores=len(os.sched_getaffinity(0)),
                memory_gib=round(int(mem) / 2**20, 1))


def matmul_rate(seconds: float = 2.0, n: int = 1024) -> float:
    """float32 multiply-adds per second this machine does now: the best of ``n`` × ``n`` matrix
    products repeated for about ``seconds``, on every core this process may use — the rate against
    which a run's work sets its floor (its multiply-adds over this rate)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        best, end = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        return n ** 3 / best
    finally:
        torch.set_num_threads(threads)


def timed(name: str, command: list[str], root=".") -> int:
    """Run ``command`` (in ``root``) and add one attempt to :func:`headwatch.paths.timed_run` (``name``):
    its wall time, the CPU time of every process it ran and waited for (user + system), the load
    average before and after (1, 5, 15 min), the float32 matmul rate before and after
    (:func:`matmul_rate`), the machine, the commit and the files under the result inputs that
    differed from it. A run stopped and started again (Snakemake resumes it) adds an
    attempt to the same record, so the record holds the whole run's time until ``results/`` is
    cleaned. Returns the command's exit status (the attempt is recorded either way)."""
    root = Path(root)
    try:
        commit, dirty = require_clean_tree(root), None
    except DirtyTreeError as err:
        commit, dirty = None, str(err)
    rate_before = matmul_rate()
    before, load_before = resource.getrusage(resource.RUSAGE_CHILDREN), os.getloadavg()
    start, t0 = datetime.now().isoformat(timespec="seconds"), time.perf_counter()
    proc = subprocess.Popen(command, cwd=root)
    try:
        status = proc.wait()
    except KeyboardInterrupt:        # Ctrl-C reached the command too: let it stop, record the attempt
        status = proc.wait()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    attempt = dict(command=shlex.join(command), started=start,
                   ended=datetime.now().isoformat(timespec="seconds"), wall_s=round(wall, 1),
                   cpu_s=round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
                   load_before=list(load_before), load_after=list(os.getloadavg()),
                   matmul_macs_per_s=[round(rate_before), round(matmul_rate())], exit_status=status,
                   commit=commit, dirty=dirty, python=sys.version.split()[0], **machine())
    out = root / paths.timed_run(name)
    record = json.loads(out.read_text()) if out.exists() else dict(name=name, attempts=[])
    record["attempts"].append(attempt)
    out.parent.mkdir(parents=True, exist_ok=True)
    with paths.written(out) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{name}: {wall / 60:.1f} min wall, {attempt['cpu_s'] / 60:.1f} min CPU on {attempt['usable_cores']} "
          f"cores ({attempt['cpu_model']}); exit status {status}; attempt {len(record['attempts'])} recorded in {out}")
    return status


def main(argv=None) -> None:
    """``python -m headwatch.workflow.run_record timed NAME -- COMMAND ...`` (the Makefile's timed targets)."""
    ap = argparse.ArgumentParser(prog="python -m headwatch.workflow.run_record", description=main.__doc__)
    ap.add_argument("action", choices=["timed"])
    ap.add_argument("name", help="the record's name: results/timing/<name>.json")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command to time (give it after --)")
    sys.exit(timed(args.name, command))


if __name__ == "__main__":
    main()
