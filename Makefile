# mmdcs: `make help` lists every target, what it does and how long it took where measured
# (docs/get_started.md has the details). Every target but help and clean-venv runs `make setup`
# first: an idempotent install of the venv (.venv) and the patched mmcv build (cached in
# ~/.cache/mmdcs), which does nothing once done.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
export MMDCS_VENV := $(VENV)
# pytest workers (2 cores here); set PYTEST_WORKERS=0 to run in one process
PYTEST_WORKERS ?= 2

.DEFAULT_GOAL := setup
.PHONY: help setup demo demo-flops demo-latency demo-peers compare compare-pretrained test \
	clean-venv

help: ## this list [under 1 s]
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | \
		sed -E 's/^([a-z-]+):.*## (.*)$$/  make \1|\2/' | awk -F'|' '{ printf "%-26s %s\n", $$1, $$2 }'

setup: ## install .venv: Python 3.11, torch, mmcv (built), OpenMMLab [8-20 min once]
	@bash tools/setup_env.sh

demo: setup ## DCS, KCR, magnitude at one latency target, end to end [10.1 min, 2026-11-28]
	$(PY) tools/demo.py --resource latency

demo-flops: setup ## the demo at an equal FLOPs budget, 0.92 [6.7 min, 2026-11-25]
	$(PY) tools/demo.py --resource flops

demo-latency: demo ## another name for make demo [as make demo]

demo-peers: setup ## DCS, KCR, magnitude, OFB, DynamicViT on DeiT-Tiny [7.2 min, 2026-11-25]
	$(PY) tools/demo.py --peers

# the default comparison: 1 baseline + 2 budgets x (DCS, KCR: search + retrain; magnitude,
# uniform: retrain) = 13 trainings of 4 epochs on all the digits per seed, 39 in all
COMPARE_OUT ?= work_dirs/compare
compare: setup ## 4 methods x 2 FLOPs budgets x 3 seeds, DeiT-Tiny [~45 min, 2026-11-26]
	$(PY) tools/data/build_digits.py --out data/digits --skip-existing
	$(PY) tools/analysis/compare_methods.py --models deit-tiny \
		--methods dcs kcr magnitude uniform --budgets 0.9 0.7 --seeds 0 1 2 \
		--epochs 4 --train-images 0 --out $(COMPARE_OUT)

# pruning a pretrained model: per seed 1 baseline + DCS, KCR (2-epoch search + fine-tuning) +
# magnitude, Taylor (fine-tuning) = 7 trainings, 21 in all
COMPARE_PRETRAINED_OUT ?= work_dirs/compare_pretrained
compare-pretrained: setup ## pruning a trained DeiT-Tiny, 3 seeds [2 h 07 min loaded, 2026-11-26]
	$(PY) tools/data/build_digits.py --out data/digits --skip-existing
	$(PY) tools/analysis/compare_methods.py --pretrained --models deit-tiny \
		--methods dcs kcr magnitude taylor --budgets 0.7 --seeds 0 1 2 \
		--epochs 4 --search-epochs 2 --train-images 0 --out $(COMPARE_PRETRAINED_OUT)

test: setup ## the whole test suite [time: docs/get_started.md]
	$(PY) -m pytest tests -n $(PYTEST_WORKERS) --dist loadgroup -q -p no:cacheprovider

clean-venv: ## remove .venv; the mmcv wheel stays cached [not measured]
	rm -rf $(VENV)
