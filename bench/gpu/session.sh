#!/usr/bin/env bash
# One prepared device run on a lent GPU (at most 9.5 minutes; prepare with bench/gpu/prepare.sh):
#   1. continue training the embedded model there (warmup-stable-decay sized by wall clock,
#      from the committed weights, a fresh optimizer); the weights come back split under the
#      per-file limit: rejoin with `cat model.safetensors.part-* > model.safetensors`;
#   2. the fused confidence kernel against its reference (bench/kernels.py);
#   3. the LLaDA2.0-mini forward with random bf16 weights (bench/gpu_llada2.py);
#   4. the daemon's batched scheduler on the GPU (bench/concurrency.py --quick --device cuda).
# Writes at most 8 files to $OUT. GPU_SESSION_DRY=1 runs the plumbing on a CPU (a few seconds
# of training, the GPU benchmarks skipped), as tests/engine/test_gpu_session.py does.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/out/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TQDM_DISABLE=1
PY=${PY:-python3}
DRY=${GPU_SESSION_DRY:-0}
if [ "$DRY" != 1 ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then  # the device's wheels
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "$DRY" = 1 ]; then
  TRAIN_S=${TRAIN_S:-8}; DEVICE=cpu; BATCH=2; WORKERS=2; PRESET_ARGS=(--threads 1)
else
  TRAIN_S=${TRAIN_S:-220}; DEVICE=cuda; BATCH=${BATCH:-64}; WORKERS=${WORKERS:-14}; PRESET_ARGS=()
  nvidia-smi -L
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

step() {  # name, seconds, command...: the output to $OUT/name.txt, its tail here
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 30 "$OUT/$name.txt"
  echo "== $name rc $rc"
}

RUN=${RUN_DIR:-/tmp/gpu-run}
rm -rf "$RUN"
step train $((TRAIN_S + 90)) "$PY" -m engine.train.train --out "$RUN" --tokenizer engine/checkpoints/tiny-code \
  --init-from engine/checkpoints/tiny-code --ar-steps 0 --steps 1000000 --schedule wsd \
  --time-budget-s "$TRAIN_S" --decay-frac 0.25 --lr "${LR:-6e-4}" --warmup 100 --batch "$BATCH" \
  --device "$DEVICE" --data-workers "$WORKERS" --eval-every 200 --save-every 1000000 --data-seed 11 \
  "${PRESET_ARGS[@]}"
if [ -f "$RUN/latest/model.safetensors" ]; then
  split -b 15M "$RUN/latest/model.safetensors" "$OUT/model.safetensors.part-"
  cp "$RUN/log.jsonl" "$OUT/train_log.jsonl"
fi
if [ "$DRY" = 1 ]; then
  echo "dry run: GPU benchmarks skipped"
  exit 0
fi
step kernels 60 "$PY" bench/kernels.py
step gpu_llada2 70 "$PY" bench/gpu_llada2.py
step concurrency 120 "$PY" bench/concurrency.py --quick --device cuda --dtype auto
