# Everything runs from a local virtual environment that `make` creates on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install bytecode run test quick check bench device-check clean

# With no NVIDIA GPU here, a torch and torchvision pair that runs on the CPU goes in first, pinned, and
# satisfies tpulab[torch]'s and tpulab[timm]'s ranges (docs/how-to/install.md tells users how to choose theirs).
# timm needs torchvision, and PyPI has no CPU build of it: PyPI's torchvision fails to import beside torch's CPU
# build ('operator torchvision::nms does not exist'), so the pair is PyPI's own, a CUDA build (2.7 GB of wheels)
# that runs on the CPU; its import costs 0.2 s more than the CPU build's here.
TORCH_CPU ?= torch==2.14.1 torchvision==0.29.1
GPU := $(shell command -v nvidia-smi 2>/dev/null)

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(GPU),,$(PY) -m pip install -q $(TORCH_CPU))
	$(PY) -m pip install -q -e '.[all,test,dev]'
	touch $@

install: $(VENV)/.installed

run: bytecode
	$(VENV)/bin/tpulab --run conv --no-ui

# tpulab's bytecode, written once: an editable install has none, and where PYTHONDONTWRITEBYTECODE is set
# (a CI image, a container) every process compiled the package anew (0.2-0.3 s of CPU each, for the CLI and
# each worker the tests start). Python still checks each file's date, so an edited module is compiled again.
bytecode: install
	$(PY) -m compileall -q tpulab

# Two at a time (one per core, each test taken as a core frees up), then the tests that measure the
# machine's responsiveness, one at a time (another test beside them would be measured too).
# pytest keeps each test module as it rewrote it for its asserts, unless PYTHONDONTWRITEBYTECODE is set: then
# every process that collects the tests rewrote all of them again (5-6 s of CPU each here).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q
test: bytecode
	$(PYTEST) -m "not alone" -n 2 --dist worksteal
	$(PYTEST) -m alone

quick: bytecode
	$(PYTEST) -m "not slow and not alone" -n 2 --dist worksteal

check: install
	$(VENV)/bin/ruff check tpulab tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d build/site  # no -q: it hides the warnings --strict fails on

# Every benchmark, each printing its goal as a ratio against a baseline measured in the same
# run. `make bench`: each at its quick setting (one round, small sizes: about 10 minutes on 2
# cores); `make bench FULL=1`: each at its own defaults, as the docs' figures were measured.
# benchmarks/device_check.py is no benchmark: it installs tpulab offline on a lent GPU machine
# and runs every path once, with no baseline to set a figure against (`make device-check`).
quick = $(if $(FULL),,$(1))
, := ,# a comma inside $(call quick,...)

bench: install
	$(PY) benchmarks/conv_overhead.py $(call quick,--rounds 1 --batch-size 32 --image-size 128)
	$(PY) benchmarks/callback_overhead.py $(call quick,--rounds 2 --steps 10 --batch-size 128)
	$(PY) benchmarks/backends.py $(call quick,--rounds 1 --steps 6 --batch-size 128)
	$(PY) benchmarks/roofline.py $(call quick,--rounds 1 --size 512 --copy-mib 64)
	$(PY) benchmarks/telemetry_overhead.py $(call quick,--blocks 8 --pairs 1 --iterations 60 --samples 100)
	$(PY) benchmarks/first_paint.py $(call quick,--launches 2)
	$(PY) benchmarks/first_figure.py $(call quick,--rounds 1)
	$(PY) benchmarks/store_scale.py $(call quick,--runs 100$(,)10000 --rounds 2)
	$(PY) benchmarks/store_reads.py $(call quick,--runs 10000 --rounds 2)
	$(PY) benchmarks/record_codec.py $(call quick,--rounds 2)
	$(PY) benchmarks/models.py $(call quick,--rounds 1 --steps 4)
	$(PY) benchmarks/profile_overhead.py $(call quick,--pairs 3 --iterations 10 --rounds 1 --profile-steps 5)
	$(PY) benchmarks/torch_module.py $(call quick,--rounds 1 --steps 30)
	$(PY) benchmarks/hf_models.py $(call quick,--rounds 1 --steps 10 --layers 2 --hidden 256 --seq-len 64)
	$(PY) benchmarks/lab_overhead.py $(call quick,--rounds 1 --iterations 200)
	$(PY) benchmarks/noise.py $(call quick,--pairs 3 --rounds 2 --iterations 500)
	$(PY) benchmarks/noise_floor.py $(call quick,--pairs 2 --groups 2 --repeat 3 --processes 4)
	$(PY) benchmarks/fleet.py $(call quick,--rounds 1 --budget 15)
	$(PY) benchmarks/decode_engines.py $(call quick,--rounds 1 --batch-sizes 1)

# tpulab on the JAX backend, offline from carried wheels (benchmarks/device_check.py): on a
# machine with an NVIDIA GPU, the run alone, into $(OUT) (the device tool sets it); elsewhere,
# the wheelhouses first (PyPI), then the same steps on the CPU at smoke sizes.
device-check:
	python3 benchmarks/device_check.py $(if $(OUT),--out $(OUT))

clean:
	rm -rf $(VENV) *.egg-info
