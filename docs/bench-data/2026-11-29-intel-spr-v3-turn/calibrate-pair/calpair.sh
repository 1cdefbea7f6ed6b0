#!/bin/bash
# vLLM calibrated in turn: 7 stages alive at once, one pass of 6 rounds (paired statistic)
set -u
export SPECTUNE_VLLM=~/.cache/spectune-engines/vllm-0.32.0/bin/vllm PYTHONPATH=SNAPSHOT
cd SNAPSHOT
echo "start $(date -u +%T)"
python -m spectune calibrate --engine vllm --models draft-s,smollm2-135m --batch-sizes 1,8 --max-k 8 --repeats 6 \
  --engine-passes 1 --engine-step-stat paired --acceptance ACC20 --out OUT \
  --engine-together 7 --engine-log-dir OUT-logs
echo "done rc=$? $(date -u +%T)"
