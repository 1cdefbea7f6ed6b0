#!/usr/bin/env bash
# llama.cpp advice re-measured with repeats in rounds of starts, on run j's engine profile (calibrated 07:21-07:34)
set -uo pipefail
OUT=/tmp/camp/k; mkdir -p $OUT; lscpu | head -20 > $OUT/lscpu.txt
echo "advice start $(date -u +%T)" >> $OUT/times.txt
python -m spectune bench --engine llamacpp --engine-only --validate-advice --profile /tmp/camp/j/ep-llamacpp --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,4,8 --policy confidence:0.6 --proposer ngram:1,2 --proposer ngram:1,3 \
  --proposer ngram+model:1,3,4 --prompts 8 --workload mix,code,edit --batch-sizes 1,8 --max-new-tokens 48 --repeats 3 \
  --out $OUT/advice-llamacpp --engine-log-dir $OUT/logs-llamacpp-advice > $OUT/llamacpp-advice.log 2>&1
echo "advice done rc=$? $(date -u +%T)" >> $OUT/times.txt
