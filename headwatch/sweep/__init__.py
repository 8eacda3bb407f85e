"""The training sweep (protocol §7): which character models are trained, how, and what
is concluded from them. The model itself and its corpus are :mod:`headwatch.charlm`.

* :mod:`.plan`    — slugs, grid entries, owners, runs, training jobs and their params
* :mod:`.checks`  — the sweep's config checks (:func:`~.checks.check_sweeps`)
* :mod:`.train`   — one training job: data order, schedule, evaluation, checkpoints
* :mod:`.summary` — the split/capacity summary and its guards
* :mod:`.study`   — the study sweeps (experts, depth, kv, vocab) and their invariants
"""
