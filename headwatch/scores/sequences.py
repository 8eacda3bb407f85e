"""The seeded token sets, the prose and the phrases (protocol §2).

Every table has one row per sequence, with the token ids and their strings
side by side:

* ``induction`` / ``eval`` / ``circuit``: ``seq, token_ids, tokens, half_length, offset``.
  A sequence is ``half_length`` distinct ids drawn uniformly from the configured
  vocabulary slice (special tokens skipped), then the same ids again. ``offset``
  is 1 when a BOS token was prepended (only for tokenizers that always add one),
  so copy 1 is positions ``offset .. offset+T-1`` and copy 2 the next T.
* ``prose``: ``seq, text, token_ids, tokens, bos``.
* ``phrases``: ``phrase, text, token_ids, tokens, expected, expected_id, also,
  also_id, bos``.

numpy, pandas and torch are imported inside the functions that need them: the
Snakefile imports this module (``set_params``) on every parse, and the config
checks use :func:`single_token` with a light tokenizer.
"""
from __future__ import annotations

RANDOM_SETS = ("induction", "eval", "circuit")
SETS = RANDOM_SETS + ("prose", "phrases")
"""Every sequence table (the ``{set}`` wildcard)."""


def adds_bos(tokenizer) -> bool:
    """Does this tokenizer always put a BOS token in front of plain text?"""
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a").input_ids[:1] == [bos]


def token_strings(tokenizer, ids) -> list[str]:
    """Each id decoded on its own (" mat", not "Ġmat")."""
    return [tokenizer.decode([int(i)]) for i in ids]


def candidate_ids(tokenizer, low: int, high: int):
    """Ids in [low, high) that are not special tokens (an int64 array)."""
    import numpy as np

    vocab = len(tokenizer)
    if not 0 <= low < high <= vocab:
        raise ValueError(f"sequences.vocab_low/vocab_high = [{low}, {high}) is not inside the "
                         f"tokenizer's vocabulary of {vocab}")
    special = set(tokenizer.all_special_ids)
    return np.array([i for i in range(low, high) if i not in special], dtype=np.int64)


def repeated_distinct(candidates, n: int, half_length: int, seed: int):
    """``n`` sequences of ``half_length`` distinct random ids, each repeated once: [n, 2T].

    Ids are distinct within a sequence so that every token of copy 2 has exactly
    one earlier occurrence: the induction target is unambiguous.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    first = np.stack([rng.choice(candidates, size=half_length, replace=False) for _ in range(n)])
    return np.concatenate([first, first], axis=1)


def random_set(tokenizer, n: int, seed: int, half_length: int, low: int, high: int):
    import pandas as pd

    ids = repeated_distinct(candidate_ids(tokenizer, low, high), n, half_length, seed)
    bos = adds_bos(tokenizer)
    rows = []
    for i, seq in enumerate(ids):
        seq = ([tokenizer.bos_token_id] if bos else []) + seq.tolist()
        rows.append(dict(seq=i, token_ids=seq, tokens=token_strings(tokenizer, seq),
                         half_length=half_length, offset=int(bos), seed=seed))
    return pd.DataFrame(rows)


def prose_table(tokenizer, sentences: list[str]):
    import pandas as pd

    rows = []
    for i, text in enumerate(sentences):
        ids = tokenizer(text).input_ids
        rows.append(dict(seq=i, text=text, token_ids=ids, tokens=token_strings(tokenizer, ids),
                         bos=adds_bos(tokenizer)))
    return pd.DataFrame(rows)


def single_token(tokenizer, text: str, where: str) -> int:
    """The id of ``text`` if the tokenizer keeps it as one token, else a ValueError naming ``where``."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if len(ids) != 1:
        raise ValueError(f"{where} = {text!r} is split by the tokenizer into {len(ids)} tokens "
                         f"{token_strings(tokenizer, ids)}; choose a string that is one token")
    return ids[0]


def phrases_table(tokenizer, phrases: dict, low: int, high: int):
    import pandas as pd

    rows = []
    bos = adds_bos(tokenizer)
    for name, spec in phrases.items():
        if "random" in spec:  # noise: random ids repeated once; expected = the first of them
            seq = repeated_distinct(candidate_ids(tokenizer, low, high), 1, spec["random"], spec["seed"])[0]
            ids = ([tokenizer.bos_token_id] if bos else []) + seq.tolist()
            expected_id, also_id = int(seq[0]), None
            text = tokenizer.decode(ids)
        else:
            text = spec["text"]
            ids = tokenizer(text).input_ids
            expected_id = single_token(tokenizer, spec["expected"], f"phrases.{name}.expected")
            also_id = (single_token(tokenizer, spec["also"], f"phrases.{name}.also")
                       if spec.get("also") else None)
        rows.append(dict(phrase=name, text=text, token_ids=ids, tokens=token_strings(tokenizer, ids),
                         expected=tokenizer.decode([expected_id]), expected_id=expected_id,
                         also=None if also_id is None else tokenizer.decode([also_id]),
                         also_id=also_id, bos=bos))
    df = pd.DataFrame(rows)
    df["also_id"] = df["also_id"].astype("Int64")
    return df


def set_params(name: str, config: dict) -> dict:
    """The slice of the config that one set depends on (a rule's params)."""
    s = config["sequences"]
    vocab = dict(vocab_low=s["vocab_low"], vocab_high=s["vocab_high"])
    if name in RANDOM_SETS:
        return dict(**s["sets"][name], half_length=s["half_length"], **vocab)
    if name == "prose":
        return dict(sentences=list(config["prose"]))
    if name == "phrases":
        return dict(phrases=dict(config["phrases"]), **vocab)
    raise ValueError(f"unknown sequence set {name!r}; known: {SETS}")


def make_set(tokenizer, name: str, params: dict):
    """The table for one set, from :func:`set_params`."""
    if name in RANDOM_SETS:
        return random_set(tokenizer, params["n"], params["seed"], params["half_length"],
                          params["vocab_low"], params["vocab_high"])
    if name == "prose":
        return prose_table(tokenizer, params["sentences"])
    return phrases_table(tokenizer, params["phrases"], params["vocab_low"], params["vocab_high"])


def ids_tensor(df):
    """Token ids of equal-length sequences (a table's ``token_ids``) as a LongTensor [N, T]."""
    import numpy as np
    import torch

    return torch.tensor(np.stack(df["token_ids"].to_numpy()), dtype=torch.long)
