"""Rules anatomy_survey and anatomy_params: every configured model, reference config and
sweep shape, from configs (meta device) and, for studied models, the tensors on disk."""
from pathlib import Path

from headwatch.anatomy import run
from headwatch.tableio import write_parquet
from headwatch.workflow import log_to

p = snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    studied = {name: Path(f).parent for name, f in zip(p.models_studied, snakemake.input.models)}
    references = dict(zip(p.references, snakemake.input.references))
    if snakemake.rule == "anatomy_survey":
        write_parquet(run.survey(studied, references, p.sweep, p.sweep_vocab), snakemake.output[0], note=dict(
            head_dim="from the config (width ÷ heads unless the config sets it); head_dim_tensors "
                     "from the q projection of layer 0 (real weights for studied models, else meta)",
            zeros="rows with an error note have 0 in every number; rotary_base 0 = no rotary",
            sweep_vocab=f"sweep shapes use a nominal vocabulary of {p.sweep_vocab} characters"))
    else:
        write_parquet(run.params(studied, references, p.sweep, p.sweep_vocab), snakemake.output[0], note=dict(
            counting="each parameter tensor once (tied output head = 0), in the block of the module "
                     "that owns it; biases stay in their module's block (column `biases` says how many "
                     "of the block's numbers are biases); norms (weights and biases) form their own block",
            sweep_vocab=f"sweep shapes use a nominal vocabulary of {p.sweep_vocab} characters"))
