#!/usr/bin/env bash
# Distributed training with torchrun:  bash tools/dist_train.sh CONFIG GPUS [train.py args...]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT. Without a GPU, GPUS processes run on the
# CPU with the gloo backend.
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}

if [[ -z "$CONFIG" || -z "$GPUS" ]]; then
    echo "usage: bash tools/dist_train.sh CONFIG GPUS [train.py options]" >&2
    exit 2
fi

# GPUS: processes on this node, checked in the shell before Python starts
source "$(dirname "$0")/dist_procs.sh"
check_process_count "$GPUS" || exit 2

PYTHONPATH="$(dirname "$0")/..":${PYTHONPATH:-} \
python -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$(dirname "$0")/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
