"""Warm starts: a Snakemake job's script run in a process forked from one that has already imported
torch, transformers and the rest, instead of a fresh Python that imports them again.

A model job on a tiny model costs 9–11 CPU s, of which about 7 s is imports (torch 2.2 s,
transformers' model classes 3.4 s, headwatch 0.6 s); the tests run hundreds of such jobs, so the
imports are most of ``make test``'s time. Users' runs start every job cold, as Snakemake does: a
forked job is not a child of the process Snakemake started, so Snakemake's ``benchmark:`` files
would time only the hand-over (the job's own ``resources:`` log line stays right). The tests use it
(``tests/workflow.py``; ``HEADWATCH_TEST_COLD=1`` turns it off), and so may anyone whose runs'
benchmark files do not matter.

How it works, with Python's own pieces:

* :class:`Server` starts ``python tests/warmstart.py serve SOCKET`` (:func:`serve`): it listens
  on a Unix socket and starts each job through :mod:`multiprocessing`'s ``forkserver``, whose
  server process imports :func:`preload_modules` once and forks a child per job from a single
  thread (forking a process that runs threads is unsafe; the listening server does).
* :func:`job_env` is the environment a Snakemake run needs to use it: ``HEADWATCH_WARMSTART`` (the
  socket) and ``PYTHONPATH`` led by ``tests/warmstart_site``, whose ``sitecustomize`` (run by
  every Python at start-up, ``site``) calls :func:`maybe_hand_over`. When the Python is running a
  Snakemake script (``.snakemake/scripts/tmp….py``, preamble and script in one file), it hands the
  job over — its arguments, working folder, environment, and its stdin, stdout and stderr
  themselves (``SCM_RIGHTS``) — and waits: signals it receives are passed on to the job, and it
  exits as the job did (the same code, or killed by the same signal). Any other Python goes on
  as usual; so does a script whose server does not answer (with a line on stderr).

This module is the tests' own (it lives in ``tests/``, which that ``sitecustomize`` puts on the job's
path to import it): the standard library only, at the top.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path

#: The environment variable that holds the server's socket (its presence turns hand-overs on).
ENV = "HEADWATCH_WARMSTART"
#: The folder whose ``sitecustomize.py`` hands Snakemake's scripts over (put first on PYTHONPATH).
SITE_DIR = Path(__file__).with_name("warmstart_site")
#: The signals a waiting client passes on to its job (Snakemake stops a job with SIGTERM; Ctrl-C
#: sends SIGINT to the whole process group, which the forked job is not in).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
_HEADER = struct.Struct("!Q")     # the request's length
_STATUS = struct.Struct("!i")     # the job's exit code; -N: killed by signal N (Process.exitcode)


def is_snakemake_script(argv: list[str]) -> bool:
    """Whether ``argv`` is how Snakemake's ``script:`` runs a job: one file in ``.snakemake/scripts``."""
    if len(argv) != 1 or not argv[0].endswith(".py"):
        return False
    folder = Path(argv[0]).absolute().parent
    return folder.name == "scripts" and folder.parent.name == ".snakemake"


def maybe_hand_over() -> None:
    """Hand this Python's job to the server named by :data:`ENV` and exit as the job does, when this
    Python runs a Snakemake script; return (the job runs here, cold) otherwise, or when the server
    does not answer."""
    path = os.environ.get(ENV)
    if not path or not is_snakemake_script(sys.argv):
        return
    body = json.dumps(dict(argv=sys.argv, cwd=os.getcwd(), env=dict(os.environ))).encode()
    try:                   # the job starts only once the whole request has arrived: until then, cold
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        socket.send_fds(conn, [_HEADER.pack(len(body))], [_open_or_null(fd) for fd in (0, 1, 2)])
        conn.sendall(body)
    except OSError as e:
        print(f"warmstart: the server at {path} does not answer ({e}); the job starts cold",
              file=sys.stderr)
        return
    _wait_for(conn)


def _open_or_null(fd: int) -> int:
    try:
        os.fstat(fd)
        return fd
    except OSError:                   # a closed stdin: the job gets /dev/null, as a child would
        return os.open(os.devnull, os.O_RDWR)


def _wait_for(conn: socket.socket) -> None:
    """Pass this process's signals on to the job; exit as the job did."""

    def forward(signum, _frame):
        try:
            conn.sendall(bytes([signum]))
        except OSError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    status = _recv_exact(conn, _STATUS.size)
    if status is None:
        print("warmstart: the server went away before the job ended", file=sys.stderr)
        os._exit(1)
    code = _STATUS.unpack(status)[0]
    if code < 0:                      # killed by a signal: die of it too, as the shell expects
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _recv_exact(conn: socket.socket, n: int, first: bytes = b"") -> bytes | None:
    data = first
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def job_env(socket_path: str | os.PathLike, env: dict | None = None) -> dict:
    """``env`` (default: this process's) with hand-overs to the server at ``socket_path`` on."""
    env = dict(os.environ if env is None else env)
    env[ENV] = str(socket_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE_DIR), env.get("PYTHONPATH")) if p)
    return env


# ------------------------------------------------------------------------------- the server side

def preload_modules(root: str | os.PathLike) -> list[str]:
    """What the forkserver imports once: every module the workflow's scripts (``root/scripts``)
    import at their top, the modules Snakemake's script preamble imports, and the transformers
    model module of every family :mod:`headwatch.model.arch` knows (the models load them on first use).
    A name that is not a module (``from m import f``) is skipped by the forkserver."""
    import ast

    from headwatch.model.arch import FAMILIES

    names = ["torch", "snakemake.script", "snakemake.iocontainers", "snakemake.logging"]
    for script in sorted(Path(root, "scripts").glob("*.py")):
        for node in ast.parse(script.read_text()).body:
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    names += ["transformers.modeling_utils",
              *(f"transformers.models.{kind}.modeling_{kind}" for kind in FAMILIES)]
    return list(dict.fromkeys(n for n in names if n != "__future__"))


class _PassedFd:
    """A file descriptor that travels to the forked job (pickled while the forkserver starts it:
    :class:`multiprocessing.reduction.DupFd` sends it over)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return _detach, (reduction.DupFd(self.fd),)


def _detach(dup) -> int:
    return dup.detach()


def run_job(request: dict, fds: tuple[int, ...]) -> None:
    """In the forked child: take the client's stdin, stdout, stderr, folder, environment and
    arguments, then run its script as ``__main__`` (as ``python script.py`` would)."""
    import runpy

    sys.stdout.flush()
    sys.stderr.flush()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)     # as a fresh Python sets them
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.path[0] = str(Path(sys.argv[0]).absolute().parent)
    if os.environ.get("HEADWATCH_ELSEWHERE") == "1":        # tests/elsewhere.py: the job on a device
        sys.path.append(str(Path(__file__).parent))
        import elsewhere

        elsewhere.install()
    runpy.run_path(sys.argv[0], run_name="__main__")


def serve(socket_path: str, root: str) -> None:
    """Listen on ``socket_path`` and start each client's job through the forkserver (one thread per
    client: it starts the job, passes the client's signals on, and sends back the exit code).
    Prints ``ready`` once the forkserver has imported :func:`preload_modules` and run a probe job;
    stops when its stdin closes (the process that started it has gone)."""
    import multiprocessing
    import multiprocessing.connection
    import threading

    ready = os.dup(1)            # the line "ready" goes there; the forkserver and the jobs it forks
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)    # inherit /dev/null, not a pipe nobody reads
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(preload_modules(root))
    probe = ctx.Process(target=_probe)
    probe.start()
    probe.join()
    if probe.exitcode != 0:
        raise SystemExit(f"warmstart: the probe job failed (exit {probe.exitcode})")
    # Every start and every poll of a job under one lock: Process.start() polls every other child
    # (multiprocessing's _cleanup), and two threads that read one child's status pipe at once race
    # (the loser reads EOF, and multiprocessing records 255 for a job that exited 0).
    polling = threading.Lock()

    def exitcode(job) -> int | None:
        with polling:
            return job.exitcode

    def one(conn: socket.socket) -> None:
        with conn:
            head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
            head = _recv_exact(conn, _HEADER.size, head)
            body = head and _recv_exact(conn, _HEADER.unpack(head)[0])
            if body is None or len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                return
            job = ctx.Process(target=run_job, args=(json.loads(body), tuple(map(_PassedFd, fds))))
            with polling:
                job.start()
            for fd in fds:
                os.close(fd)
            threading.Thread(target=_pass_signals, args=(conn, job, exitcode), daemon=True).start()
            multiprocessing.connection.wait([job.sentinel])      # ended: its status is readable
            try:
                conn.sendall(_STATUS.pack(exitcode(job)))
            except OSError:
                pass

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    threading.Thread(target=_stop_when_orphaned, args=(listener,), daemon=True).start()
    os.write(ready, b"ready\n")
    os.close(ready)
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:                   # closed by _stop_when_orphaned
            return
        threading.Thread(target=one, args=(conn,), daemon=True).start()


def _probe() -> None:
    import torch

    torch.set_num_threads(2)                      # an intra-op pool in a forked child must not hang
    torch.ones(256, 256) @ torch.ones(256, 256)


def _pass_signals(conn: socket.socket, job, exitcode) -> None:
    """Each byte the client sends is a signal for the job; the client gone (EOF) is a SIGTERM.
    ``exitcode(job)``: the job's exit code, read under the server's lock (:func:`serve`)."""
    while True:
        try:
            data = conn.recv(16)
        except OSError:
            data = b""
        if exitcode(job) is not None:
            return
        for signum in data or bytes([signal.SIGTERM]):
            try:
                os.kill(job.pid, signum)
            except ProcessLookupError:
                return
        if not data:
            return


def _stop_when_orphaned(listener: socket.socket) -> None:
    sys.stdin.buffer.read()
    listener.close()
    os._exit(0)


class Server:
    """A warm-start server for this process's Snakemake runs (started on first use of :attr:`env`,
    stopped when this process exits: the server stops when its stdin closes)."""

    def __init__(self, root: str | os.PathLike, timeout: float = 120):
        self.root, self.timeout, self._proc, self._dir = Path(root), timeout, None, None

    @property
    def socket(self) -> Path:
        if self._proc is None:
            self._start()
        return Path(self._dir.name, "sock")

    def env(self, env: dict | None = None) -> dict:
        return job_env(self.socket, env)

    def _start(self) -> None:
        import subprocess
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="hw-warm-")    # short: a socket path has ~107 bytes
        log = Path(self._dir.name, "server.log")
        with open(log, "w") as err:
            self._proc = subprocess.Popen(
                [sys.executable, __file__, "serve", str(Path(self._dir.name, "sock")),
                 str(self.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        line = _readline(self._proc.stdout, self.timeout)
        if line.strip() != "ready":
            self._proc.kill()
            raise RuntimeError(f"warmstart: the server did not start: {log.read_text()[-2000:]}")


def _readline(stream, timeout: float) -> str:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        return stream.readline() if sel.select(timeout) else ""


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"] or len(sys.argv) != 4:
        raise SystemExit("usage: python tests/warmstart.py serve SOCKET WORKFLOW_ROOT")
    import warmstart      # the module's own functions, not __main__'s copies: the jobs unpickle

    warmstart.serve(sys.argv[2], sys.argv[3])     # run_job by its module's name (tests/ is sys.path[0])
