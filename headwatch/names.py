"""Names that the library and the workflow's rules share, importable without torch or
pandas (Snakemake reads them on every parse of the Snakefile)."""

#: The four head scores (protocol §4), in the order of every table, figure and page.
SCORES = ("sink", "prev", "self", "induction")
