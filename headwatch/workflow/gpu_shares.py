"""Training jobs sharing a GPU (``sweep.jobs_per_gpu``) with Snakemake's integer resources.

``--resources gpu=G`` says how many GPUs the machine has (``make`` passes
``nvidia-smi``'s count, or one per core on a machine without a GPU;
profiles/default passes 1). Snakemake's resources are integers, and it caps a
job's request at the total (a job asking for more than there is gets all of
it). So the workflow counts the ``gpu`` resource in *shares*:

* with N = ``sweep.jobs_per_gpu`` and a total of G given, :func:`share_gpus`
  raises the total to G × N shares before any job is planned;
* every rule that runs a model asks for N shares — a whole GPU — except the
  training jobs (rule ``sweep_train``), which ask for 1 share.

So G × N shares hold G model jobs, or G × N training jobs, or any mix that
fits: with G = 1 and N = 3, three training jobs run beside each other on the
GPU, and an attention or ablation job waits until it has the GPU to itself.
N = 1 is the plain count (one model job per GPU). On a machine without a GPU
the Makefile passes G = the number of cores: G × N shares still hold at most G
model jobs, and the cores bound the training jobs (one thread each), as before.

Nothing is counted when the total is not given (no ``--resources gpu``: no
limit), or when ``--set-resources`` sets the training rule's ``gpu`` itself —
as profiles/slurm does for every model rule: on a cluster each job gets its own
GPU (``sbatch --gpus=1``), and a GPU is not shared between cluster jobs. Then
every model job asks for 1.
"""
from __future__ import annotations

TRAIN_RULE = "sweep_train"


def shares(gpus: int | None, jobs_per_gpu: int) -> tuple[int | None, int, int]:
    """(total shares, shares of a model job, shares of a training job) for ``gpus`` GPUs
    (None: no limit) shared by ``jobs_per_gpu`` training jobs each."""
    if not isinstance(jobs_per_gpu, int) or isinstance(jobs_per_gpu, bool) or jobs_per_gpu < 1:
        raise ValueError(f"sweep.jobs_per_gpu: {jobs_per_gpu!r} must be an integer >= 1")
    if gpus is None or jobs_per_gpu == 1:
        return gpus, 1, 1
    return gpus * jobs_per_gpu, jobs_per_gpu, 1


def share_gpus(workflow, jobs_per_gpu: int) -> tuple[int, int]:
    """Count the workflow's ``gpu`` resource in shares (module docstring); return the shares a
    model job and a training job ask for. Called while the rules are read, before any job."""
    total = workflow.global_resources.get("gpu").value
    overridden = "gpu" in workflow.resource_settings.overwrite_resources.get(TRAIN_RULE, {})
    counted, model_job, train_job = shares(None if overridden else total, jobs_per_gpu)
    if counted is not None and counted != total:
        workflow.global_resources["gpu"] = counted
    return model_job, train_job
