"""Train one vocabulary on the corpus's training split and encode both splits
(headwatch.charlm.tokenizer.train_vocab, encode_splits); split.json records each ids file's
SHA-256, which every training job checks before it reads them."""
from pathlib import Path

from headwatch.charlm.tokenizer import encode_splits, train_vocab
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    corpus_dir, out_dir = Path(sm.input.meta).parent, Path(sm.output.meta).parent
    meta = train_vocab(corpus_dir, out_dir, sm.params.vocab)
    split = encode_splits(corpus_dir, out_dir)
    log.info("%s: %d tokens (asked %s); validation %d characters -> %d tokens (%.3f characters per token)",
             meta["name"], meta["vocab_size"], meta["size"], split["val_chars"], split["val_tokens"],
             split["val_chars_per_token"])
