#!/usr/bin/env bash
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/z4; mkdir -p $C
P=/tmp/camp/tree/profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen5-x2-bf16
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step sampling python -m spectune bench --models draft-s,smollm2-135m --gammas 2 --batch-sizes 1 --temperatures 0.8 --prompts 4 --max-new-tokens 32 --repeats 3 --out $C/sampling
step sv python examples/bench_sv.py --batch-sizes 1,8,32 --gamma 4 --max-new-tokens 16 --repeats 3
step export_check python -m spectune export /tmp/camp/sd1.json --engine hf --profile $P --check --prompts 4 --repeats 3 --out $C/sd1_hf.json
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
