#!/usr/bin/env bash
# Building on a GPU machine that has PyTorch (with CUDA) and cmake but no apt
# and no network. Two halves:
#   here (with apt):   scripts/gpu_build.sh pack     -> .deb/root (git-ignored)
#   there:             scripts/gpu_build.sh build    -> build-gpu/ddpbench
# `pack` downloads the header/library .debs ddpbench needs and unpacks them
# (and nvJPEG's wheel, for --decode=gpu, into .deb/nvjpeg);
# `build` configures against that machine's torch and the unpacked tree.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; cd "$ROOT"
case "${1:-}" in
  pack)
    mkdir -p .deb/pkgs && cd .deb/pkgs
    apt-get download libcli11-dev libcsv-dev libcsv3 nlohmann-json3-dev libgtest-dev libgmock-dev \
      libbenchmark-dev libbenchmark1debian libgloo-dev zlib1g-dev \
      libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16
    for d in *.deb; do dpkg-deb -x "$d" ../root; done
    # libcsv's .so link points at an absolute path; make it relative.
    ln -sf libcsv.so.3 ../root/usr/lib/x86_64-linux-gnu/libcsv.so
    # nvJPEG for --decode=gpu (header and library, PyPI's wheel): CMake looks in .deb/nvjpeg.
    PIP="${PIP:-$ROOT/.venv/bin/pip}"
    rm -rf ../nvjpeg-wheel && "$PIP" download -q --no-deps 'nvidia-nvjpeg==13.0.*' -d ../nvjpeg-wheel
    rm -rf ../nvjpeg && mkdir -p ../nvjpeg && (cd ../nvjpeg && python3 -m zipfile -e ../nvjpeg-wheel/*.whl .)
    echo "packed into $ROOT/.deb/root" ;;
  build)
    PY="${PYTHON:-python3}"
    TORCH="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    R="$ROOT/.deb/root/usr"
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH;$R" \
      -DCMAKE_INCLUDE_PATH="$R/include" -DCMAKE_LIBRARY_PATH="$R/lib/x86_64-linux-gnu" \
      -DGTest_DIR="$R/lib/x86_64-linux-gnu/cmake/GTest" -DDDPBENCH_TESTS=OFF \
      ${CMAKE_GENERATOR:+-G "$CMAKE_GENERATOR"}
    cmake --build build-gpu -j"$(nproc)" --target ddpbench
    echo "LD_LIBRARY_PATH=$R/lib/x86_64-linux-gnu build-gpu/ddpbench ..."
    grep -q "^NVJPEG_LIBRARY:FILEPATH=/" build-gpu/CMakeCache.txt ||
      echo "note: no nvJPEG found (pack again, or pip install nvidia-nvjpeg): --decode=gpu is refused" ;;
  *) echo "usage: $0 pack|build" >&2; exit 2 ;;
esac
