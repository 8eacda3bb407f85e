"""docs/install.md's fallback: where PyTorch's CPU index cannot be reached, `make venv` installs the
same torch release from PyPI and says so (run here against a stand-in pip: nothing is downloaded)."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = """#!/bin/sh
echo "$*" >> "{log}"
case "$*" in *--index-url*) exit {index_exit};; esac
exit 0
"""


def torch_step(tmp_path, index_exit: int):
    pip, log = tmp_path / "pip", tmp_path / "calls.log"
    pip.write_text(STUB.format(log=log, index_exit=index_exit))
    pip.chmod(0o755)
    done = subprocess.run(["make", "--no-print-directory", "venv-torch", f"PIP={pip}", "TORCH=cpu",
                           "TORCH_CPU_INDEX=http://127.0.0.1:9/whl/cpu"], cwd=ROOT, capture_output=True, text=True)
    return done, log.read_text().splitlines() if log.exists() else []


def test_an_unreachable_cpu_index_falls_back_to_pypi_and_says_so(tmp_path):
    pin = re.search(r"^torch==\S+", (ROOT / "requirements.txt").read_text(), re.M).group(0)
    done, calls = torch_step(tmp_path, index_exit=1)
    assert done.returncode == 0, done.stderr
    assert calls == [f"install --quiet --no-deps --index-url http://127.0.0.1:9/whl/cpu {pin}", f"install --quiet {pin}"]
    said = [line for line in done.stdout.splitlines() if line.startswith("venv: ")]
    assert said and "PyTorch's CPU index (http://127.0.0.1:9/whl/cpu) cannot be reached: the same torch" in said[0]
    (tmp_path / "ok").mkdir()
    ok, calls = torch_step(tmp_path / "ok", index_exit=0)
    assert ok.returncode == 0 and calls == [f"install --quiet --no-deps --index-url http://127.0.0.1:9/whl/cpu {pin}"]
    assert not [line for line in ok.stdout.splitlines() if line.startswith("venv: ")]


def test_the_install_page_says_the_fallback():
    text = (ROOT / "docs" / "install.md").read_text()
    assert "When PyTorch's CPU index cannot be reached" in text and "TORCH_CPU_INDEX=" in text
