#!/usr/bin/env bash
# One prepared device run on a lent GPU (at most 9.5 minutes; prepare with bench/gpu/prepare.sh):
#   0. time the host's example pipeline (engine.train.parallel: probe; left out with a bank);
#   1. train the larger variant of the embedded model there (preset mini-code, 17.3M
#      parameters; by default block diffusion on from the committed mini-code, lr 1e-3; with
#      INIT= AR=400 LR=2e-3 WARMUP=200 from scratch with an autoregressive warm-up;
#      warmup-stable-decay sized by wall clock; ECHO=auto:4 turns on data echoing, which hurt
#      in the CPU trials: BENCHMARKS.md) on the carried copy of this machine's corpus (same files, same
#      held-out split), or with .whl/bank.npz.xz (prepare.sh's default since session 18; the
#      whole training split with packages since session 19) on that token bank, every batch cut on the GPU (engine/train/bank.py), no example workers; the bfloat16 weights come back split under the per-file limit: rejoin
#      with `cat model.safetensors.part-* > model.safetensors` next to the returned config.json;
#      Before its first step the trainer times the step's variants on the GPU and keeps the
#      fastest (engine/train/speed.py: grouped-query attention native or repeated, eager or
#      torch.compile; GQA=native|expand and COMPILE=on|off force one; the choice and the
#      times are the "step:" line of train.txt), inside TRAIN_S; the first PROFILE_STEPS (5)
#      steps are profiled, their time by operator printed into train.txt;
#   1b. the verdict (bench/compare_models.py on the GPU): the new weights against INIT on the
#      120 held-out single-line tasks, quality and speedy, into judge.txt (SKIP_JUDGE=1: off;
#      JUDGE_S: its limit, 90 s);
#   2. the fused confidence kernel against its reference (bench/kernels.py);
#   3. the daemon's batched scheduler on the GPU (bench/concurrency.py --quick --device cuda).
# SKIP_KERNELS=1 / SKIP_CONC=1 leave out 2 / 3 (both measured in session 15) to train longer.
# Writes at most 8 files to $OUT. GPU_SESSION_DRY=1 runs the plumbing on a CPU (a few seconds
# of training, the GPU benchmarks skipped), as tests/bench/test_gpu_session.py does.
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
BANK=${BANK-.whl/bank.npz.xz}
[ -f "$BANK" ] || BANK=
if [ -f .whl/corpus.tar.xz ]; then  # this machine's standard library (prepare.sh), not the device's
  mkdir -p /tmp/corpus && tar xJf .whl/corpus.tar.xz -C /tmp/corpus && export LLADA_LSP_CORPUS=/tmp/corpus
fi
if [ "$DRY" = 1 ]; then
  TRAIN_S=${TRAIN_S:-8}; DEVICE=cpu; BATCH=2; WORKERS=2; AR=1; PRESET_ARGS=(--threads 1); PROBE_S=${PROBE_S:-1}
else
  TRAIN_S=${TRAIN_S:-300}; DEVICE=cuda; BATCH=${BATCH:-128}; WORKERS=${WORKERS:-14}; AR=${AR:-0}
  INIT=${INIT-engine/checkpoints/mini-code}; LR=${LR:-1e-3}; WARMUP=${WARMUP:-50}; DECAY_FRAC=${DECAY_FRAC:-0.4}
  PRESET_ARGS=(--bf16)
  nvidia-smi -L
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

rm -f "$OUT"/*.txt
step() {  # name, seconds, command...: the output appended to $OUT/name.txt, its tail here
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" >> "$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 30 "$OUT/$name.txt"
  echo "== $name rc $rc"
}

RUN=${RUN_DIR:-/tmp/gpu-run}
rm -rf "$RUN"
# How fast this host cuts examples, alone and through the workers (into train.txt: at most 8
# files come back). Session 15's training here waited 74% of the time for batches.
[ -n "$BANK" ] && WORKERS=0
[ -n "$BANK" ] || step train 60 "$PY" -m engine.train.parallel --seconds "${PROBE_S:-8}" --workers "$WORKERS" --batch "$BATCH"
step train $((TRAIN_S + 90)) "$PY" -m engine.train.train --out "$RUN" --tokenizer engine/checkpoints/tiny-code \
  --preset "${PRESET:-mini-code}" --ar-steps "$AR" --steps 1000000 --schedule wsd \
  --time-budget-s "$TRAIN_S" --decay-frac "${DECAY_FRAC:-0.25}" --lr "${LR:-2e-3}" --warmup "${WARMUP:-200}" --batch "$BATCH" \
  --device "$DEVICE" --data-workers "$WORKERS" --eval-every 200 --save-every 1000 --data-seed "${DATA_SEED:-21}" \
  --echo "${ECHO:-1}" --gqa "${GQA:-auto}" --compile "${COMPILE:-auto}" --profile-steps "${PROFILE_STEPS:-5}" ${INIT:+--init-from "$INIT"} ${BANK:+--bank "$BANK"} "${PRESET_ARGS[@]}"
if [ -f "$RUN/latest/model.safetensors" ]; then
  "$PY" -c "import sys, torch; from pathlib import Path; from engine.model.checkpoint import load_checkpoint, save_checkpoint
save_checkpoint(load_checkpoint(sys.argv[1]), Path(sys.argv[2]), dtype=torch.bfloat16)" "$RUN/latest" "$RUN/export"
  split -b 15M "$RUN/export/model.safetensors" "$OUT/model.safetensors.part-"
  cp "$RUN/export/config.json" "$OUT/config.json"
  cp "$RUN/log.jsonl" "$OUT/train_log.jsonl"
fi
if [ "$DRY" = 1 ]; then
  echo "dry run: GPU benchmarks skipped"
  exit 0
fi
# the verdict while the machine is still lent: the new weights against the ones they started
# from on the held-out single-line tasks, decoded on the GPU (after the weights are in $OUT)
if [ "${SKIP_JUDGE:-0}" != 1 ] && [ -f "$RUN/latest/model.safetensors" ] && [ -n "${INIT:-}" ]; then
  step judge "${JUDGE_S:-90}" "$PY" bench/compare_models.py "$RUN/latest" --base "$INIT" --per-kind 120 \
    --kinds single_line --presets quality,speedy --device cuda
fi
[ "${SKIP_KERNELS:-0}" = 1 ] || step kernels 45 "$PY" bench/kernels.py
# the default model's weights stay here when prepare.sh set them aside to fit a larger bank
CONC_MODEL=${CONC_MODEL:-}
[ -f engine/checkpoints/tiny-code/model.safetensors ] || CONC_MODEL=${CONC_MODEL:-engine/checkpoints/mini-code}
[ "${SKIP_CONC:-0}" = 1 ] || step concurrency "${CONC_S:-90}" "$PY" bench/concurrency.py --quick --device cuda --dtype auto \
  ${CLIENTS:+--clients "$CLIENTS"} ${CONC_MODEL:+--model "$CONC_MODEL"}
