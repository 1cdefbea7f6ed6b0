#!/bin/bash
# vLLM's engine profile calibrated with its 7 stages' starts alive at once (engines.sh's calibrate, in turn)
set -u
export SPECTUNE_VLLM=~/.cache/spectune-engines/vllm-0.32.0/bin/vllm PYTHONPATH=/tmp/snapT
cd /tmp/snapT
echo "start $(date -u +%T)"
python -m spectune calibrate --engine vllm --models draft-s,smollm2-135m --batch-sizes 1,8 --max-k 8 --repeats 3 \
  --acceptance /tmp/camp/acc20 --out /tmp/camp/ep-turn --engine-together 7 --engine-log-dir /tmp/camp/logs-ep-turn
echo "done rc=$? $(date -u +%T)"
