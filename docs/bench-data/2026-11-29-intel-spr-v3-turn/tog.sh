#!/bin/bash
# v3 cells confirmed again with each workload's configurations alive at once, driven in turn, 6 fresh rounds
set -u
export SPECTUNE_VLLM=~/.cache/spectune-engines/vllm-0.32.0/bin/vllm PYTHONPATH=/tmp/snapT
cd /tmp/snapT
for w in mix code edit; do
  echo "== $w $(date -u +%H:%M:%S)"
  python benchmarks/confirm.py /work/main/docs/bench-data/2026-11-28-intel-spr-v3 vllm OUT/$w --rounds 6 --top 3 --workload $w --engine-together 7
done
echo "== done $(date -u +%H:%M:%S)"
