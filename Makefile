# Everything runs from a local virtual environment that `make` creates on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install run test quick check bench device-check clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,test,dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/tpulab --run conv --no-ui

test: install
	$(PY) -m pytest -q

quick: install
	$(PY) -m pytest -q -m "not slow"

check: install
	$(VENV)/bin/ruff check tpulab tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: install
	$(PY) benchmarks/conv_overhead.py
	$(PY) benchmarks/callback_overhead.py
	$(PY) benchmarks/backends.py

# tpulab on the JAX backend, offline from carried wheels (benchmarks/device_check.py): on a
# machine with an NVIDIA GPU, the run alone, into $(OUT) (the device tool sets it); elsewhere,
# the wheelhouses first (PyPI), then the same steps on the CPU at smoke sizes.
device-check:
	python3 benchmarks/device_check.py $(if $(OUT),--out $(OUT))

clean:
	rm -rf $(VENV) *.egg-info
