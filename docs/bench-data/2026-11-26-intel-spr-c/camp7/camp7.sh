#!/usr/bin/env bash
# camp6's runtime measurements again after the llamacpp runner moved to one unified KV buffer (one ubatch per
# ragged batch), from a snapshot of the tree (/tmp/snap7)
set -uo pipefail
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp7
cd /tmp/snap7
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
t "RC start"
python examples/runtime_compare.py --runtimes eager,llamacpp --models smollm2-135m,draft-s --batch-sizes 1,8 \
  --ks 1,2,4,8 --repeats 5 --gen-batch-sizes 1,8 --new-tokens 32 --json-out $C/rc.json > $C/rc.log 2>&1
t "RC done rc=$?"
python -m spectune calibrate --runtime llamacpp --models draft-s,smollm2-135m --out $C/rt-llamacpp > $C/cal.log 2>&1
t "CAL done rc=$?"
for B in 1 8; do
  python -m spectune recommend --models draft-s,smollm2-135m --profile $C/rt-llamacpp --runtime llamacpp \
    --workload mix --batch-size $B --trials 300 --validate 3 --out $C/rec-llamacpp-b$B > $C/rec-llamacpp-b$B.log 2>&1
  t "REC llamacpp b=$B done rc=$?"
done
