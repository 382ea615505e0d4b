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
.PHONY: help setup demo demo-flops demo-latency demo-peers compare compare-pretrained \
	compare-fashion test clean-venv

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

# Fashion-MNIST, the protocol of docs/benchmarks_fashion_plan.md: DeiT-Tiny trained once (12
# epochs on the first 10,000 images, validated every epoch) while the latency tables (batch 16)
# are measured and every budget checked against their floors; then per seed and budget DCS, KCR
# (search 1 + fine-tune 2 epochs), magnitude, Taylor, uniform (fine-tune 3) and the ablation at
# DCS's widths (fine-tune 2), every subnet at its measured latency: two one-thread processes,
# one per budget, each pinned to a core, then merged. Rerun to resume. A baseline trained
# elsewhere by the same tools/train.py command: COMPARE_FASHION_BASELINE=WORK_DIR.
COMPARE_FASHION_OUT ?= work_dirs/compare_fashion
COMPARE_FASHION_BASELINE ?= $(COMPARE_FASHION_OUT)/baseline
FASHION_EPOCHS := 12
FASHION_IMAGES := 10000
FASHION_GRID := --dataset fashion-mnist --pretrained --resource latency --models deit-tiny \
	--methods dcs kcr magnitude taylor uniform dcs-ce dcs-kcr --seeds 0 1 2 \
	--epochs 2 --search-epochs 1 --pruner-epochs 3 --train-images $(FASHION_IMAGES) \
	--baseline-epochs $(FASHION_EPOCHS) --baseline-from $(COMPARE_FASHION_BASELINE) \
	--tables $(COMPARE_FASHION_OUT)/tables
ONE_CORE := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c
compare-fashion: setup ## 7 methods x 2 latency budgets (0.7, 0.55) x 3 seeds, Fashion-MNIST [83 min, 2026-11-28]
	$(PY) tools/data/fashion_mnist.py --out data/fashion-mnist
	set -e; pids=; \
	if [ ! -f $(COMPARE_FASHION_BASELINE)/epoch_$(FASHION_EPOCHS).pth ]; then \
		$(ONE_CORE) 1 $(PY) tools/train.py configs/demo/deit-tiny_fashion-cls.py \
		--work-dir $(COMPARE_FASHION_BASELINE) --cfg-options \
		train_cfg.max_epochs=$(FASHION_EPOCHS) train_dataloader.dataset.indices=$(FASHION_IMAGES) \
		randomness.seed=0 & pids=$$!; fi; \
	$(ONE_CORE) 0 $(PY) tools/analysis/compare_methods.py $(FASHION_GRID) --budgets 0.7 0.55 \
		--tables-only --out $(COMPARE_FASHION_OUT) & pids="$$pids $$!"; \
	for p in $$pids; do wait $$p; done
	set -e; \
	$(ONE_CORE) 0 $(PY) tools/analysis/compare_methods.py $(FASHION_GRID) --budgets 0.7 \
		--out $(COMPARE_FASHION_OUT)/budget0.7 & a=$$!; \
	$(ONE_CORE) 1 $(PY) tools/analysis/compare_methods.py $(FASHION_GRID) --budgets 0.55 \
		--out $(COMPARE_FASHION_OUT)/budget0.55 & b=$$!; \
	wait $$a; wait $$b
	$(PY) tools/analysis/compare_methods.py --merge $(COMPARE_FASHION_OUT)/budget0.7 \
		$(COMPARE_FASHION_OUT)/budget0.55 --out $(COMPARE_FASHION_OUT)

test: setup ## the whole test suite [time: docs/get_started.md]
	$(PY) -m pytest tests -n $(PYTEST_WORKERS) --dist loadgroup -q -p no:cacheprovider

clean-venv: ## remove .venv; the mmcv wheel stays cached [not measured]
	rm -rf $(VENV)
