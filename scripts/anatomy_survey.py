"""Rule anatomy_survey: every configured model, reference config and sweep shape, from configs
(meta device) and, for studied models, the tensors on disk."""
from headwatch.anatomy import run
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0], snakemake.threads):
    write_parquet(run.survey(*run.configured(snakemake.params, snakemake.input)), snakemake.output[0], note=dict(
        head_dim="from the config (width ÷ heads unless the config sets it); head_dim_tensors "
                 "from the q projection of layer 0 (real weights for studied models, else meta)",
        zeros="rows with an error note have 0 in every number; rotary_base 0 = no rotary",
        sweep_vocab=f"sweep shapes use a nominal vocabulary of {snakemake.params.sweep_vocab} characters"))
