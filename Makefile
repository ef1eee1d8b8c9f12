# Two entry points (see README): `make demo` runs a real search against the emulator, `make test`
# runs the test suite. Each builds its own .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# SGLang's argument parser imports on a CPU with these; the full wheel wants CUDA torch.
SGLANG_PARSER_DEPS := numpy orjson psutil pybase64 requests packaging pillow starlette msgspec \
	pydantic pyzmq tqdm IPython aiohttp triton

.PHONY: venv demo test clean-mlruns

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch only this way: it takes the CPU build on disk and never pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	# The distribution was once named autotune (PyPI's is another project): drop that metadata first.
	$(BIN)/pip uninstall -q -y autotune 2>/dev/null || true
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-deps sglang==0.5.23
	$(BIN)/pip install -q $(SGLANG_PARSER_DEPS)
	$(BIN)/python -c "from sglang.srt.server_args import ServerArgs"
	touch $(STAMP)

# The MLflow UI tests drive Debian's Chromium (headless; the screenshot script through Playwright, which
# pip installs with the test extras: no `playwright install`, its browser download is not reachable).
# Without Chromium those tests skip and say why.
$(VENV)/.chromium:
	command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
		echo "warning: could not install chromium; the browser test will be skipped"
	touch $@

venv: $(STAMP)

# The run is named, and the reliability outcomes it recorded must all come from it (none empty,
# none left by an earlier run): scripts/reliability_report.py --check.
test: $(STAMP) $(VENV)/.chromium
	session=make-$$(date +%Y%m%d-%H%M%S)-$$$$; \
	AUTOTUNE_RELIABILITY_SESSION=$$session $(BIN)/python -m pytest -q && \
	$(BIN)/python scripts/reliability_report.py --check --session $$session

clean-mlruns:
	find mlruns -mindepth 1 ! -name .gitkeep -exec rm -rf {} +

# The main job on the embedded default: a real search against the emulator, tracked under mlruns/.
demo: $(STAMP)
	$(BIN)/python -m autotune.search --space demo --summary-json mlruns/demo-summary.json
