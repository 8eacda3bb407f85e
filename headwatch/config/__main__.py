"""``python -m headwatch.config FILE...``: the config ``snakemake --configfile FILE...`` would run, checked
as the workflow checks it before any job (:func:`headwatch.config.verdict.main`: exit status 1 and the
errors, naming each key, where the workflow would refuse it); ``python -m headwatch.config --bounds``:
the table of bounds (:func:`headwatch.config.bounds.bounds_markdown`, docs/security.md)."""
import sys
from pathlib import Path

from .bounds import bounds_markdown
from .keys import load_schema
from .verdict import main

if sys.argv[1:] == ["--bounds"]:
    print(bounds_markdown(load_schema(Path(__file__).resolve().parents[2] / "config" / "schema.yaml")))
    sys.exit(0)
sys.exit(main())
