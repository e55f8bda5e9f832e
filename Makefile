# The two commands a newcomer needs:  `make run`  and  `make test`  (`make test-slow` is CI's second tier).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-slow lint bench clean miniwob desktop browsergym browsergym-venv

# Test workers: the fast tier is CPU-bound (one per core); the slow tier mostly waits on browsers,
# subprocesses, servers and cron ticks, so it runs more workers than cores. Each worker has its own
# ports, homes, databases, buckets, Label Studio and Chromium (tests/conftest.py).
FAST_WORKERS ?= auto
SLOW_WORKERS ?= 4
# One BLAS thread per test process, as the `trajforge` command runs (trajforge.procs.one_blas_thread):
# the parallelism is the workers'; OpenBLAS's own threads on top only spin on the same two cores.
TEST_ENV := OPENBLAS_NUM_THREADS=1
# Every venv installs with --no-compile, so each module is compiled when first imported, and that
# compiled file must be kept: with PYTHONDONTWRITEBYTECODE set (as on some CI machines), every process
# would compile from source again, every time (6 s of CPU for each trajforge command, 9 s for each
# import of torch with transformers, more for Label Studio). No recipe here runs with it.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the local CPU wheel; anything else pulls CUDA.
	# --no-compile: Python compiles each module when it is first imported, and most never are
	# (compiling all of torch alone takes 30 s of CPU, three times its unpacking).
	$(BIN)/python -m pip install -q --no-compile torch==2.13.0
	$(BIN)/python -m pip install -q --no-compile -e '.[dev,miniwob,bench]'
	# imagededup's hashing module, a baseline of bench_dedup_quality (its CNN needs torchvision)
	$(BIN)/python -m pip install -q --no-compile --no-deps imagededup==0.3.3.post2
	touch $(STAMP)

install: $(STAMP)

## run: install, then evolve 6 rounds on the embedded default (SQLite, local store, offline) and write the report
run: $(STAMP)
	$(BIN)/trajforge evolve

## miniwob: install, then evolve 2 rounds on MiniWoB++'s click-button and enter-text beside takeout (needs Chromium)
miniwob: $(STAMP)
	@test -x /usr/bin/chromium || { echo "MiniWoB++ runs in Chromium: apt-get install chromium"; exit 1; }
	$(BIN)/trajforge evolve --config docs/examples/miniwob.yaml

# BrowserGym in a venv of its own (its pins would move ours); the `browsergym` suite finds it here
# (or through TRAJFORGE_BROWSERGYM_PYTHON). Rebuilt when its requirements change.
BROWSERGYM_VENV ?= $(HOME)/.cache/trajforge/browsergym-0.14.3
BROWSERGYM_REQS := rollout/suites/browsergym/requirements.txt

$(BROWSERGYM_VENV)/.installed: $(BROWSERGYM_REQS)
	rm -rf $(BROWSERGYM_VENV)
	$(PYTHON) -m venv $(BROWSERGYM_VENV)
	$(BROWSERGYM_VENV)/bin/python -m pip install -q -r $(BROWSERGYM_REQS)
	touch $@

## browsergym: install, then BrowserGym into its own venv, then evolve 3 rounds on BrowserGym's MiniWoB tasks (needs Chromium)
browsergym: $(STAMP) $(BROWSERGYM_VENV)/.installed
	@test -x /usr/bin/chromium || { echo "BrowserGym runs in Chromium: apt-get install chromium"; exit 1; }
	$(BIN)/trajforge evolve --config docs/examples/browsergym.yaml

browsergym-venv: $(BROWSERGYM_VENV)/.installed

## desktop: install, then evolve 3 rounds on the built-in desktop suite: real apps on virtual displays
desktop: $(STAMP)
	$(BIN)/trajforge check --config docs/examples/desktop.yaml
	$(BIN)/trajforge evolve --config docs/examples/desktop.yaml

## test: install, then lint, type-check and run the fast tier (everything not marked slow, every bench in its smoke mode); 13-14 min on 2 cores, the target is 10
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(TEST_ENV) $(BIN)/pytest -m 'not slow' -n $(FAST_WORKERS) $(PYTEST_ARGS)

## test-slow: install, then run every test marked slow (browsers, servers, schedules, trainers); CI runs both tiers
test-slow: $(STAMP)
	$(TEST_ENV) $(BIN)/pytest -m slow -n $(SLOW_WORKERS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .trajforge .trajforge-miniwob .trajforge-miniwob10 .trajforge-desktop .trajforge-browsergym
