#!/usr/bin/env bash
# Run here (no GPU) before a device run: the wheels the device image lacks, for its Python 3.12,
# at the versions of this project's .venv, into ./.whl (git-ignored through .git/info/exclude).
# Then: run(command="bash bench/gpu/session.sh", carry=[".whl"], timeout_s=570).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir -p .whl
pins=()
for name in websockets tree-sitter tree-sitter-python; do
  pins+=("$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d .whl "${pins[@]}"
ls -l .whl
# The standard library as this machine has it (the device's Python is another version; its
# packages stand in for ours): session.sh unpacks it and points LLADA_LSP_CORPUS at it.
"$PY" -m engine.train.corpus --stdlib-only .whl/corpus.tar.xz
ls -l .whl/corpus.tar.xz
