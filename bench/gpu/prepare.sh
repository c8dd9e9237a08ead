#!/usr/bin/env bash
# Run here (no GPU) before a device run: the wheels the device image lacks, for its Python 3.12,
# at the versions of this project's .venv, into ./.whl (git-ignored through .git/info/exclude).
# Then: run(command="bash bench/gpu/session.sh", carry=[".whl"], timeout_s=570), and right
# after it: python bench/gpu/carry.py --restore (the weights prepare.sh set aside).
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
# The training files as this machine tokenizes them, with their cut points and the trainer's
# held-out rows (engine/train/bank.py): session.sh trains on it, every batch cut on the GPU. By
# default the whole training split, the standard library and the pinned packages (5,003 files,
# 24.8M tokens, ~18 MB, ~3 minutes here); STDLIB_ONLY=1 the standard library alone (1,679
# files, 8.5M tokens, 6.6 MB: session 18's bank, which the model had seen ~22 times over).
# CORPUS=1 packs the standard library's files instead (the host's cores cut the examples;
# session 15's runs waited 74% of the time for them).
rm -f .whl/corpus.tar.xz .whl/bank.npz.xz
if [ "${CORPUS:-0}" = 1 ]; then
  "$PY" -m engine.train.corpus --stdlib-only .whl/corpus.tar.xz
elif [ "${STDLIB_ONLY:-0}" = 1 ]; then
  "$PY" -m engine.train.bank --stdlib-only .whl/bank.npz.xz
else
  "$PY" -m engine.train.bank .whl/bank.npz.xz
fi
ls -l .whl
# A call carries 64 MiB: the whole bank fits once tiny-code's weights (not read on the device)
# are set aside. Put them back right after the device call: python bench/gpu/carry.py --restore
"$PY" bench/gpu/carry.py --carry .whl --fit
