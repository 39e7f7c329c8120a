# Two set-up commands do everything on a fresh machine: `make demo` (the default training run) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN := torch==2.13.0

.PHONY: install demo test test-slow lint bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, from the local CPU build; everything else is constrained to it.
	$(PIP) install -q $(TORCH_PIN)
	echo "$(TORCH_PIN)" > $(VENV)/constraints.txt
	$(PIP) install -q -c $(VENV)/constraints.txt -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/gigpo-lab train

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q

test-slow: install
	$(PY) -m pytest -q -m slow || [ $$? -eq 5 ]  # 5 = no slow tests collected

bench: install
	$(PY) experiments/bench_advantages.py

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) outputs multirun mlflow.db .pytest_cache
