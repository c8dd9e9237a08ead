#!/usr/bin/env bash
# Builds llama.cpp's `llama-diffusion-cli` (and `llama-tokenize`, which bench/peer_llamacpp.py
# uses to check the prompt's token count) for the peer comparison, under
# ~/.cache/llada-lsp/llama.cpp (override: LLAMA_CPP_DIR). Nothing is written into the repository.
#
#   bash bench/peer_llamacpp_build.sh              # source from PyPI (see below)
#   LLAMA_CPP_SRC=/path/to/llama.cpp bash bench/peer_llamacpp_build.sh   # an existing checkout
#
# The source: llama-cpp-python's sdist vendors llama.cpp whole (examples/diffusion and
# convert_hf_to_gguf.py included); version 0.3.35 vendors llama.cpp commit LLAMA_CPP_COMMIT (its
# git submodule pointer at tag v0.3.35; the sdist is checked by its sha256). PyPI is reachable
# where GitHub is not. The build runs under `nice -n 10` (the machine is shared) with
# GGML_NATIVE=ON: the binary is for this CPU.
set -euo pipefail

SDIST_VERSION=0.3.35
LLAMA_CPP_COMMIT=4df29be4f4c3673f428170fda944a5b19f743bb8
SDIST_SHA256=1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12
DEST=${LLAMA_CPP_DIR:-$HOME/.cache/llada-lsp/llama.cpp}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}

mkdir -p "$DEST"
if [ -n "${LLAMA_CPP_SRC:-}" ]; then
    rm -rf "$DEST/src"
    cp -a "$LLAMA_CPP_SRC" "$DEST/src"
    (cd "$DEST/src" && git rev-parse HEAD 2>/dev/null || echo "unknown commit") > "$DEST/COMMIT"
elif [ ! -f "$DEST/src/examples/diffusion/diffusion-cli.cpp" ]; then
    "$PYTHON" -m pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$SDIST_VERSION" -d "$DEST/sdist"
    echo "$SDIST_SHA256  $DEST/sdist/llama_cpp_python-$SDIST_VERSION.tar.gz" | sha256sum -c -
    rm -rf "$DEST/src" "$DEST/unpack"
    mkdir -p "$DEST/unpack"
    tar xzf "$DEST/sdist/llama_cpp_python-$SDIST_VERSION.tar.gz" -C "$DEST/unpack" \
        "llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp"
    mv "$DEST/unpack/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp" "$DEST/src"
    rm -rf "$DEST/unpack"
    echo "$LLAMA_CPP_COMMIT (vendored by llama-cpp-python $SDIST_VERSION)" > "$DEST/COMMIT"
fi

HERE=$(cd "$(dirname "$0")" && pwd)
cd "$DEST/src"
# peer_llamacpp_unity.cmake: libllama compiles as a unity build (less compile work, same code)
nice -n 10 cmake -B "$DEST/build" -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PROJECT_INCLUDE="$HERE/peer_llamacpp_unity.cmake"
nice -n 10 cmake --build "$DEST/build" --target llama-diffusion-cli llama-tokenize -j"$JOBS"
echo "built: $DEST/build/bin/llama-diffusion-cli (llama.cpp $(cat "$DEST/COMMIT"))"
