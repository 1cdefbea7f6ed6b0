#!/usr/bin/env bash
set -uo pipefail
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp/three
cd /tmp/snap; export PYTHONPATH=/tmp/snap
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
t "cal start"
python -m spectune calibrate --engine llamacpp --models draft-s,smollm2-135m --batch-sizes 1,8 --max-k 8 --repeats 3 \
  --out $C/ep-llamacpp --engine-log-dir $C/logs-cal > $C/cal.log 2>&1; t "cal done rc=$?"
python benchmarks/reprice.py $C/ep-llamacpp $C/versus-llamacpp llamacpp > $C/reprice-bundled.txt 2>&1; t "reprice rc=$?"
python -m spectune calibrate --models draft-s,smollm2-135m --prompts-per-workload 8 --batch-sizes 1 --contexts 64 \
  --out $C/acc8 > $C/acc.log 2>&1; t "acc8 done rc=$?"
python benchmarks/reprice.py $C/ep-llamacpp $C/versus-llamacpp llamacpp $C/acc8 > $C/reprice-acc8.txt 2>&1; t "reprice acc8 rc=$?"
