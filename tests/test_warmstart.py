"""Warm starts (tests/warmstart.py): a Snakemake script handed to a forked, preloaded process
behaves as the same script run by a fresh Python — its output, exit code, folder, environment and
signals — and nothing else is handed over."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import warmstart

ROOT = Path(__file__).resolve().parents[1]

#: What a job reports about the process it ran in: warm (torch already imported before its first
#: line), its pid, folder and an environment variable only the client had.
REPORT = """import os, sys
print("warm", "torch" in sys.modules, "pid", os.getpid(), "cwd", os.getcwd(), "var", os.environ.get("ONLY_HERE"))
print("to stderr", file=sys.stderr)
"""


@pytest.fixture(scope="module")
def server():
    from workflow import WARM       # the server this test process's Snakemake runs use

    return WARM


def script(folder: Path, body: str, name: str = "tmpab12.job.py") -> Path:
    scripts = folder / ".snakemake" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    path = scripts / name
    path.write_text(body)
    return path


def run(path: Path, env: dict, **kw) -> subprocess.CompletedProcess:
    # relative, as Snakemake writes it: `python .snakemake/scripts/tmp….py` in the workdir
    return subprocess.run([sys.executable, str(path.relative_to(path.parents[2]))], cwd=path.parents[2],
                          env=env, capture_output=True, text=True, timeout=120, **kw)


def fields(stdout: str) -> dict:
    words = stdout.split()
    return dict(zip(words[::2], words[1::2]))


def test_only_a_snakemake_script_is_handed_over():
    assert warmstart.is_snakemake_script([".snakemake/scripts/tmpx.scores_heads.py"])
    assert warmstart.is_snakemake_script(["/w/.snakemake/scripts/tmpx.scores_heads.py"])
    assert not warmstart.is_snakemake_script([".snakemake/scripts/tmpx.py", "arg"])
    assert not warmstart.is_snakemake_script(["scripts/scores_heads.py"])
    assert not warmstart.is_snakemake_script(["-c"])
    assert not warmstart.is_snakemake_script([""])


def test_the_preload_holds_the_scripts_imports_and_every_familys_model_module():
    names = warmstart.preload_modules(ROOT)
    assert {"torch", "snakemake.script", "headwatch.model.load", "headwatch.jobs",
            "transformers.models.llama.modeling_llama", "transformers.models.gpt2.modeling_gpt2"} <= set(names)
    assert "__future__" not in names and len(names) == len(set(names))


def test_a_handed_over_job_runs_warm_where_and_as_its_client_said(server, tmp_path):
    path = script(tmp_path, REPORT + "open('made.txt', 'w').write('x')\nraise SystemExit(3)\n")
    env = server.env(dict(os.environ, ONLY_HERE="client's"))
    cold = run(path, dict(os.environ, ONLY_HERE="client's"))
    warm = run(path, env)
    assert cold.returncode == warm.returncode == 3
    assert fields(cold.stdout)["warm"] == "False" and fields(warm.stdout)["warm"] == "True"
    assert fields(warm.stdout)["cwd"] == str(tmp_path) and fields(warm.stdout)["var"] == "client's"
    assert warm.stderr == cold.stderr == "to stderr\n"
    assert (tmp_path / "made.txt").read_text() == "x"


def test_a_failing_job_fails_its_client_with_its_traceback(server, tmp_path):
    path = script(tmp_path, "def f():\n    raise ValueError('the reason')\nf()\n")
    result = run(path, server.env())
    assert result.returncode == 1
    assert "ValueError: the reason" in result.stderr and "f()" in result.stderr


def test_a_signal_to_the_client_reaches_the_job_and_the_client_dies_of_it(server, tmp_path):
    pidfile = tmp_path / "pid"
    path = script(tmp_path, f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
                            "time.sleep(60)\n")
    client = subprocess.Popen([sys.executable, str(path)], cwd=tmp_path, env=server.env())
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.05)
    job = int(pidfile.read_text())
    assert job != client.pid
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == -signal.SIGTERM
    while alive(job):
        assert time.monotonic() < deadline, "the job outlived its client's SIGTERM"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_job_whose_server_is_gone_starts_cold_and_says_so(tmp_path):
    path = script(tmp_path, REPORT)
    result = run(path, warmstart.job_env(tmp_path / "no-such-socket", dict(os.environ)))
    assert result.returncode == 0 and fields(result.stdout)["warm"] == "False"
    assert "does not answer" in result.stderr and "starts cold" in result.stderr


def test_any_other_python_is_left_alone(server, tmp_path):
    result = subprocess.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"],
                            env=server.env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "False"


def test_jobs_that_start_while_others_end_keep_their_exit_codes(server, tmp_path):
    """Many short jobs at once, each starting while others end: every client exits with its own
    job's code. (multiprocessing's Process.start() polls every other child; two threads reading one
    child's status pipe race, and the loser records 255 for a job that exited 0.)"""
    env = server.env(dict(os.environ))
    codes = [i % 3 for i in range(48)]
    clients = [subprocess.Popen([sys.executable, f".snakemake/scripts/tmp{i:02d}.job.py"],
                                cwd=script(tmp_path, f"import sys, time\ntime.sleep({i % 4} / 200)\nsys.exit({c})\n",
                                           name=f"tmp{i:02d}.job.py").parents[2],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for i, c in enumerate(codes)]
    got = [c.wait(timeout=120) for c in clients]
    assert got == codes, [(i, g, c.stderr.read()) for i, (g, c) in enumerate(zip(got, clients)) if g != codes[i]]
