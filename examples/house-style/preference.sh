#!/usr/bin/env bash
# House style, preference training: a supervised adapter trained briefly on part of train.jsonl
# rewrites the rest of the training notes (prompts it never saw); each wrong reply becomes a
# preference pair beside the reference reply (make_pairs.py). Then DPO from the supervised adapter
# (the reference model is that adapter) and ORPO from scratch train on the pairs, and all of them
# are evaluated on eval.jsonl (exact match) and on held-out pairs (preference and reward accuracy).
# Knobs (environment): BIN (default .build/release), RUN (default runs/house-style-preference;
# replaced), SFT_SAMPLES (200: the supervised adapter's share of train.jsonl), PROMPTS (400: the
# training notes after them that it rewrites), SFT_EPOCHS (1), LR (1e-3: supervised and ORPO),
# DPO_LR (1e-4; README.md also shows 2e-5 and 5e-5: at 1e-3 DPO's first step cut the chosen
# replies' log-probability tenfold), RPO_ALPHA (5: DPO's --rpo-alpha, the weight of the chosen
# replies' cross-entropy beside the pair loss; 0 is plain DPO, README.md shows what it did),
# PAIR_EPOCHS (1), PAIR_LIMIT (empty: all pairs; N trains on the first N), BETA (0.1), BATCH (8),
# ORPO (1; 0 skips ORPO), EVAL_SAMPLES (60 of eval.jsonl's 150), INCLUDE_BASE (empty;
# 1 adds the base model's row), FROM_STAGE (1; 3 keeps $RUN's supervised adapter and pairs and
# trains DPO and ORPO anew). The defaults took 17 minutes on a shared 2-core Zen 5 (README.md).
# Needs python3 (standard library) for make_pairs.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.build/release}
RUN=${RUN:-runs/house-style-preference}
SFT_SAMPLES=${SFT_SAMPLES:-200}
PROMPTS=${PROMPTS:-400}
SFT_EPOCHS=${SFT_EPOCHS:-1}
PAIR_EPOCHS=${PAIR_EPOCHS:-1}
BETA=${BETA:-0.1}
LR=${LR:-1e-3}
DPO_LR=${DPO_LR:-1e-4}
RPO_ALPHA=${RPO_ALPHA:-5}
ORPO=${ORPO:-1}
BATCH=${BATCH:-8}
EVAL_SAMPLES=${EVAL_SAMPLES:-60}
PAIR_LIMIT=${PAIR_LIMIT-}
INCLUDE_BASE=${INCLUDE_BASE:-}
FROM_STAGE=${FROM_STAGE:-1}
DATA=examples/house-style

if [ "$FROM_STAGE" -le 2 ]; then
rm -rf "$RUN"
mkdir -p "$RUN"
sed -n "1,${SFT_SAMPLES}p" "$DATA/train.jsonl" > "$RUN/sft-train.jsonl"
sed -n "$((SFT_SAMPLES + 1)),$((SFT_SAMPLES + PROMPTS))p" "$DATA/train.jsonl" > "$RUN/heldout-prompts.jsonl"

# 1. a supervised adapter, trained briefly
"$BIN/train-adapter" --train-data "$RUN/sft-train.jsonl" --epochs "$SFT_EPOCHS" --learning-rate "$LR" \
  --batch-size "$BATCH" --warmup-steps 5 --max-sequence-length 256 --checkpoint-dir "$RUN/sft"
# 2. its replies to the training notes it did not see; the wrong ones become pairs
"$BIN/evaluate-adapter" --eval-data "$RUN/heldout-prompts.jsonl" --checkpoint "$RUN/sft/adapter-final.safetensors" \
  --skip-loss --output "$RUN/heldout-replies.jsonl" > "$RUN/heldout-table.txt"
python3 "$DATA/make_pairs.py" "$RUN/heldout-prompts.jsonl" "$RUN/heldout-replies.jsonl" "$RUN"
fi
rm -rf "$RUN/dpo" "$RUN/orpo"
PAIRS="$RUN/pairs-train.jsonl"
if [ -n "$PAIR_LIMIT" ]; then
  head -n "$PAIR_LIMIT" "$RUN/pairs-train.jsonl" > "$RUN/pairs-train-$PAIR_LIMIT.jsonl"
  PAIRS="$RUN/pairs-train-$PAIR_LIMIT.jsonl"
fi
"$BIN/adapter-data" validate "$PAIRS"
"$BIN/adapter-data" stats "$PAIRS"
# 3. DPO from the supervised adapter (which is also the reference), and ORPO from scratch
"$BIN/train-adapter" --objective dpo --beta "$BETA" --rpo-alpha "$RPO_ALPHA" --init-checkpoint "$RUN/sft/adapter-final.safetensors" \
  --train-data "$PAIRS" --eval-data "$RUN/pairs-eval.jsonl" --epochs "$PAIR_EPOCHS" --warmup-steps 2 \
  --learning-rate "$DPO_LR" --batch-size "$BATCH" --max-sequence-length 256 --checkpoint-dir "$RUN/dpo"
ORPO_CHECKPOINT=()
if [ "$ORPO" = 1 ]; then
  "$BIN/train-adapter" --objective orpo --beta "$BETA" \
    --train-data "$PAIRS" --eval-data "$RUN/pairs-eval.jsonl" --epochs "$PAIR_EPOCHS" --warmup-steps 2 \
    --learning-rate "$LR" --batch-size "$BATCH" --max-sequence-length 256 --checkpoint-dir "$RUN/orpo"
  ORPO_CHECKPOINT=(--checkpoint "$RUN/orpo/adapter-final.safetensors")
fi
# 4. everything on the eval notes (exact match) and the held-out pairs
"$BIN/evaluate-adapter" --eval-data "$DATA/eval.jsonl" --max-samples "$EVAL_SAMPLES" ${INCLUDE_BASE:+--include-base} \
  --checkpoint "$RUN/sft/adapter-final.safetensors" --checkpoint "$RUN/dpo/adapter-final.safetensors" \
  "${ORPO_CHECKPOINT[@]}" --preference-data "$RUN/pairs-eval.jsonl" \
  --output "$RUN/eval-results.jsonl" | tee "$RUN/eval-table.txt"
