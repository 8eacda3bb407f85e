"""Train one sweep model (headwatch.sweep.train); resumes from its checkpoint.

The job's params are read as headwatch.settings.sweep.TrainingJob. A job on the corpus's
characters reads its ids (results/sweep/corpus); a job with a ``vocab`` reads that vocabulary's
ids and its tokens' lengths in characters (results/sweep/corpus/vocab/<vocab>,
headwatch.charlm.tokenizer)."""
from pathlib import Path

import torch

from headwatch.charlm.corpus import load_ids
from headwatch.charlm.tokenizer import load_split_ids, load_vocab, token_lengths
from headwatch.model.device import pick_device
from headwatch.settings.sweep import SweepSettings, TrainingJob
from headwatch.sweep.train import save_trained, train
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    torch.set_num_threads(sm.threads)
    job = TrainingJob.from_config(sm.params.job)
    if job.vocab is not None:
        vocab_dir = Path(sm.input.split).parent
        ids, meta = load_split_ids(vocab_dir)
        if meta["name"] != job.vocab:
            raise ValueError(f"{vocab_dir} holds vocabulary {meta['name']!r}, the job asks for {job.vocab!r}")
        lengths = token_lengths(load_vocab(vocab_dir)[0])
    else:
        (ids, meta), lengths = load_ids(sm.input.ids, sm.input.meta), None
    device = pick_device(SweepSettings.from_config(sm.config["sweep"]).device)   # not a param (rules/common.smk)
    model, metrics, info, heads = train(ids, meta, job.model, job.seed, job.train,
                                        checkpoint=Path(sm.output.metrics).with_name("checkpoint.pt"),
                                        device=device, precision=job.precision, lengths=lengths,
                                        full_eval=job.val_full, heads=job.heads, compile=job.compile)
    run = dict(sweep=sm.wildcards.sweep, shape=sm.wildcards.shape, seed=job.seed)
    train_cfg = job.train.as_dict()          # the settings it trained with, every default filled in
    model_sha256 = save_trained(model.cpu(), sm.output.model, meta, info, extra=dict(run=run, train=train_cfg))
    note = dict(info, **run, model=model.spec.to_dict(), train=train_cfg, corpus_sha256=meta["sha256"],
                model_sha256=model_sha256)        # what load_trained verifies model.pt against
    write_parquet(heads, sm.output.heads, note=dict(run, probe=job.heads.probe() if job.heads else None,
                                                    model_sha256=model_sha256))
    write_parquet(metrics, sm.output.metrics, note=note)
    log.info("final val loss %.4f nats/token", info["final_val_loss"])
