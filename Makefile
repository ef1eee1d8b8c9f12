# Two entry points (see README): `make demo` runs a real search against the emulator, `make test`
# runs the test suite. Each builds its own .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# SGLang's argument parser imports on a CPU with these; the full wheel wants CUDA torch.
SGLANG_PARSER_DEPS := numpy orjson psutil pybase64 requests packaging pillow starlette msgspec \
	pydantic pyzmq tqdm IPython aiohttp triton
# SGLang's dataset loaders (workload source sglang:<dataset>), at the versions SGLang 0.5.23 pins.
SGLANG_DATASET_DEPS := transformers==5.19.0 tokenizers==0.23.2 datasets

.PHONY: venv demo lint test test-fast clean-mlruns

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch only this way: it takes the CPU build on disk and never pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	# The distribution was once named autotune (PyPI's is another project): drop that metadata first.
	$(BIN)/pip uninstall -q -y autotune 2>/dev/null || true
	$(BIN)/pip install -q --no-warn-conflicts -e ".[test]"
	# SGLang is installed without its CUDA deps on purpose (only its parser runs here), so pip's check
	# of installed requirements, run after every install once SGLang is there (a rebuilt venv), would
	# print one false alarm per missing CUDA package: --no-warn-conflicts on the installs that see it.
	$(BIN)/pip install -q --no-warn-conflicts $(SGLANG_PARSER_DEPS)
	$(BIN)/pip install -q --no-deps sglang==0.5.23
	$(BIN)/python -c "from sglang.srt.server_args import ServerArgs"
	touch $(STAMP)

# SGLang's dataset loaders need transformers, which makes importing SGLang's parser several times
# slower; so they get an environment of their own that sees the main one's packages (a .pth line)
# and adds only theirs. tests/unit/sglang/test_sglang_datasets.py runs its cases there.
DATA_VENV := .venv-sglang-data
$(DATA_VENV)/.installed: $(STAMP)
	test -x $(DATA_VENV)/bin/python || $(PY) -m venv $(DATA_VENV)
	main=$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); \
	own=$$($(DATA_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); \
	echo "import site; site.addsitedir('$$main')" > $$own/main-venv.pth
	# It sees SGLang without the CUDA deps SGLang requires (on purpose: only its loaders run here), so
	# pip's check of installed requirements would print one false alarm per missing one.
	$(DATA_VENV)/bin/pip install -q --no-warn-conflicts $(SGLANG_DATASET_DEPS)
	$(DATA_VENV)/bin/python -c "import sglang.benchmark.datasets, transformers, autotune"
	touch $@

# The MLflow UI tests drive Debian's Chromium (headless; the screenshot script through Playwright, which
# pip installs with the test extras: no `playwright install`, its browser download is not reachable).
# Without Chromium those tests skip and say why.
$(VENV)/.chromium:
	command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
		echo "warning: could not install chromium; the browser test will be skipped"
	touch $@

venv: $(STAMP)

# Style (ruff) and types (mypy), as configured in pyproject.toml; `make test` runs this first.
lint: $(STAMP)
	$(BIN)/ruff check autotune tests scripts benchmarks
	$(BIN)/mypy autotune benchmarks scripts

# The run is named, and the reliability outcomes it recorded must all come from it (none empty,
# none left by an earlier run): scripts/reliability_report.py --check.
# Two pytest-xdist workers: most of the suite's wall time is subprocesses starting up or waiting
# (servers' start-up delays, Ray noticing a death), so a second module fits beside the first even
# on two cores. --dist loadfile keeps a module on one worker (its module-scoped servers start once);
# tests/conftest.py hands out the longest modules first, and --no-loadscope-reorder keeps that order
# (pytest-xdist otherwise sorts modules by their number of tests, which put the long end-to-end
# modules, with few tests each, last). PYTEST_WORKERS=0 runs it in one process. --durations prints
# the slowest tests, to see where the suite's time goes (CI's log included).
PYTEST_WORKERS ?= 2
test: lint $(STAMP) $(VENV)/.chromium $(DATA_VENV)/.installed
	session=make-$$(date +%Y%m%d-%H%M%S)-$$$$; \
	AUTOTUNE_RELIABILITY_SESSION=$$session $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 && \
	$(BIN)/python scripts/reliability_report.py --check --session $$session

# The GPU validation kit's tests (tests/gpu_kit/, for scripts/gpu/): not part of `make test` or CI;
# tests/conftest.py collects them only with AUTOTUNE_GPU_KIT_TESTS=1. Several minutes on two cores.
.PHONY: test-gpu-kit
test-gpu-kit: $(STAMP) $(DATA_VENV)/.installed
	AUTOTUNE_GPU_KIT_TESTS=1 $(BIN)/python -m pytest -q tests/gpu_kit

# The fast tier, for the edit-test loop: every test not marked slow (those start Ray, a search,
# many servers or a browser, or take over ~5 s) and no browser test; `make test` still runs all.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m "not slow and not browser"

clean-mlruns:
	find mlruns -mindepth 1 ! -name .gitkeep -exec rm -rf {} +

# The main job on the embedded default: a real search against the emulator, tracked under mlruns/.
demo: $(STAMP)
	$(BIN)/python -m autotune.search --space demo --summary-json mlruns/demo-summary.json
