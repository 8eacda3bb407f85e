"""Names that the library and the workflow's rules share, importable without torch or
pandas (Snakemake reads them on every parse of the Snakefile)."""
import difflib

# ------------------------------------------------------------------ the public names (import headwatch as hw)
FUNCTIONS = ("load_config", "load_model", "token_set", "sequences", "attention_maps", "head_scores", "cut_heads",
             "cut_circuit", "cut_each_head", "prompt_pairs", "patch_heads", "patch_positions", "patch_kv_groups",
             "attribution", "path_patching", "edge_scores", "edge_faithfulness", "direct_effects", "logit_lens",
             "weight_circuits", "weights_vs_paths", "guards_of", "top_heads", "plot_scores", "plot_cuts", "plot_heads",
             "plot_paths", "plot_edges", "plot_faithfulness", "plot_direct", "plot_logit_lens", "plot_weights",
             "explore", "set_progress")
"""The public functions (:mod:`headwatch.api` defines each), in the order docs/api.md gives them."""
ERRORS = {"ConfigError": "headwatch.model.sources.errors", "ModelFileError": "headwatch.model.sources.errors",
          "ModelNotFoundError": "headwatch.model.sources.errors", "TableError": "headwatch.settings.tables",
          "PatchingError": "headwatch.settings.patching", "GuardError": "headwatch.guards"}
"""The library's errors, each read from its module on first use (the guards' imports torch, which importing
headwatch must not). A wrong argument, setting or table is refused with a :class:`ConfigError` (a keyword, a
setting, a model's file: :class:`ModelFileError`), a :class:`TableError` or a :class:`PatchingError` (prompt
pairs), a model that is not here with :class:`ModelNotFoundError`, all before any model pass; a failed guard
raises :class:`GuardError`."""
WARNINGS = {"WeakPairsWarning": "headwatch.settings.patching"}
"""The library's warnings, read as the errors are (``warnings.simplefilter("error", hw.WeakPairsWarning)``)."""
PUBLIC = (*FUNCTIONS, *ERRORS, *WARNINGS)
"""Everything ``import headwatch as hw`` gives, written here once: the ``__all__`` of :mod:`headwatch` and of
:mod:`headwatch.api`."""


#: The four head scores (protocol §4), in the order of every table, figure and page.
SCORES = ("sink", "prev", "self", "induction")


def top_rows(table, column: str, n: int):
    """The n rows of a table with ``layer, head`` columns (a scores table, the patching heads
    table) ranked highest by ``column``, ties broken by lower layer, then lower head: the one
    ranking of heads (here, not in :mod:`headwatch.scores.heads`, so that the figure jobs need not
    import torch)."""
    return table.sort_values([column, "layer", "head"], ascending=[False, True, True], kind="mergesort").head(n)


def top_heads(table, column: str, n: int) -> list[tuple[int, int]]:
    """The ``n`` heads with the highest ``column`` in ``table`` (ties: lower layer, then lower head
    first), as ``(layer, head)`` pairs.

    >>> hw.top_heads(scores, "induction", 3)        # SmolLM2-135M at the protocol's sizes
    [(18, 6), (17, 3), (17, 4)]
    """
    top = top_rows(table, column, n)
    return [(int(l), int(h)) for l, h in zip(top["layer"], top["head"])]


#: A name from the config that becomes part of a file path (a model, phrase, sweep or study
#: key, a reference config): letters, digits, ``_``, ``.`` and ``-``, starting with a letter,
#: a digit or ``_`` — so never ``.``/``..``, a hidden file, an option-like ``-x`` or a ``/``.
#: config/schema.yaml's ``definitions.name`` is this pattern (anchored; a test compares them)
#: and every wildcard that holds such a name is constrained to it (rules/common.smk).
SAFE_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"

#: The number types a model may run in (a model's ``dtype`` in the config), each with the bytes
#: of one number: the one table that KV-cache sizes (anatomy, the explorer's calculator, the
#: sweep's kv study) and loading a model read. config/schema.yaml's ``dtype`` enum is its keys
#: (a test compares them, and torch's sizes with the bytes).
BYTES_PER_NUMBER = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, bytes_per_number: int) -> int:
    """Bytes of keys and values kept per token: 2 × layers × kv heads × head size × bytes.

    The one formula: the anatomy's KV-cache table and the sweep's kv study
    (:meth:`headwatch.charlm.spec.ModelSpec.kv_cache_bytes_per_token`) call it; the explorer's
    calculator computes it in the page (tests/test_explorer.py holds it to a case by hand)."""
    return 2 * layers * kv_heads * head_dim * bytes_per_number


def nearest(given, valid, cutoff: float = 0.6) -> str | None:
    """The word of ``valid`` that ``given`` most likely misspells, or None: case ignored (``SmolLM2-135M``
    is ``smollm2-135m``), the closest by :mod:`difflib`'s ratio at least ``cutoff``, else the one valid word
    that holds ``given`` or is held by it (3 characters at least)."""
    words = {str(v).lower(): str(v) for v in valid}
    text = str(given).lower()
    close = difflib.get_close_matches(text, list(words), n=1, cutoff=cutoff)
    if close:
        return words[close[0]]
    holding = [w for w in words if len(text) >= 3 and (text in w or w in text)]
    return words[holding[0]] if len(holding) == 1 else None


def did_you_mean(given, valid, cutoff: float = 0.6, code: bool = False) -> str:
    """``did you mean 'right'?`` (``code``: `` `right` ``, a config key), naming the valid word ``given``
    most likely misspells (:func:`nearest`), or ``""``: the one hint of every error that meets a
    misspelt name (a config key, a bound, a table's column, a model key, a folder)."""
    right = nearest(given, valid, cutoff)
    if right is None:
        return ""
    return f"did you mean `{right}`?" if code else f"did you mean {right!r}?"
