#!/usr/bin/env bash
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/z2; mkdir -p $C
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step hf8m python -m spectune bench --models draft-m,smollm2-135m --methods sd,cos --gammas 1,2,3,4 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --out $C/hf8m
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
