"""Activation patching's settings (protocol §5d), in one typed object, and its pre-job checks.

:class:`PatchingSettings` names every key under ``patching:`` of the config once, typed; the
rules, scripts and benchmarks of :mod:`headwatch.patching` read their settings from it, never
from string keys. Each rule's params are only the slice of ``patching:`` its job depends on
(``rules/patching.smk``: the prompts read ``n, seed, templates, names`` (or ``pairs, pairs_outside_project``), the sweep ``phrase,
top_k, batch, rounding_factor, guard_prompts``), so a key outside the slice is None here, and a job
names the keys it needs (:meth:`~headwatch.settings.Settings.need`).

The templates' rules live here too, since the pre-job checks need them before any model is
loaded: a template holds the slots ``{A}``, ``{B}``, ``{C}`` once each, each after a space
(:func:`template_errors`), and is filled with three names (:func:`fill`, :func:`layout`).
:func:`patching_errors` is every check of ``patching:`` made before any job, for one studied
model (``headwatch/config/checks.py`` calls it); with ``pairs`` (a file of prompt pairs instead of
the templates, :mod:`headwatch.settings.pairs`) the file's and its rows'. The prompts rule's slice
depends on the source (:func:`prompt_keys`).

Like every settings module, it imports only the standard library (and
:func:`headwatch.scores.sequences.single_token`, whose module imports nothing else at its top), so
that the pre-job checks read it without torch.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Sequence

from ..scores.sequences import single_token
from . import Settings
from .pairs import PairsError, pair_errors, pairs_path, read_pairs

SLOTS = ("A", "B", "C")
"""The slots of a template: the three names of a prompt."""


class PatchingError(ValueError):
    """A prompt set or a patching result that cannot be what it claims (prompt pairs that cannot be patched:
    an answer of two tokens, a clean and a corrupted prompt of different lengths, …).

    >>> try:
    ...     hw.patch_heads(m, pairs.assign(answer=[" Maryland and"]))
    ... except hw.PatchingError as err:
    ...     print(err)        # hw.patch_heads: prompts, row 0: answer = ' Maryland and' is split by the tokenizer …
    """


class WeakPairsWarning(UserWarning):
    """Prompt pairs that do not separate clean from corrupted: the interval of the gap clean − corrupted
    (the scores' denominator) holds 0, so the normalized scores are noise (protocol §5d, "Do the pairs
    separate?"; :mod:`headwatch.patching.separation`). :func:`headwatch.patch_heads` warns once per call; every
    patching table's note says it (``pairs_separate``, ``separation``).

    >>> import warnings
    >>> warnings.simplefilter("error", hw.WeakPairsWarning)     # make weak pairs stop a script
    """


@dataclass(frozen=True)
class PatchingSettings(Settings):
    """Every key under ``patching:`` (config/config.yaml says what each means); a key outside the
    rule's slice is None."""
    WHERE = "patching"
    SLICE = "rules/patching.smk: the rule's params"

    n: int | None = None                        # prompts (even i ABBA, odd i BABA)
    seed: int | None = None                     # IO, S and the corrupted names: numpy default_rng(seed)
    templates: tuple[str, ...] | None = None    # each holds {A}, {B}, {C} once, each after a space
    names: tuple[str, ...] | None = None        # each one token with its leading space
    phrase: str | None = None                   # the phrase whose p(IO), p(S) are reported
    top_k: int | None = None                    # top heads patched one position at a time
    batch: int | None = None                    # rows (one patch × one prompt) per forward pass
    rounding_factor: float | None = None        # the factor of the guards' bounds derived from rounding
    guard_prompts: int | None = None            # the first prompts the guards run on
    pairs: str | None = None                    # a CSV / JSON Lines file of prompt pairs, instead of templates
    pairs_outside_project: bool | None = None   # an absolute pairs path outside the project may be read
    kv_prompts: int | None = None               # key/value sweep: the first prompts (None = every prompt)
    positions_all_heads: int | None = None      # cached per-position sweep: top heads (None = every head)

    def __post_init__(self):
        for name, kind in (("n", int), ("seed", int), ("top_k", int), ("batch", int), ("rounding_factor", float),
                           ("guard_prompts", int), ("phrase", str), ("pairs", str),
                           ("pairs_outside_project", bool), ("kv_prompts", int), ("positions_all_heads", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))
        for name in ("templates", "names"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(str(x) for x in value))


PROMPT_KEYS = {"templates": ("n", "seed", "templates", "names"), "pairs": ("pairs", "pairs_outside_project")}
"""The keys the prompt set is made of, by its source (rules/patching.smk: the prompts rule's params)."""


def prompt_source(patching: dict) -> str:
    """``pairs`` when ``patching.pairs`` names a file, else ``templates``."""
    return "pairs" if patching.get("pairs") else "templates"


def prompt_keys(patching: dict) -> tuple[str, ...]:
    """The keys of ``patching:`` the prompt set depends on (its rule's params)."""
    return PROMPT_KEYS[prompt_source(patching)]


# ------------------------------------------------------------------ templates and names
def template_slots(template: str) -> list[str]:
    """The ``{fields}`` of a template, in order (``string.Formatter``'s parse)."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


def template_errors(templates: Sequence[str]) -> list[str]:
    """Each template must hold ``{A}``, ``{B}`` and ``{C}`` once each (nothing else in braces),
    each after a space (the names are tokens with their space, " Mary"), and not end in one."""
    out = []
    for i, t in enumerate(templates):
        where = f"patching.templates[{i}] = {t!r}"
        try:
            slots = template_slots(t)
        except ValueError as err:
            out.append(f"{where}: {err}; write the slots as {{A}}, {{B}}, {{C}} and any other brace twice")
            continue
        if sorted(slots) != sorted(SLOTS):
            out.append(f"{where}: holds the slots {slots}; a template holds {{A}}, {{B}} and {{C}} once "
                       "each (the two names of a clean prompt go there, ABBA or BABA)")
            continue
        for slot in SLOTS:
            at = t.index("{" + slot + "}")
            if at == 0 or t[at - 1] != " ":
                out.append(f"{where}: {{{slot}}} must follow a space: a name is used as one token with "
                           "its leading space (' Mary')")
        if t != t.rstrip():
            out.append(f"{where}: ends in a space; the next token (the answer) carries its own")
    return out


def fill(template: str, names: Sequence[str]) -> str:
    """The template with names (A, B, C) in its slots."""
    return template.format(**dict(zip(SLOTS, names)))


def layout(tokenizer, template: str, names: Sequence[str]) -> tuple[list[int], list[int]]:
    """(token ids of the filled template, the position of each slot): a slot's position is the
    number of tokens of the filled text before it (without the space in front of the slot),
    checked to hold the name's one token."""
    ids = list(tokenizer(fill(template, names)).input_ids)
    by_slot = dict(zip(SLOTS, names))
    positions = []
    for slot, name in by_slot.items():
        before = template[:template.index("{" + slot + "}") - 1].format(**by_slot)
        pos = len(tokenizer(before).input_ids)
        positions.append(pos)
        want = tokenizer(" " + name, add_special_tokens=False).input_ids
        if pos >= len(ids) or want != [ids[pos]]:
            raise PatchingError(f"template {template!r} with names {list(names)}: slot {{{slot}}} is not the "
                                f"one token {want} at position {pos} of {ids}")
    return ids, positions


# ------------------------------------------------------------------ the pre-job checks
def patching_errors(config: dict, facts, workdir=".") -> list[str]:
    """Every check of ``patching:`` before any job, for one studied model (``facts``: the model's
    ``key``, ``tokenizer`` and ``shape``, :class:`headwatch.model.sources.ModelFacts`): every name is one
    token with its space; every template holds its slots (:func:`template_errors`) and gives the
    same number of tokens with its slots at the same positions, within the model's context. The
    model-independent checks (the templates' slots, ``phrase``, ``guard_prompts``) are reported
    once, with the first studied model. With ``pairs`` (a file of prompt pairs, the project
    directory ``workdir``) instead of templates: :func:`pairs_errors`."""
    if not config.get("patching"):
        return []
    p = PatchingSettings.from_config(config["patching"])
    tok, key = facts.tokenizer, facts.key
    first = key == config["models_studied"][0]
    if bool(p.pairs) == bool(p.templates):
        return [f"patching: give exactly one of patching.templates and patching.pairs (the prompts' source); "
                f"got {'both' if p.pairs else 'neither'} (an overlay that sets pairs also sets templates: null)"] \
            if first else []
    if p.pairs:
        return pairs_errors(config, p, facts, workdir, first)
    errors = []
    bad_templates = template_errors(p.templates)
    if first:
        errors += bad_templates
        errors += shared_errors(config, p, facts, p.n, "the patching.n")
    split = []
    for i, name in enumerate(p.names):
        try:
            single_token(tok, " " + name, f"patching.names[{i}] ({name!r} with its leading space)")
        except ValueError as err:
            split.append(f"{err} (model {key})")
    errors += split
    if split or bad_templates:
        return errors
    names = p.names[:3]
    shapes = []
    for i, t in enumerate(p.templates):
        try:
            ids, slots = layout(tok, t, names)
        except PatchingError as err:
            errors.append(f"patching.templates[{i}]: {err} (model {key})")
            continue
        shapes.append((i, len(ids), slots))
    context = facts.shape.get("context")
    for i, n, slots in shapes:
        i0, n0, slots0 = shapes[0]
        if (n, slots) != (n0, slots0):
            errors.append(f"patching.templates[{i}] = {p.templates[i]!r}: {n} tokens with the names at "
                          f"positions {slots}, but patching.templates[{i0}] gives {n0} tokens with the "
                          f"names at {slots0} (model {key}); every template must give the same length "
                          "with the names at the same positions, so that positions line up across prompts")
        if context and n > context:
            errors.append(f"patching.templates[{i}]: {n} tokens, longer than the context of model {key} "
                          f"({context})")
    return errors


def shared_errors(config: dict, p: PatchingSettings, facts, prompts: int, counted: str) -> list[str]:
    """The checks of ``patching:`` that do not depend on the prompts' source (``prompts`` of them,
    ``counted`` says where that number comes from), made once, with the first studied model."""
    errors = []
    phrase = config["phrases"].get(p.phrase)
    if phrase is None or "also" not in phrase or "text" not in phrase:
        errors.append(f"patching.phrase = {p.phrase!r}: must name a phrase of `phrases` with text, "
                      f"expected and also (the IO and S tokens whose probabilities are reported); "
                      f"phrases: {sorted(config['phrases'])}")
    if p.guard_prompts > prompts:
        errors.append(f"patching.guard_prompts = {p.guard_prompts}: more than {counted} = {prompts} prompts")
    if p.kv_prompts is not None and p.kv_prompts > prompts:
        errors.append(f"patching.kv_prompts = {p.kv_prompts}: more than {counted} = {prompts} prompts")
    return errors + head_count_errors(p, facts)


def head_count_errors(p: PatchingSettings, facts) -> list[str]:
    """The counts of heads ``patching:`` asks of a model (``facts``: its ``key`` and ``shape``): ``top_k`` and
    ``positions_all_heads`` at most its heads (the workflow's check, and a public function's on its model)."""
    heads = (facts.shape.get("layers") or 0) * (facts.shape.get("heads") or 0)
    errors = []
    if heads and p.top_k is not None and p.top_k > heads:
        errors.append(f"patching.top_k = {p.top_k}: model {facts.key} has {heads} heads")
    if heads and p.positions_all_heads is not None and p.positions_all_heads > heads:
        errors.append(f"patching.positions_all_heads = {p.positions_all_heads}: model {facts.key} has {heads} heads "
                      "(null = every head)")
    return errors


def pairs_errors(config: dict, p: PatchingSettings, facts, workdir, first: bool) -> list[str]:
    """The checks of a pairs file (:mod:`headwatch.settings.pairs`) for one studied model: its path
    and rows (once, with the first studied model), and each row's tokens for this model."""
    try:
        path = pairs_path(p.pairs, workdir, bool(p.pairs_outside_project))
        rows = read_pairs(path)
    except PairsError as err:
        return [str(err)] if first else []
    errors = shared_errors(config, p, facts, len(rows), f"the {len(rows)} rows of {path}") if first else []
    return errors + pair_errors(rows, facts.tokenizer, str(path), facts.key, facts.shape.get("context"))
