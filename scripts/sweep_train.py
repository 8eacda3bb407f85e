"""Train one stack of sweep models (headwatch.sweep.train.train_stack); resumes from its checkpoint.

The job's params are its members' (headwatch.sweep.plan.stack_params), each read as
headwatch.settings.sweep.TrainingJob; they share the training settings and the vocabulary. A stack
on the corpus's characters reads its ids (results/sweep/corpus); one with a ``vocab`` reads that
vocabulary's ids and its tokens' lengths in characters (results/sweep/corpus/vocab/<vocab>,
headwatch.charlm.tokenizer). Each member's files go to ``{shape}/seed{seed}/`` of the stack's
folder. A member whose own folder already holds its finished run (a stack that a seed or a shape
joined; headwatch.sweep.train.finished_run) is taken from there, not trained again."""
import os
import shutil
from pathlib import Path

import torch

from headwatch import paths
from headwatch.charlm.corpus import load_ids
from headwatch.charlm.tokenizer import load_split_ids, load_vocab, token_lengths
from headwatch.model.device import pick_device
from headwatch.settings.sweep import SweepSettings, TrainingJob
from headwatch.sweep.train import finished_run, member_fingerprint, save_trained, RunOptions, train_stack
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to
from headwatch.workflow.outputs import fresh_folder

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    torch.set_num_threads(sm.threads)
    sweep, stack = sm.wildcards.sweep, sm.wildcards.stack
    shapes = [m["shape"] for m in sm.params.job["members"]]
    jobs = [TrainingJob.from_config({k: v for k, v in m.items() if k != "shape"}) for m in sm.params.job["members"]]
    first = jobs[0]
    for job in jobs[1:]:
        if (job.train, job.precision, job.vocab, job.heads, job.compile) != (first.train, first.precision, first.vocab,
                                                                              first.heads, first.compile):
            raise ValueError("the members of a stack differ in their training settings, precision, vocabulary, "
                             "probe or compilation; headwatch.sweep.plan.stacks groups only runs that share them")
    if first.vocab is not None:
        vocab_dir = Path(sm.input.split).parent
        ids, meta = load_split_ids(vocab_dir)
        if meta["name"] != first.vocab:
            raise ValueError(f"{vocab_dir} holds vocabulary {meta['name']!r}, the job asks for {first.vocab!r}")
        lengths = token_lengths(load_vocab(vocab_dir)[0])
    else:
        (ids, meta), lengths = load_ids(sm.input.ids, sm.input.meta), None
    out = fresh_folder(sm.output[0])      # its previous contents are kept aside by Snakemake until this job ends
    todo = []
    for shape, job in zip(shapes, jobs):
        own = Path(paths.sweep_run(sweep, shape, job.seed, "metrics.parquet")).parent
        fp = member_fingerprint(meta, job.model, job.seed, job.train, job.precision, job.heads, job.compile)
        if finished_run(own, fp):
            (out / shape / f"seed{job.seed}").mkdir(parents=True)
            for name in paths.SWEEP_RUN_FILES:        # the same files, not copies: nothing downstream changes
                os.link(own / name, out / shape / f"seed{job.seed}" / name) if os.stat(own).st_dev == \
                    os.stat(out).st_dev else shutil.copy2(own / name, out / shape / f"seed{job.seed}" / name)
            log.info("%s seed %d: finished already in %s (fingerprint %s): taken as it is", shape, job.seed, own, fp)
        else:
            todo.append((shape, job))
    device = pick_device(SweepSettings.from_config(sm.config["sweep"]).device)   # not a param (rules/common.smk)
    trained = train_stack(ids, meta, [dict(model=j.model, seed=j.seed, val_full=j.val_full) for _, j in todo],
                          first.train, lengths=lengths, heads=first.heads,
                          run=RunOptions(checkpoint=paths.sweep_stack_checkpoint(sweep, stack), device=device,
                                         precision=first.precision, compile=first.compile)) if todo else []
    for (shape, job), (model, metrics, info, heads) in zip(todo, trained):
        folder = out / shape / f"seed{job.seed}"
        run = dict(sweep=sweep, shape=shape, seed=job.seed)
        train_cfg = job.train.as_dict()          # the settings it trained with, every default filled in
        info = dict(info, stack=dict(info.get("stack") or {}, name=stack))
        model_sha256 = save_trained(model.cpu(), folder / "model.pt", meta, info, extra=dict(run=run, train=train_cfg))
        note = dict(info, **run, model=model.spec.to_dict(), train=train_cfg, corpus_sha256=meta["sha256"],
                    model_sha256=model_sha256)        # what load_trained verifies model.pt against
        write_parquet(heads, folder / "heads.parquet", note=dict(run, probe=job.heads.probe() if job.heads else None,
                                                                 model_sha256=model_sha256))
        write_parquet(metrics, folder / "metrics.parquet", note=note)
        log.info("%s seed %d: final val loss %.4f nats/token", shape, job.seed, info["final_val_loss"])
