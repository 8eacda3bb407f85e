"""Train one sweep model (headwatch.sweep.train); resumes from its checkpoint."""
from pathlib import Path

import torch

from headwatch.charlm.corpus import load_ids
from headwatch.sweep.train import save_trained, train
from headwatch.tableio import write_parquet
from headwatch.device import pick_device
from headwatch.workflow import log_to

with log_to(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    torch.set_num_threads(sm.threads)
    job = sm.params.job
    ids, meta = load_ids(sm.input.ids, sm.input.meta)
    device = pick_device(job["device"])
    model, metrics, info = train(ids, meta, job["model"], job["seed"], job["train"],
                                 checkpoint=Path(sm.output.metrics).with_name("checkpoint.pt"),
                                 device=device, precision=job["precision"])
    run = dict(sweep=sm.wildcards.sweep, arch=sm.wildcards.arch, seed=job["seed"])
    note = dict(info, **run, model=model.spec.to_dict(), train=job["train"], corpus_sha256=meta["sha256"])
    write_parquet(metrics, sm.output.metrics, note=note)
    save_trained(model.cpu(), sm.output.model, meta, info, extra=dict(run=run, train=job["train"]))
    log.info("final val loss %.4f nats/char", info["final_val_loss"])
