#!/usr/bin/env bash
# Distributed training with torchrun:  bash tools/dist_train.sh CONFIG GPUS [train.py args...]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT. Without a GPU, GPUS processes run on the
# CPU with the gloo backend. GPUS is checked in the shell before Python starts.
CONFIG=$1
GPUS=$2
if [[ -z "$CONFIG" || -z "$GPUS" ]]; then
    echo "usage: bash tools/dist_train.sh CONFIG GPUS [train.py options]" >&2
    exit 2
fi
source "$(dirname "$0")/dist_procs.sh"
torchrun_tool "$GPUS" train.py "$CONFIG" --launcher pytorch "${@:3}"
