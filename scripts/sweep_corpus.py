"""Build the sweep's character corpus (headwatch.charlm.corpus): the ids, the text, and the
record with the ids file's SHA-256, which every training job checks before it reads them."""
from headwatch.charlm.corpus import build_corpus, save_corpus
from headwatch.settings.sweep import CorpusSettings
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    c = CorpusSettings.from_config(snakemake.params.corpus)
    corpus = build_corpus(source=c.source, plays=list(c.plays) if c.plays is not None else None,
                          target_chars=c.target_chars, val_fraction=c.val_fraction, outside=c.outside_project)
    save_corpus(corpus, snakemake.output.ids, snakemake.output.meta, snakemake.output.text)
    m = corpus.meta()
    log.info("corpus: %d chars (train %d, val %d), vocab %d, from %s", m["chars"], m["n_train"],
             m["n_val"], m["vocab_size"], [(s["name"], s["chars"]) for s in m["sources"]])
