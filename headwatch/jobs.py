"""Glue between Snakemake scripts and the library: logging to the rule's log, the workflow's files,
and the progress a long computation shows (:func:`progress`).

Every script runs its work inside :func:`log_to`, which

* sends stderr and ``logging`` to the rule's log and caps torch's threads;
* ends the log with one ``resources:`` line — the device the job used (CUDA
  when the process touched it), its peak GPU memory (torch's allocator: tensors
  and reserved), its peak resident memory and its wall time —, also when the
  job fails; :func:`read_resources` reads it back;
* keeps the log of a failed attempt (an exception, Ctrl-C, or a SIGTERM, e.g. a
  cluster's preemption) under a second name, ``<log>.attempt-<n>.log`` (a hard
  link, so later lines reach both names), because Snakemake removes the rule's
  log before it reruns the job, and beside it the tables a failed guard computed
  (:func:`keep_failed_tables`). A job that links its attempt's log itself at the
  start (training, which must survive a SIGKILL too) is left alone.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

log = logging.getLogger("headwatch.jobs")

MIB = 2 ** 20
#: The last line :func:`log_to` writes to a rule's log (after the timestamp and logger name).
RESOURCES = "resources:"
#: What a run of the workflow reads beside the library: the Snakefile and what it includes or reads
#: (environment.yml: the rules' conda environment).
WORKFLOW_FILES = ("Snakefile", "rules", "scripts", "config", "report", "environment.yml")


def copy_workflow(root: str | Path, dest: str | Path) -> Path:
    """The workflow's files (:data:`WORKFLOW_FILES`) of the repository ``root`` copied into ``dest``
    (created; files there are replaced, ``results/`` and ``.snakemake/`` left as they are)."""
    root, dest = Path(root), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def resources(wall_s: float | None = None) -> dict:
    """The process's device (``cuda:<i>`` when it initialised CUDA, else ``cpu``), the GPU's name and
    its peak memory held by torch (MiB: ``max_memory_allocated`` / ``max_memory_reserved``, since the
    start or the last reset of the peak statistics), the peak resident set (MiB, ``ru_maxrss``)."""
    rec: dict = dict(device="cpu")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        i = torch.cuda.current_device()
        rec.update(device=f"cuda:{i}", gpu=torch.cuda.get_device_name(i),
                   peak_gpu_allocated_mib=round(torch.cuda.max_memory_allocated(i) / MIB, 1),
                   peak_gpu_reserved_mib=round(torch.cuda.max_memory_reserved(i) / MIB, 1))
    rec["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux
    if wall_s is not None:
        rec["wall_s"] = round(wall_s, 3)
    return rec


def format_resources(rec: dict) -> str:
    """``resources: key=value ...`` (values with spaces quoted)."""
    return " ".join([RESOURCES] + [f'{k}="{v}"' if " " in str(v) else f"{k}={v}" for k, v in rec.items()])


_FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')


def read_resources(text: str) -> dict | None:
    """The last ``resources:`` record of a log's text (numbers as floats), or None."""
    lines = [ln for ln in text.splitlines() if f" {RESOURCES} " in f" {ln} "]
    if not lines:
        return None
    out = {}
    for key, value in _FIELD.findall(lines[-1].split(RESOURCES, 1)[1]):
        value = value.strip('"')
        try:
            out[key] = float(value)
        except ValueError:
            out[key] = value
    return out


def _attempt_number(path: Path) -> int:
    tail = path.stem.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def keep_attempt_log(log_file: str | Path | None, copy: bool = True) -> tuple[Path | None, list[str]]:
    """Give this attempt's log a second name ``<log>.attempt-<n>.log`` (n = one more than the
    attempts kept so far), because Snakemake removes a rule's log before it reruns the job: a hard
    link (it holds everything written to the log later, even if the process is killed), else,
    with ``copy``, a copy of the log as it is now. When one of the kept names already is this
    file (a job that kept its log at its start: training, which must survive a SIGKILL), that
    name is the attempt's and nothing is added. Returns the attempt's name (None when there is no
    log or it cannot be kept) and the names kept by the earlier attempts, which did not finish
    (both written to the log)."""
    if log_file is None:
        return None, []
    log_file = Path(log_file)
    kept = sorted(log_file.parent.glob(f"{log_file.stem}.attempt-*.log"), key=_attempt_number)
    for p in kept:
        with contextlib.suppress(OSError):
            if os.path.samefile(p, log_file):
                return p, [str(q) for q in kept if q != p]
    link = log_file.with_name(f"{log_file.stem}.attempt-{1 + max(map(_attempt_number, kept), default=0)}.log")
    try:
        os.link(log_file, link)
    except OSError as err:
        try:
            if not copy:
                raise
            shutil.copyfile(log_file, link)
        except OSError:
            log.warning("cannot keep this attempt's log as %s (%s)", link, err)
            link = None
    if kept:
        log.warning("logs of earlier attempts that did not finish: %s", [str(p) for p in kept])
    return link, [str(p) for p in kept]


class Terminated(SystemExit):
    """SIGTERM, turned into an exception so that the log records the failure and is kept."""


@contextlib.contextmanager
def _sigterm_raises():
    """While inside, SIGTERM raises :class:`Terminated` (exit status 143) in the main thread, where
    the default action would end the process without a word in the log."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stamp(fh, logger: str, message: str) -> None:
    fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {logger} {message}\n")


_RUN: dict = {}
_PROGRESS = {"on": os.environ.get("HEADWATCH_PROGRESS", "1") != "0"}
#: Seconds before a bar shows: a short pass shows none.
PROGRESS_DELAY = 2.0


def set_progress(on: bool) -> None:
    """Show progress bars (``True``, the default) or not — the one switch for every long call
    (``hw.patch_heads``, ``hw.cut_heads``, ``hw.path_patching``, ``hw.edge_scores``, ``hw.head_scores`` …: a
    bar over the call's named phases, :func:`phases`, and one over each phase's passes);
    ``HEADWATCH_PROGRESS=0`` in the environment starts with them off. A workflow job never shows
    bars: it logs its progress.

    >>> import headwatch as hw
    >>> hw.set_progress(False)     # quiet, e.g. for a notebook that is executed as a test
    >>> hw.set_progress(True)
    """
    _PROGRESS["on"] = bool(on)


def progress(iterable=None, total: int | None = None, desc: str = "", unit: str = "it"):
    """``iterable`` with a progress bar (``tqdm.auto``: a widget in a notebook, a line in a terminal)
    when progress is on (:func:`set_progress`) and this is not a workflow job (a job logs lines
    instead: its log is a file); else ``iterable`` itself. Short passes show no bar (none before
    :data:`PROGRESS_DELAY` seconds)."""
    if not _PROGRESS["on"] or "config" in _RUN:
        return iterable if iterable is not None else _Quiet()
    return bar_class()(iterable, total=total, desc=desc, unit=unit, mininterval=1.0, delay=PROGRESS_DELAY, leave=False)


_BAR: dict = {}


def bar_class():
    """The bar :func:`progress` shows: ``tqdm.auto``'s, and in a notebook's kernel a subclass of its widget that
    leaves nothing behind in the saved notebook. A widget's output keeps, beside the widget, the text of the bar
    when it was first shown (``"14%|█▍ | 1/7"``), and a notebook saved without its widgets' state (or as HTML,
    ``jupyter nbconvert --to html``) shows that text for good; this bar is displayed under a display id and,
    closed with ``leave=False``, empties its output (an update to an empty text) and its widgets' text: the saved
    notebook keeps no bar."""
    from tqdm.auto import tqdm

    notebook = sys.modules.get("tqdm.notebook")
    if notebook is None or not issubclass(tqdm, notebook.tqdm_notebook):
        return tqdm
    if tqdm not in _BAR:
        from IPython.display import display

        class CellBar(tqdm):
            """tqdm.auto's widget, displayed under a display id and emptied when closed without ``leave``."""

            def __init__(self, *args, **kwargs):
                self._shown = None
                super().__init__(*args, **{**kwargs, "display": False})
                if not self.disable and self.delay <= 0:
                    self._show()

            def _show(self) -> None:
                self.displayed = True
                self._shown = display(self.container, display_id=True)

            def display(self, *args, check_delay: bool = True, **kwargs):
                if check_delay and self.delay > 0 and not self.displayed:      # the delay is over: shown here
                    super().display(*args, check_delay=False, **kwargs)
                    self._show()
                    return
                super().display(*args, check_delay=check_delay, **kwargs)

            def close(self):
                closing = not self.disable and not self.leave       # tqdm's close sets disable
                super().close()
                if not closing:
                    return
                if self._shown is not None:
                    self._shown.update({"text/plain": ""}, raw=True)    # emptied: nothing stale when saved
                    self._shown = None
                for part in self.container.children:       # nor in the widgets' state a notebook may save
                    if isinstance(getattr(part, "value", None), str):
                        part.value = ""
                    part.close()

        _BAR[tqdm] = CellBar
    return _BAR[tqdm]


class Phases:
    """The named phases of one long call (:func:`phases`): calling it with a name starts that phase and
    ends the one before; a context manager, closed on exit (also when the call raises)."""

    def __init__(self, call: str, total: int | None = None):
        self.call, self.total, self.names = call, total, []
        self.bar = progress(total=total, desc=call, unit="phase")

    def __call__(self, name: str) -> None:
        if self.names:
            self.bar.update(1)
        self.names.append(name)
        of = f"/{self.total}" if self.total else ""
        logging.getLogger("headwatch.progress").info("%s: %s (phase %d%s)", self.call, name, len(self.names), of)
        self.bar.set_description_str(f"{self.call}: {name}", refresh=False)
        if time.time() - getattr(self.bar, "start_t", time.time()) >= PROGRESS_DELAY:
            self.bar.refresh()        # a bar already shown names the new phase now, not at its next step

    def close(self) -> None:
        if self.names:
            self.bar.update(1)
        self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def phases(call: str, total: int | None = None) -> Phases:
    """The progress of a long call over every phase, each with its name: one bar over the phases
    (``total`` of them, when known), its description the call and the phase running — the sweep, each
    guard, the estimate —, with the phase's own bar of passes beneath where it has one; in a workflow
    job (no bars) a log line per phase (logger ``headwatch.progress``).

    >>> with phases("patch_heads", 3) as step:
    ...     step("patch every head"); ...
    ...     step("guard batched_vs_loop"); ...
    """
    return Phases(call, total)


@contextlib.contextmanager
def library_progress():
    """transformers' own progress bars (loading weights, converting a GGUF) follow :func:`set_progress`
    while inside: off while progress is off or in a workflow job, as they were after."""
    if _PROGRESS["on"] and "config" not in _RUN:
        with _library_bars_in_cell():
            yield
        return
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf     # its GGUF converter calls tqdm itself
    from transformers.utils import logging as hf_logging

    was, bar = hf_logging.is_progress_bar_enabled(), gguf.tqdm
    hf_logging.disable_progress_bar()
    gguf.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf.tqdm = bar
        if was:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _library_bars_in_cell():
    """In a notebook's kernel, transformers' own bars (loading weights, converting a GGUF) as :func:`progress`'s
    (:func:`bar_class`, ``leave=False``): shown while they run, nothing left in the saved notebook."""
    bar = bar_class()
    from tqdm.auto import tqdm

    if bar is tqdm:
        yield
        return
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf
    from transformers.utils import logging as hf_logging

    def in_cell(factory, args, kwargs):
        return bar(*args, **{**kwargs, "leave": False}) if factory is tqdm else factory(*args, **kwargs)

    before, was = hf_logging.set_tqdm_hook(in_cell), gguf.tqdm
    gguf.tqdm = functools.partial(bar, leave=False)
    try:
        yield
    finally:
        gguf.tqdm = was
        hf_logging.set_tqdm_hook(before)


class _Quiet:
    """What :func:`progress` gives without an iterable when progress is off: ``update`` and ``close``
    that do nothing (and a context manager)."""

    def update(self, n: int = 1) -> None:
        pass

    def set_description_str(self, desc: str, refresh: bool = True) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def clear_outputs(outputs) -> None:
    """Remove a job's outputs as it starts. Snakemake keeps them aside until the job ends
    (:mod:`headwatch.workflow.outputs`: back if it fails), and leaves them in place meanwhile; removed
    here, an output the job then fails to write is missing — Snakemake names it — never the
    previous run's file standing as this run's."""
    for out in outputs:
        path = Path(str(out))
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def job_config() -> dict | None:
    """The config of the Snakemake run this process is a job of (set by :func:`log_to`), else None:
    what :func:`headwatch.config.checked_section` checks a public function's settings against
    instead of the checkout's config/config.yaml — the run's overlays and ``raise_bounds`` included."""
    return _RUN.get("config")


@contextlib.contextmanager
def log_to(path, threads: int | None = None):
    """Send stderr and ``logging`` (progress) to a rule's log file.

    ``threads`` (the rule's ``threads``) caps torch's intra-op threads, so that
    jobs Snakemake runs side by side do not oversubscribe the cores. In a Snakemake script, the
    run's config becomes the one the public functions check their settings against
    (:func:`job_config`: its raised bounds too), and the job's previous outputs are removed
    (:func:`clear_outputs`: Snakemake holds a copy until the job ends).
    An exception is written to the log with its traceback, the log is kept as
    ``<log>.attempt-<n>.log`` (:func:`keep_attempt_log`), and the exception is
    re-raised so the rule fails. The log always ends with the ``resources:`` line.
    """
    t0 = time.perf_counter()
    job = getattr(sys.modules.get("__main__"), "snakemake", None)     # the object Snakemake gives a script
    if job is not None and isinstance(getattr(job, "config", None), dict):
        _RUN["config"] = job.config     # the public functions check their settings against the run's config
    if job is not None:
        clear_outputs(getattr(job, "output", []))
    if threads:
        import torch     # here: the table-only jobs (no threads) start without it (tests/test_workflow.py)

        torch.set_num_threads(threads)
    with open(path, "a", buffering=1) as fh:
        old = sys.stderr
        sys.stderr = fh
        logging.basicConfig(stream=fh, level=logging.INFO, force=True,
                            format="%(asctime)s %(name)s %(message)s")
        try:
            with _sigterm_raises():
                yield logging.getLogger("headwatch")
        except SystemExit as done:
            if done.code not in (None, 0):
                _failed(fh, path)
            raise
        except BaseException:
            _failed(fh, path)
            raise
        finally:
            _stamp(fh, "headwatch.jobs", format_resources(resources(time.perf_counter() - t0)))
            sys.stderr = old


def keep_failed_tables(err: BaseException, attempt_log: str | Path) -> list[Path]:
    """What a failed guard computed, kept beside the failed attempt's log ``<log>.attempt-<n>.log``:
    each table its error carries (:attr:`headwatch.guards.GuardError.tables`) as
    ``<log>.attempt-<n>.guard-failed.<table>.parquet`` (the note in its metadata) and the call's guard
    record, the failed guard's among them, as ``<log>.attempt-<n>.guard-failed.guards.json``. Nothing
    for an error that carries no tables. Returns the files written."""
    tables = getattr(err, "tables", None) or {}
    record = getattr(err, "guards", None)
    if not tables and record is None:
        return []
    import json

    from .tableio import NonFiniteError, write_parquet

    stem = Path(attempt_log)
    out = []
    for name, table in tables.items():
        if table is None:
            continue
        dest = stem.with_name(f"{stem.stem}.guard-failed.{name}.parquet")
        try:
            write_parquet(table, dest, note=getattr(err, "note", None))
        except NonFiniteError:          # the failure may be the NaN itself: keep it as computed
            table.to_parquet(dest, index=False)
        out.append(dest)
    if record is not None:
        dest = stem.with_name(f"{stem.stem}.guard-failed.guards.json")
        dest.write_text(json.dumps(record, indent=2, default=str) + "\n")
        out.append(dest)
    return out


def _failed(fh, path) -> None:
    """The traceback, then the attempt's log kept under a second name, with the tables a failed guard
    computed beside it (:func:`keep_failed_tables`)."""
    traceback.print_exc(file=fh)
    kept, _ = keep_attempt_log(path)
    _stamp(fh, "headwatch.jobs", f"this attempt failed; its log is kept as {kept} (Snakemake removes "
           "the rule's log before it reruns the job)" if kept else
           "this attempt failed; its log could not be kept under a second name")
    err = sys.exc_info()[1]
    if err is not None:
        try:
            files = keep_failed_tables(err, kept or path)
        except (OSError, ValueError, TypeError) as failed:     # keeping them must not hide the failure itself
            _stamp(fh, "headwatch.jobs", f"the tables the failed guard computed could not be kept: {failed}")
        else:
            if files:
                _stamp(fh, "headwatch.jobs", "the tables and guard record computed before the guard failed are "
                       f"kept as {', '.join(str(f) for f in files)}")
