# mmdcs: the two commands of the README, and the set-up they share.
#   make demo   search -> export -> retrain -> downstream demo on the embedded digits data
#   make test   the whole test suite
#   make demo-peers   DCS, KCR, OFB and DynamicViT compared on DeiT-Tiny (same data and schedule)
# Both run `make setup` first: an idempotent install of the venv (.venv) and the patched mmcv
# build (cached in ~/.cache/mmdcs), which does nothing once done.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
export MMDCS_VENV := $(VENV)
# pytest workers (2 cores here); set PYTEST_WORKERS=0 to run in one process
PYTEST_WORKERS ?= 2

.PHONY: setup demo demo-peers test clean-venv

setup:
	@bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

demo-peers: setup
	$(PY) tools/demo.py --peers

test: setup
	$(PY) -m pytest tests -n $(PYTEST_WORKERS) --dist loadgroup -q -p no:cacheprovider

clean-venv:
	rm -rf $(VENV)
