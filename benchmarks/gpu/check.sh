#!/usr/bin/env bash
# The GPU check (benchmarks/gpu/README.md): installs what is missing from
# benchmarks/gpu/wheels, installs headwatch, builds a SmolLM2-shaped model with
# random weights, runs the paper-scale DAG on it plus the real sweep and studies
# with --resources gpu=1, stops itself before the time limit and prints every
# rule's wall time and peak GPU memory, the sweep's total, the jobs that ran on
# CUDA and every guard's figures. Everything lands under $OUT when it is set.
#
#   benchmarks/gpu/check.sh                  # on the GPU machine (9.5 min limit)
#   benchmarks/gpu/check.sh --cpu-tiny       # the same steps on the CPU, tiny (make test runs it)
#   benchmarks/gpu/check.sh --help           # every option
#
# Python: $PYTHON, else the repository's .venv, else python3.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" MPLBACKEND="${MPLBACKEND:-Agg}"
exec "$PYTHON" "$root/benchmarks/gpu/check.py" "$@"
