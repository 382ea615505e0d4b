#!/usr/bin/env bash
# Idempotent set-up of the mmdcs environment (the recipe is in the README, "The two commands").
#
#   bash tools/setup_env.sh          # create or repair the venv, then exit
#
# What it does, once per machine / checkout:
#   1. a virtualenv at $MMDCS_VENV (default: <repo>/.venv) with Python 3.11;
#   2. build tools (setuptools>=77,<82, wheel, ninja), torch 2.14.1 and torchvision 0.29.1;
#   3. mmcv 2.1.0 with ops, built from the PyPI sdist patched for C++20. The wheel is cached in
#      $MMDCS_CACHE (default: ~/.cache/mmdcs), keyed by mmcv, torch, Python and CPU/CUDA arch,
#      so the ~11 minute build happens once per machine;
#   4. the rest of the stack (requirements/runtime.txt, pinned by requirements/constraints.txt),
#      the test tools, and mmdcs itself (editable).
# A stamp file inside the venv records a hash of this script and the requirement files. If the
# stamp is present and current, nothing is done. If the venv exists without a current stamp (a
# previous run failed half way, or the pins changed), it is removed and rebuilt: a half-built venv
# never looks usable. A failing step is named and the script exits non-zero.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMDCS_VENV:-$ROOT/.venv}
CACHE=${MMDCS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmdcs}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
MMCV_VERSION=2.1.0

STEP="start"
on_error() {
    echo "" >&2
    echo "mmdcs set-up FAILED at step: ${STEP}" >&2
    echo "  The venv at ${VENV} is not marked ready; the next run of 'make setup' rebuilds it." >&2
    exit 1
}
trap on_error ERR

step() { STEP="$1"; echo "==> [setup] $1"; }

hash_inputs() {
    cat "$ROOT/tools/setup_env.sh" "$ROOT"/requirements/*.txt | sha256sum | cut -c1-16
}
STAMP_VALUE=$(hash_inputs)
STAMP_FILE="$VENV/.mmdcs-ready"

if [[ -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$STAMP_VALUE" ]]; then
    exit 0
fi

step "check the Python interpreter ($PYTHON)"
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ "$PYVER" != "3.11" ]]; then
    echo "mmdcs needs Python 3.11 (torch ${TORCH_VERSION} wheels); '$PYTHON' is $PYVER." >&2
    echo "Set PYTHON=/path/to/python3.11 and run again." >&2
    false
fi

if [[ -d "$VENV" ]]; then
    step "remove the incomplete or outdated venv at $VENV"
    rm -rf "$VENV"
fi

# pip, without the machine-level warnings about find-links folders that do not exist here
pip_quiet() {
    # (`|| true`: grep exits 1 when it passes nothing on, which is not a failure of pip)
    "$PY" -m pip "$@" 2> >(grep -v "^WARNING: Location 'file://.*' is ignored" >&2 || true)
}

step "create the virtualenv at $VENV"
"$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=(pip_quiet install --disable-pip-version-check --quiet --no-warn-script-location)

step "install build tools"
"${PIP[@]}" --upgrade pip
"${PIP[@]}" -r "$ROOT/requirements/build.txt"

step "install torch ${TORCH_VERSION} and torchvision ${TORCHVISION_VERSION}"
"${PIP[@]}" "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"

# CUDA build of mmcv's ops when a GPU is visible (or MMDCS_CUDA=1); a CPU-built mmcv raises
# "implementation for device cuda:0 not found" in nms/RoIAlign on a GPU machine.
WITH_CUDA=${MMDCS_CUDA:-$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))')}
if [[ "$WITH_CUDA" == "1" ]]; then
    ARCH=${TORCH_CUDA_ARCH_LIST:-$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())')}
    VARIANT="cuda${ARCH//[^0-9]/}"
else
    VARIANT="cpu"
fi
PYTAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
WHEEL_DIR="$CACHE/wheels/mmcv-${MMCV_VERSION}_torch-${TORCH_VERSION}_${PYTAG}_${VARIANT}"

if ! ls "$WHEEL_DIR"/mmcv-*.whl >/dev/null 2>&1; then
    step "build mmcv ${MMCV_VERSION} with ops (${VARIANT}; about 11 minutes on 2 cores, cached after)"
    BUILD=$(mktemp -d)
    # --no-build-isolation: preparing the sdist's metadata runs its setup.py, which imports
    # pkg_resources (gone from the setuptools an isolated build env would get)
    pip_quiet download --disable-pip-version-check --quiet --no-deps --no-binary :all: \
        --no-build-isolation "mmcv==${MMCV_VERSION}" -d "$BUILD"
    tar -xzf "$BUILD"/mmcv-${MMCV_VERSION}.tar.gz -C "$BUILD"
    SRC="$BUILD/mmcv-${MMCV_VERSION}"
    # torch >= 2.13 headers require C++20; mmcv 2.1.0 hard-codes -std=c++17.
    sed -i 's/-std=c++17/-std=c++20/g' "$SRC/setup.py"
    grep -q -- '-std=c++20' "$SRC/setup.py"
    if [[ "$VARIANT" != "cpu" ]]; then
        export FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST="${ARCH}"
    fi
    mkdir -p "$CACHE"
    BUILD_LOG="$CACHE/mmcv-build.log"
    echo "    (compiler output: $BUILD_LOG)"
    if ! MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" -m pip wheel \
        --disable-pip-version-check --no-build-isolation --no-deps -w "$BUILD/dist" "$SRC" \
        > "$BUILD_LOG" 2>&1; then
        tail -n 40 "$BUILD_LOG" >&2
        false
    fi
    mkdir -p "$WHEEL_DIR"
    # move into place only once complete, so an interrupted build is never cached
    cp "$BUILD"/dist/mmcv-*.whl "$WHEEL_DIR.tmp.whl"
    mv "$WHEEL_DIR.tmp.whl" "$WHEEL_DIR/$(basename "$BUILD"/dist/mmcv-*.whl)"
    rm -rf "$BUILD"
fi

step "install mmcv ${MMCV_VERSION} from $WHEEL_DIR"
"${PIP[@]}" "$WHEEL_DIR"/mmcv-*.whl

step "install the OpenMMLab stack and the test tools"
"${PIP[@]}" -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt" \
    -c "$ROOT/requirements/constraints.txt"

step "install mmdcs (editable)"
"${PIP[@]}" --no-deps --no-build-isolation -e "$ROOT"

step "check the installation"
"$PY" - <<'EOF'
import mmcv, mmcv.ops, mmengine, mmdet, mmseg, mmpretrain, timm, torch  # noqa: F401
import mmdcs
print(f'torch {torch.__version__}, mmcv {mmcv.__version__}, mmengine {mmengine.__version__}, '
      f'mmdet {mmdet.__version__}, mmseg {mmseg.__version__}, mmpretrain {mmpretrain.__version__}, '
      f'timm {timm.__version__}, mmdcs {mmdcs.__version__}')
EOF

echo "$STAMP_VALUE" > "$STAMP_FILE"
echo "==> [setup] environment ready: $VENV"
