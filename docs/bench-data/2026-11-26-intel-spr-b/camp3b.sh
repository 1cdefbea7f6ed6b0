#!/usr/bin/env bash
# After camp3.sh: the llama.cpp advice step again from /tmp/snap3b (bench --engine now takes ngram+model for llama.cpp).
set -uo pipefail
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp3
until grep -q "L3 done" $C/times.txt; do sleep 20; done
cd /tmp/snap3b
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
python -m spectune bench --engine llamacpp --engine-only --validate-advice --profile $C/ep-llama --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,3,4,6,8 --proposer ngram:1,2 --proposer ngram:1,3 \
  --proposer ngram+model:1,3,4 --workload mix,code,edit --batch-sizes 1,8 --prompts 4 --max-new-tokens 48 \
  --repeats 2 --out $C/advice-llama --engine-log-dir $C/logs > $C/L2.log 2>&1; t "L2b done rc=$?"
