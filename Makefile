# Two commands on a fresh machine: `make demo` and `make test` (README quick start).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test test-slow test-all bench clean

# A virtual environment with the pinned dependencies and egad installed editable.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,plots]'
	touch $(STAMP)

setup: $(STAMP)

# Debian's Chromium and chromedriver for the browser test (tests/viz/test_viz_browser.py):
# installed with apt-get, as root (CI), only when /usr/bin/chromium is missing; elsewhere
# the test is skipped (and fails under CI, which must run it).
BROWSER_STAMP := $(VENV)/.chromium-stamp
$(BROWSER_STAMP): | $(STAMP)
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	  else \
	    echo "no /usr/bin/chromium: the browser test will be skipped (as root: apt-get install chromium chromium-driver)"; \
	  fi; \
	fi
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then touch $@; fi

demo: $(STAMP)
	$(BIN)/egad demo

# The default suite: fits CI (2 cores, well under 30 minutes); slow and GPU tests excluded.
test: $(STAMP) $(BROWSER_STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not gpu"

test-slow: $(STAMP) $(BROWSER_STAMP)
	$(BIN)/python -m pytest -q -m "slow"

test-all: $(STAMP) $(BROWSER_STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info

# The peers of the side-by-side suite (jax, jaxlib, torch==2.13.0 CPU), installed only for `make bench`.
PEERS_STAMP := $(VENV)/.peers-stamp
$(PEERS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,plots,peers]'
	touch $(PEERS_STAMP)

# Speed and memory measurements: tables on stdout, JSON in benchmarks/results/; last,
# egad against JAX and PyTorch (benchmarks/RESULTS.md, plots, README's Performance section).
bench: $(STAMP) $(PEERS_STAMP)
	$(BIN)/python -m benchmarks.interp_overhead
	$(BIN)/python -m benchmarks.loop_driver
	$(BIN)/python -m benchmarks.memory
	$(BIN)/python -m benchmarks.compile_time
	$(BIN)/python -m benchmarks.cpu_kernels
	$(BIN)/python -m benchmarks.lstm_products
	$(BIN)/python -m benchmarks.calibrate
	$(BIN)/python -m benchmarks.optimizer
	$(BIN)/python -m benchmarks.suite
