"""Rule models_prepare: load a configured model once and save it as safetensors."""
from pathlib import Path

from headwatch.model.load import prepare_model
from headwatch.jobs import log_to

with log_to(snakemake.log[0]):
    prepare_model(snakemake.params.source, Path(snakemake.output[0]).parent)
