#!/usr/bin/env bash
# Issue 34's measurements, from a snapshot of the tree (run from /tmp/snap2), one step after another on a quiet machine.
set -uo pipefail
export SPECTUNE_VLLM=/root/.cache/spectune-engines/vllm-0.32.0/bin/vllm
C=/tmp/camp
cd /tmp/snap2
lscpu | head -20 > $C/lscpu.txt
echo "B start $(date -u +%T)" >> $C/times.txt
python -m spectune calibrate --engine vllm --models draft-s,smollm2-135m --batch-sizes 1,2,4,8 --max-k 8 --repeats 3 \
  --acceptance $C/runtime-profile --out $C/engine-profile --engine-log-dir $C/logs > $C/B.log 2>&1
echo "B done $(date -u +%T) rc=$?" >> $C/times.txt
python -m spectune bench --engine vllm --engine-only --validate-advice --profile $C/engine-profile --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,3,4,5,6,8 --proposer ngram:1,3 --workload mix,code,edit \
  --batch-sizes 1,8 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/advice --engine-log-dir $C/logs > $C/D.log 2>&1
echo "D done $(date -u +%T) rc=$?" >> $C/times.txt
python -m spectune bench --engine vllm --models draft-s,smollm2-135m --gammas 3,4 --proposer ngram:1,3 \
  --workload mix --batch-sizes 1,8 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/versus \
  --engine-log-dir $C/logs > $C/E.log 2>&1
echo "E done $(date -u +%T) rc=$?" >> $C/times.txt
python -m spectune calibrate --models draft-s,draft-m,smollm2-135m --workload mix --out $C/runtime-profile-2 > $C/A2.log 2>&1
echo "A2 done $(date -u +%T) rc=$?" >> $C/times.txt
