#!/usr/bin/env bash
# Distributed testing with torchrun:  bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args...]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT. GPUS is checked before Python starts.
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
if [[ -z "$CONFIG" || -z "$CHECKPOINT" || -z "$GPUS" ]]; then
    echo "usage: bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py options]" >&2
    exit 2
fi
source "$(dirname "$0")/dist_procs.sh"
torchrun_tool "$GPUS" test.py "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
