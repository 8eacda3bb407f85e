"""Rule anatomy_params: parameters by block of every configured model, reference config and sweep
shape, from configs (meta device); a studied model's total checked against its tensors on disk."""
from headwatch.anatomy import run
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0], snakemake.threads):
    write_parquet(run.params(*run.configured(snakemake.params, snakemake.input)), snakemake.output[0], note=dict(
        counting="each parameter tensor once (tied output head = 0), in the block of the module "
                 "that owns it; biases stay in their module's block (column `biases` says how many "
                 "of the block's numbers are biases); norms (weights and biases) form their own block",
        sweep_vocab=f"sweep shapes use a nominal vocabulary of {snakemake.params.sweep_vocab} characters"))
