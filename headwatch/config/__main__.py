"""``python -m headwatch.config FILE...``: each config file's YAML errors with file, line and
column (:func:`headwatch.config.keys.main`); ``python -m headwatch.config --bounds``: the table of
bounds (:func:`headwatch.config.bounds.bounds_markdown`, docs/security.md)."""
import sys
from pathlib import Path

from .bounds import bounds_markdown
from .keys import load_schema, main

if sys.argv[1:] == ["--bounds"]:
    print(bounds_markdown(load_schema(Path(__file__).resolve().parents[2] / "config" / "schema.yaml")))
    sys.exit(0)
sys.exit(main())
