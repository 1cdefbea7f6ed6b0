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
# (this script then ran the advice step with 3 repeats, 64 tokens and 7 K values: stopped after 2 of 16 engine
# starts at ~4 min each, too long for the session; camp2.sh ran it smaller, and the rest)
