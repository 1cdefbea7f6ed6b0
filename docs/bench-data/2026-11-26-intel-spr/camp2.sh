#!/usr/bin/env bash
set -uo pipefail
export SPECTUNE_VLLM=/root/.cache/spectune-engines/vllm-0.32.0/bin/vllm
C=/tmp/camp
cd /tmp/snap2
echo "D2 start $(date -u +%T)" >> $C/times.txt
python -m spectune bench --engine vllm --engine-only --validate-advice --profile $C/engine-profile --trials 300 \
  --models draft-s,smollm2-135m --gammas 1,2,3,4,6 --proposer ngram:1,3 --workload mix,code,edit \
  --batch-sizes 1,8 --prompts 4 --max-new-tokens 48 --repeats 2 --out $C/advice2 --engine-log-dir $C/logs > $C/D2.log 2>&1
echo "D2 done $(date -u +%T) rc=$?" >> $C/times.txt
python -m spectune bench --engine vllm --models draft-s,smollm2-135m --gammas 3,4 --proposer ngram:1,3 \
  --workload mix --batch-sizes 1,8 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/versus \
  --engine-log-dir $C/logs > $C/E.log 2>&1
echo "E done $(date -u +%T) rc=$?" >> $C/times.txt
python -m spectune calibrate --models draft-s,draft-m,smollm2-135m --workload mix --out $C/runtime-profile-2 > $C/A2.log 2>&1
echo "A2 done $(date -u +%T) rc=$?" >> $C/times.txt
