#!/usr/bin/env bash
# Issues 34/35 measurements from a snapshot of the tree (/tmp/snap5 = git archive of HEAD), one step after another on
# a quiet machine. L: llama.cpp b11434, V: vLLM 0.32.0, R: spectune's runtime, all on the bundled pair.
set -uo pipefail
export SPECTUNE_VLLM=/root/.cache/spectune-engines/vllm-0.32.0/bin/vllm
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp5
ACC=/tmp/camp/runtime-profile   # the runtime profile of the pair (Part E's campaign): acceptance for both engines
cd /tmp/snap5
lscpu | head -20 > $C/lscpu.txt
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
t "L1 start"
python -m spectune calibrate --engine llamacpp --models draft-s,smollm2-135m --batch-sizes 1,8 --max-k 8 --repeats 3 \
  --acceptance $ACC --out $C/ep-llama --engine-log-dir $C/logs-l1 > $C/L1.log 2>&1; t "L1 done rc=$?"
python -m spectune bench --engine llamacpp --engine-only --validate-advice --profile $C/ep-llama --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,4,8 --policy confidence:0.6 --proposer ngram:1,2 --proposer ngram:1,3 \
  --proposer ngram+model:1,3,4 --workload mix,code,edit --batch-sizes 1,8 --prompts 4 --max-new-tokens 48 \
  --repeats 3 --out $C/advice-llama --engine-log-dir $C/logs-l2 > $C/L2.log 2>&1; t "L2 done rc=$?"
for E in llamacpp vllm; do
  python -m spectune bench --engine $E --models draft-s,smollm2-135m --gammas 3,4 --proposer ngram:1,3 \
    --workload mix --batch-sizes 1,8 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/versus-$E \
    --engine-log-dir $C/logs-v-$E > $C/R-$E.log 2>&1; t "R $E done rc=$?"
done
