# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test conformance opinfo hf-models bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tensorkiln demo

# Two test processes share the two cores: OpenMP threads sleep instead of spinning while they wait.
test: $(STAMP)
	OMP_WAIT_POLICY=passive $(PY) -m pytest -q -n 2 --dist loadfile

# Every supported ONNX backend case compiled to C (the test suite compiles a share of them).
conformance: $(STAMP)
	TK_CONFORMANCE=all OMP_WAIT_POLICY=passive $(PY) -m pytest -q -n 2 tests/importers/test_onnx_conformance.py -k compiled

# Every float32 sample of every PyTorch OpInfo through the torch.compile path, and Inductor on the same samples.
opinfo: $(STAMP)
	OMP_WAIT_POLICY=passive $(PY) -m tensorkiln.tools.opinfo_conformance --inductor --fallback --json opinfo-results.json

# Every Hugging Face architecture of tensorkiln/tools/hf_zoo.py through both PyTorch paths, and generate().
hf-models: $(STAMP)
	TK_HF_MODELS=all OMP_WAIT_POLICY=passive $(PY) -m pytest -q tests/importers/torch/test_hf_models.py

# The peers (PyTorch, ONNX Runtime) come with the `bench` extra; every figure lands in bench-results.json.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) benchmarks/run_all.py --out bench-results.json

clean:
	rm -rf $(VENV) build *.egg-info
