#!/usr/bin/env bash
# Engine-priced advice against each engine's own grid (benchmarks.md, "Engines in the loop"): calibrate vLLM's and
# llama.cpp's latency into engine profiles, then measure recommend --engine's pick at mix / code / edit, b = 1 and 8,
# beside the engine's grid (target alone; the draft at K; lookups at K; llama.cpp: p-min and the lookup + draft
# chain), 3 interleaved repeats. Before the grid, recommend --engine --validate 3 measures its 3 best and the
# target alone in the engine on the calibration prompts, every cell's in one pass (LLAMACPP_VALIDATE, VLLM_VALIDATE).
# After the grid, each cell's pick, the grid's 3 fastest and the target alone run again in fresh rounds (the regret
# the grid's selection cannot flatter: LLAMACPP_CONFIRM, VLLM_CONFIRM rounds; 0 for none). ENGINE_TOGETHER=N keeps
# N engine starts alive at once, driven in turn (calibration stages, validation candidates, grid and fresh rounds).
# WORKLOADS (default mix,code,edit) cuts the advice run to time; ENGINE_ARGS passes the user's engine flags to every
# start, calibration and advice alike (e.g. "--dtype float32" for vLLM on a CPU without bf16 arithmetic).
# An engine profile already at OUT/ep-ENGINE (a finished calibration, or one copied there) is kept: the run measures
# the advice only. ENGINE_TOGETHER at least the starts of one batch size (llama.cpp's grid here: up to 24 with the
# picks, ~0.45 GB each, its weights mapped once) measures each cell in one set, nothing levelled (start_sets).
# Run it from a snapshot of the tree (git archive) on an otherwise idle machine.
#
# Usage: benchmarks/engines.sh OUT ACCEPTANCE_PROFILE [vllm] [llamacpp]
#   OUT: a new folder for profiles, rows and logs; ACCEPTANCE_PROFILE: a runtime profile of draft-s,smollm2-135m
#   (spectune calibrate --models draft-s,smollm2-135m); the engines from SPECTUNE_VLLM / SPECTUNE_LLAMACPP or PATH.
set -uo pipefail
OUT=${1:?usage: engines.sh OUT ACCEPTANCE_PROFILE [vllm] [llamacpp]}
ACC=${2:?usage: engines.sh OUT ACCEPTANCE_PROFILE [vllm] [llamacpp]}
shift 2
ENGINES=${*:-vllm llamacpp}
EARGS=()
[ -n "${ENGINE_ARGS:-}" ] && EARGS=(--engine-args "$ENGINE_ARGS")
MODELS=draft-s,smollm2-135m
mkdir -p "$OUT"
lscpu | head -20 > "$OUT/lscpu.txt"
t() { echo "$1 $(date -u +%T)" >> "$OUT/times.txt"; }
for E in $ENGINES; do
  if [ -f "$OUT/ep-$E/profile.json" ]; then
    t "$E calibrate kept (OUT/ep-$E)"
  else
    t "$E calibrate start"
    python -m spectune calibrate --engine "$E" --models $MODELS --batch-sizes 1,8 --max-k 8 --repeats 3 \
      --acceptance "$ACC" --out "$OUT/ep-$E" --engine-together "${ENGINE_TOGETHER:-1}" \
      --engine-log-dir "$OUT/logs-$E-cal" "${EARGS[@]}" > "$OUT/$E-calibrate.log" 2>&1
    t "$E calibrate done rc=$?"
  fi
  if [ "$E" = vllm ]; then
    GRID=(--gammas 1,2,4 --proposer ngram:1,3 --prompts 8 --advice-validate "${VLLM_VALIDATE:-3}"
          --advice-confirm "${VLLM_CONFIRM:-3}")
  else
    GRID=(--gammas 1,2,4,8 --policy confidence:0.6 --proposer ngram:1,2 --proposer ngram:1,3
          --proposer ngram+model:1,3,4 --prompts 8 --advice-validate "${LLAMACPP_VALIDATE:-3}"
          --advice-confirm "${LLAMACPP_CONFIRM:-5}")
  fi
  python -m spectune bench --engine "$E" --engine-only --validate-advice --profile "$OUT/ep-$E" --trials 300 \
    --models $MODELS "${GRID[@]}" --workload "${WORKLOADS:-mix,code,edit}" --batch-sizes 1,8 --max-new-tokens 48 \
    --repeats 3 --out "$OUT/advice-$E" --engine-together "${ENGINE_TOGETHER:-1}" \
    --engine-log-dir "$OUT/logs-$E-advice" "${EARGS[@]}" > "$OUT/$E-advice.log" 2>&1
  t "$E advice done rc=$?"
done
