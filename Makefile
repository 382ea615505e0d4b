# mmdcs: the two commands of the README, and the set-up they share.
#   make demo   search -> export -> retrain -> downstream demo on the embedded digits data, every
#               method at one latency target predicted by tables measured here first
#   make demo-flops   the same at an equal FLOPs budget (0.92, MLP channels only)
#   make test   the whole test suite
#   make demo-peers   DCS, KCR, OFB and DynamicViT compared on DeiT-Tiny (same data and schedule)
#   make compare   DCS, KCR, magnitude and uniform pruning of DeiT-Tiny at 0.9 and 0.7 FLOPs,
#                  3 seeds (tools/analysis/compare_methods.py; resumable, work_dirs/compare)
#   make compare-pretrained   the same from a trained baseline per seed: DCS/KCR search from it,
#                  magnitude and Taylor prune it, every subnet fine-tuned from its inherited weights
# Both run `make setup` first: an idempotent install of the venv (.venv) and the patched mmcv
# build (cached in ~/.cache/mmdcs), which does nothing once done.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
export MMDCS_VENV := $(VENV)
# pytest workers (2 cores here); set PYTEST_WORKERS=0 to run in one process
PYTEST_WORKERS ?= 2

.PHONY: setup demo demo-flops demo-latency demo-peers compare compare-pretrained test clean-venv

setup:
	@bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py --resource latency

# the same comparison at an equal FLOPs budget (the demo before 2026-11-27)
demo-flops: setup
	$(PY) tools/demo.py --resource flops

# kept as a name: what `make demo` runs
demo-latency: demo

demo-peers: setup
	$(PY) tools/demo.py --peers

# the default comparison: 1 baseline + 2 budgets x (DCS, KCR: search + retrain; magnitude,
# uniform: retrain) = 13 trainings of 4 epochs on all the digits per seed, 39 in all
COMPARE_OUT ?= work_dirs/compare
compare: setup
	$(PY) tools/data/build_digits.py --out data/digits --skip-existing
	$(PY) tools/analysis/compare_methods.py --models deit-tiny \
		--methods dcs kcr magnitude uniform --budgets 0.9 0.7 --seeds 0 1 2 \
		--epochs 4 --train-images 0 --out $(COMPARE_OUT)

# pruning a pretrained model: per seed 1 baseline + DCS, KCR (2-epoch search + fine-tuning) +
# magnitude, Taylor (fine-tuning) = 7 trainings, 21 in all
COMPARE_PRETRAINED_OUT ?= work_dirs/compare_pretrained
compare-pretrained: setup
	$(PY) tools/data/build_digits.py --out data/digits --skip-existing
	$(PY) tools/analysis/compare_methods.py --pretrained --models deit-tiny \
		--methods dcs kcr magnitude taylor --budgets 0.7 --seeds 0 1 2 \
		--epochs 4 --search-epochs 2 --train-images 0 --out $(COMPARE_PRETRAINED_OUT)

test: setup
	$(PY) -m pytest tests -n $(PYTEST_WORKERS) --dist loadgroup -q -p no:cacheprovider

clean-venv:
	rm -rf $(VENV)
