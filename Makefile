# The two commands of the README, and the steps they stand on.
#   make serve   - venv + install + fetch smol-135m (once) + serve runtime.toml
#   make test    - venv + install (with test extras) + fetch smol-135m (once) + headless
#                  Chromium for the browser tests (once) + the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: serve test model install bench browser

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

install: $(VENV)/.installed

model: install
	$(PY) tlserve.py fetch-model

serve: model
	$(PY) tlserve.py --config runtime.toml

# Debian's chromium + chromium-driver for tests/browser: installed as root where missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" -ne 0 ]; then \
	    echo "make: the browser tests need chromium and chromium-driver;" \
	         "as root: apt-get install chromium chromium-driver" >&2; exit 1; fi; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends chromium chromium-driver; }

test: model browser
	$(PY) -m pytest -q

bench: model
	$(PY) bench/run_all.py
