"""Training jobs sharing a GPU (``sweep.jobs_per_gpu``) with Snakemake's integer resources.

``--resources gpu=G`` says how many GPUs the machine has (``make`` passes
``nvidia-smi``'s count, or one per core on a machine without a GPU;
profiles/default passes 1). Snakemake's resources are integers, and it caps a
job's request at the total (a job asking for more than there is gets all of
it). So the workflow counts the ``gpu`` resource in *shares*:

* with N = ``sweep.jobs_per_gpu`` (training jobs beside each other on one GPU), M =
  ``model_jobs_per_gpu`` (the other model jobs: a studied model is small beside a large
  GPU's memory, and its jobs spend seconds starting) and a total of G given,
  :func:`share_gpus` raises the total to G × L shares before any job is planned, L the least
  common multiple of N and M;
* a training job (rule ``sweep_train``; ``induction_train`` too) asks for L / N shares, every
  other rule that runs a model for L / M.

So G × L shares hold G × M model jobs, or G × N training jobs, or any mix that fits: with
G = 1, N = 3 and M = 1, three training jobs run beside each other on the GPU, and an attention
or ablation job waits until it has the GPU to itself; with M = 4, four model jobs share it.
N = M = 1 is the plain count (one model job per GPU). On a machine without a GPU
the Makefile passes G = the number of cores: G × N shares still hold at most G
model jobs, and the cores bound the training jobs (one thread each), as before.

Nothing is counted when the total is not given (no ``--resources gpu``: no
limit), or when ``--set-resources`` sets the training rule's ``gpu`` itself —
as profiles/slurm does for every model rule: on a cluster each job gets its own
GPU (``sbatch --gpus=1``), and a GPU is not shared between cluster jobs. Then
every model job asks for 1.
"""
from __future__ import annotations

import math

TRAIN_RULE = "sweep_train"


def shares(gpus: int | None, jobs_per_gpu: int, model_jobs_per_gpu: int = 1) -> tuple[int | None, int, int]:
    """(total shares, shares of a model job, shares of a training job) for ``gpus`` GPUs
    (None: no limit) shared by ``jobs_per_gpu`` training jobs or ``model_jobs_per_gpu`` other model
    jobs each."""
    for key, n in (("sweep.jobs_per_gpu", jobs_per_gpu), ("model_jobs_per_gpu", model_jobs_per_gpu)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{key}: {n!r} must be an integer >= 1")
    whole = math.lcm(jobs_per_gpu, model_jobs_per_gpu)
    if gpus is None or whole == 1:
        return gpus, 1, 1
    return gpus * whole, whole // model_jobs_per_gpu, whole // jobs_per_gpu


def share_gpus(workflow, jobs_per_gpu: int, model_jobs_per_gpu: int = 1) -> tuple[int, int]:
    """Count the workflow's ``gpu`` resource in shares (module docstring); return the shares a
    model job and a training job ask for. Called while the rules are read, before any job."""
    total = workflow.global_resources.get("gpu").value
    overridden = "gpu" in workflow.resource_settings.overwrite_resources.get(TRAIN_RULE, {})
    counted, model_job, train_job = shares(None if overridden else total, jobs_per_gpu, model_jobs_per_gpu)
    if counted is not None and counted != total:
        workflow.global_resources["gpu"] = counted
    return model_job, train_job
