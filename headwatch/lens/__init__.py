"""Stage "lens" (protocol §5h; rules/lens.smk): what a head writes, what it reads, whom it feeds — read
without patching, each beside what patching measures.

* :mod:`.direct` — direct effects of every head, feed-forward network, embedding and bias on the logit
  difference (the final norm's scale frozen), beside patching's total effect; the logit lens;
* :mod:`.composition` — the weights' circuits: each head's OV copying score and QK same-token score,
  the Q-, K- and V-composition scores of every pair of heads, each beside a null of random matrices;
* :mod:`.prediction` — the weights against the activations: composition scores against path patching,
  the copying score against the induction score, a verdict per model; the known circuit ranked by the
  weights; the explorer panel's table (:func:`~headwatch.lens.prediction.explorer_panel`: per head what
  it writes, matches, reads and feeds).
"""
