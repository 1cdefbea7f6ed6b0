#!/usr/bin/env bash
# Issue 34: vLLM re-validation with the draft priced as a fixed cost a step plus a cost a forward (0652d38), from a
# snapshot of the tree (/tmp/snap8 = git archive of HEAD), on a quiet machine: V1 calibrates the engine profile
# (draft K 1, 2, 4 by default), V2 measures the advice against vLLM's grid on 8 held-out prompts, 3 repeats.
set -uo pipefail
export SPECTUNE_VLLM=/root/.cache/spectune-engines/vllm-0.32.0/bin/vllm
C=/tmp/camp8
ACC=/tmp/camp/runtime-profile   # the runtime profile of the pair (Part E's campaign): acceptance
cd /tmp/snap8
lscpu | head -20 > $C/lscpu.txt
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
t "V1 start"
python -m spectune calibrate --engine vllm --models draft-s,smollm2-135m --batch-sizes 1,8 --max-k 8 --repeats 3 \
  --acceptance $ACC --out $C/ep-vllm --engine-log-dir $C/logs-v1 > $C/V1.log 2>&1; t "V1 done rc=$?"
python -m spectune bench --engine vllm --engine-only --validate-advice --profile $C/ep-vllm --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,4 --proposer ngram:1,3 --workload mix,code,edit \
  --batch-sizes 1,8 --prompts 8 --max-new-tokens 48 --repeats 3 --out $C/advice-vllm --engine-log-dir $C/logs-v2 \
  > $C/V2.log 2>&1; t "V2 done rc=$?"
