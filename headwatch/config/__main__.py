"""``python -m headwatch.config FILE...``: each config file's YAML errors with file, line and
column (:func:`headwatch.config.keys.main`)."""
import sys

from .keys import main

sys.exit(main())
