"""Summarize one study sweep (headwatch.sweep.study); refuses when its invariant fails."""
import json
from pathlib import Path

from headwatch.settings.sweep import StudySettings
from headwatch.sweep.study import read_study_runs, study_note, summarize_study
from headwatch.tableio import write_parquet
from headwatch.workflow import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    study = StudySettings.from_config(sm.params.study)
    vocab = json.loads(Path(sm.input.meta).read_text())["vocab_size"]
    runs = [dict(r, metrics=path) for r, path in zip(sm.params.runs, sm.input.metrics, strict=True)]
    finals = read_study_runs(runs, vocab, study.number_bytes)
    summary = summarize_study(finals, study)
    write_parquet(summary, sm.output.summary, note=study_note(sm.params.study))
    write_parquet(finals, sm.output.finals)
    log.info("%s study summary:\n%s", study.kind, summary.T.to_string())
