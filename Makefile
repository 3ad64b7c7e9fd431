# The two commands of the README, and the steps they stand on.
#   make serve   - venv + install + fetch smol-135m (once) + serve runtime.toml
#   make test    - venv + install (with test extras) + fetch smol-135m (once) + the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: serve test model install bench

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

install: $(VENV)/.installed

model: install
	$(PY) tlserve.py fetch-model

serve: model
	$(PY) tlserve.py --config runtime.toml

test: model
	$(PY) -m pytest -q

bench: model
	$(PY) bench/run_all.py
