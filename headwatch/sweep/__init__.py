"""The training sweep (protocol §7): which character models are trained, how, and what
is concluded from them. The model itself and its corpus are :mod:`headwatch.charlm`; the
sweep's settings and its config checks are :mod:`headwatch.settings.sweep`.

* :mod:`.plan`    — owners, runs, training jobs and their params
* :mod:`.train`   — one training job: data order, schedule, evaluation, checkpoints
* :mod:`.heads`   — the heads a sweep model grows: the probe, their scores, the cut, the study
* :mod:`.summary` — the split/capacity summary and its guards
* :mod:`.study`   — the study sweeps (one per ``study`` block; its kinds: ``settings.kinds.KINDS``) and their invariants
* :mod:`.contrasts` — each study's contrasts: arm − reference with an interval over seeds and a verdict
* :mod:`.course`  — the course of a sweep: plateau, previous-token head, gaps with verdicts
"""
