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

# GPUS: processes on this node, an integer from 1 to the GPUs here (without a GPU: the CPU cores)
if [[ -n "${CUDA_VISIBLE_DEVICES+x}" ]]; then
    IFS=',' read -ra VISIBLE <<< "$CUDA_VISIBLE_DEVICES"
    MAX_PROCS=${#VISIBLE[@]}
elif command -v nvidia-smi > /dev/null; then
    MAX_PROCS=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
else
    MAX_PROCS=0
fi
(( MAX_PROCS > 0 )) || MAX_PROCS=$(getconf _NPROCESSORS_ONLN)
if ! [[ "$GPUS" =~ ^[0-9]+$ ]] || (( 10#$GPUS < 1 || 10#$GPUS > MAX_PROCS )); then
    echo "error: GPUS must be an integer from 1 to $MAX_PROCS (the GPUs of this machine;" \
         "without a GPU, its CPU cores), got '$GPUS'" >&2
    exit 2
fi

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
