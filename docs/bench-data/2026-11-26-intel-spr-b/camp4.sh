#!/usr/bin/env bash
# llama.cpp's advice validation, smaller grid (K = 1, 2, 4, 8), from a snapshot at 43b4e1a
set -uo pipefail
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp3
cd /tmp/snap4
echo "L2c start $(date -u +%T)" >> $C/times.txt
python -m spectune bench --engine llamacpp --engine-only --validate-advice --profile $C/ep-llama --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,4,8 --proposer ngram:1,2 --proposer ngram:1,3 \
  --proposer ngram+model:1,3,4 --workload mix,code,edit --batch-sizes 1,8 --prompts 4 --max-new-tokens 48 \
  --repeats 2 --out $C/advice-llama --engine-log-dir $C/logs-l2 > $C/L2c.log 2>&1
echo "L2c done rc=$? $(date -u +%T)" >> $C/times.txt
