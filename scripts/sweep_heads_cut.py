"""Cut one trained sweep model's top induction head against random heads (protocol §7b; the §5a
code, headwatch.sweep.heads.cut_table). The scores are the run's last records (heads.parquet)."""
import torch

from headwatch.model.device import pick_device
from headwatch.settings.sweep import HeadsSettings, SweepSettings
from headwatch.sweep.heads import cut_table, final_scores
from headwatch.sweep.train import load_trained
from headwatch.tableio import read_parquet, write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    torch.set_num_threads(sm.threads)
    device = pick_device(SweepSettings.from_config(sm.config["sweep"]).device)   # not a param (rules/common.smk)
    model, _ = load_trained(sm.input.model, device=device)
    scores = final_scores(read_parquet(sm.input.heads))
    table, note, guards = cut_table(model, scores, HeadsSettings.from_config(sm.params.heads), sm.params.ablation)
    write_parquet(table, sm.output.cut, note=dict(note, guards=guards))
    log.info("cut of the top induction head:\n%s", table.drop(columns="random_heads").to_string())
