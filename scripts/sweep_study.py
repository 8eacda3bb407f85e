"""Summarize one study sweep (headwatch.sweep.study) and compute its contrasts
(headwatch.sweep.contrasts); refuses when its invariant fails."""
import json
from pathlib import Path

from headwatch.settings.sweep import StudySettings
from headwatch.sweep.contrasts import contrast_sentence, contrasts_note, study_contrasts
from headwatch.sweep.study import read_study_runs, study_note, summarize_study
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    study = StudySettings.from_config(sm.params.study)
    vocab = json.loads(Path(sm.input.meta).read_text())["vocab_size"]
    runs = [dict(r, metrics=path) for r, path in zip(sm.params.runs, sm.input.metrics, strict=True)]
    finals = read_study_runs(runs, vocab, study.number_bytes)
    summary = summarize_study(finals, study)
    contrasts = study_contrasts(finals, summary, study, sm.params.bootstrap)
    write_parquet(summary, sm.output.summary, note=study_note(sm.params.study))
    write_parquet(finals, sm.output.finals)
    write_parquet(contrasts, sm.output.contrasts, note=contrasts_note(study, sm.params.bootstrap))
    log.info("%s study summary:\n%s", study.kind, summary.T.to_string())
    log.info("contrasts:\n%s", "\n".join(contrast_sentence(c) for c in contrasts.to_dict("records")))
