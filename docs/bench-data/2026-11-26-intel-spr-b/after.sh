#!/usr/bin/env bash
# when V2 (pid 29296) ends: the CI checks -- the llama.cpp install script built from scratch into a fresh venv, and
# the whole suite with both engines required -- side by side (no benchmark runs then)
while kill -0 29296 2>/dev/null; do sleep 10; done
echo "V2 done $(date -u +%T)" >> /tmp/camp3/times.txt
cd /work/main
(s=$(date +%s); bash scripts/install-llamacpp.sh /tmp/lcpp-ci > /tmp/camp3/install-ci.log 2>&1; echo "rc=$? $(( $(date +%s) - s ))s" >> /tmp/camp3/install-ci.log) &
(s=$(date +%s); SPECTUNE_VLLM=/root/.cache/spectune-engines/vllm-0.32.0/bin/vllm \
  SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server SPECTUNE_REQUIRE_ENGINES=1 \
  timeout 3000 python -m pytest -n 2 -q -p no:cacheprovider > /tmp/camp3/suite.log 2>&1; echo "rc=$? $(( $(date +%s) - s ))s" >> /tmp/camp3/suite.log) &
wait
echo "checks done $(date -u +%T)" >> /tmp/camp3/times.txt
