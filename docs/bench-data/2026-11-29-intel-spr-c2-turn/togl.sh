#!/bin/bash
# c2 (llama.cpp) cells confirmed again with each workload's configurations alive at once, driven in turn
set -u  # OUT: where the rounds go; SNAPSHOT: a git archive of the tree
export SPECTUNE_LLAMACPP=~/.cache/spectune-engines/llamacpp-11434/bin/llama-server PYTHONPATH=SNAPSHOT
cd SNAPSHOT
for w in mix code edit; do
  echo "== $w $(date -u +%H:%M:%S)"
  python benchmarks/confirm.py docs/bench-data/2026-11-28-intel-spr-c2 llamacpp $OUT/$w --rounds 6 --top 3 --workload $w --engine-together 7
done
echo "== done $(date -u +%H:%M:%S)"
