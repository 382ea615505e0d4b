#!/usr/bin/env bash
# Sourced by dist_train.sh and dist_test.sh: the checks and the torchrun call they share.

# check_process_count GPUS: the process count of one node, an integer from 1 to the GPUs here
# (CUDA_VISIBLE_DEVICES, else nvidia-smi; without a GPU: the CPU cores).
check_process_count() {
    local GPUS=$1 MAX_PROCS VISIBLE
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
        return 2
    fi
}

# torchrun_tool GPUS TOOL ARGS...: tools/TOOL (train.py, test.py) in GPUS processes of this node
# under torchrun, ARGS after it; multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT.
torchrun_tool() {
    local GPUS=$1 TOOL=$2 HERE
    shift 2
    check_process_count "$GPUS" || return 2
    HERE=$(dirname "${BASH_SOURCE[0]}")
    PYTHONPATH="$HERE/..":${PYTHONPATH:-} \
    python -m torch.distributed.run \
        --nnodes="${NNODES:-1}" \
        --node_rank="${NODE_RANK:-0}" \
        --master_addr="${MASTER_ADDR:-127.0.0.1}" \
        --nproc_per_node="$GPUS" \
        --master_port="${PORT:-29500}" \
        "$HERE/$TOOL" "$@"
}
