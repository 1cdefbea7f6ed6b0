#!/usr/bin/env bash
# engines.sh's vLLM branch with 2 repeats (time: the session ends at 06:55)
set -uo pipefail
OUT=$1; ACC=$2; MODELS=draft-s,smollm2-135m
mkdir -p "$OUT"; lscpu | head -20 > "$OUT/lscpu.txt"
t() { echo "$1 $(date -u +%T)" >> "$OUT/times.txt"; }
t "vllm calibrate start"
python -m spectune calibrate --engine vllm --models $MODELS --batch-sizes 1,8 --max-k 8 --repeats 2 \
  --acceptance "$ACC" --out "$OUT/ep-vllm" --engine-log-dir "$OUT/logs-vllm-cal" > "$OUT/vllm-calibrate.log" 2>&1
t "vllm calibrate done rc=$?"
python -m spectune bench --engine vllm --engine-only --validate-advice --profile "$OUT/ep-vllm" --trials 300 \
  --models $MODELS --gammas 1,2,4 --proposer ngram:1,3 --prompts 8 --workload mix,code,edit --batch-sizes 1,8 \
  --max-new-tokens 48 --repeats 2 --out "$OUT/advice-vllm" --engine-log-dir "$OUT/logs-vllm-advice" > "$OUT/vllm-advice.log" 2>&1
t "vllm advice done rc=$?"
