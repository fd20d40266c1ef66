#!/usr/bin/env bash
# Installs what ddpbench needs on a fresh Debian 12 machine, then configures and
# builds into build/. Idempotent: every step is skipped when already done.
#   scripts/setup.sh            install + build everything (Release-with-debug-info)
#   scripts/setup.sh ddpbench   install + build only these targets (the README's
#                               first command: the binary, not the tests)
#   DDPBENCH_SKIP_BUILD=1 ...   install only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DEB_PACKAGES=(
  build-essential cmake ninja-build ccache git pkg-config python3-venv
  libcli11-dev nlohmann-json3-dev libcsv-dev zlib1g-dev libgloo-dev libjpeg62-turbo-dev libpng-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  slurm-wlm munge openmpi-bin libopenmpi-dev iproute2 procps util-linux
)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# LibTorch 2.11 comes from PyPI's torch wheel (headers, cmake config, c10d with
# Gloo and NCCL) in a git-ignored virtual environment.
TORCH_VERSION=2.11.0
TORCHVISION_VERSION=0.26.0   # the torchvision release built against torch 2.11
# nvJPEG's header and library for --decode=gpu (torch's CUDA 13.0 wheel has neither).
NVJPEG='nvidia-nvjpeg==13.0.*'
PY="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='$TORCH_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION into .venv (large download)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" numpy matplotlib pillow "$NVJPEG"
fi
# torchvision: the reference ImageFolder order test and the loader benchmark.
{ .venv/bin/python -c "import numpy, matplotlib, PIL, torchvision" 2>/dev/null &&
  compgen -G ".venv/lib/python3*/site-packages/nvidia/cu13/include/nvjpeg.h" >/dev/null; } ||
  .venv/bin/pip install -q "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" numpy matplotlib pillow "$NVJPEG"

[[ "${DDPBENCH_SKIP_BUILD:-0}" == 1 ]] && exit 0

TORCH_PREFIX="$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DPython3_EXECUTABLE="$ROOT/.venv/bin/python"
fi
# Targets given as arguments build alone (ninja builds what they need);
# without any, everything (.ci/run, the README's test command).
cmake --build build -j"$(nproc)" ${1:+--target "$@"}
