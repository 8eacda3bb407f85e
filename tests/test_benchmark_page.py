"""docs/benchmarks.md and the README's peers block are what benchmarks/page.py writes from the
records: a timing typed into either, or a record changed without writing the page again, fails here."""
import subprocess
import sys

from conftest import ROOT


def test_the_benchmarks_page_and_the_readme_block_are_the_records():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "page.py"), "--check"], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
