#!/usr/bin/env bash
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/d1
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step we python -m spectune bench --models draft-s,smollm2-135m --combine we:0.5,0.5 --methods standard,sd,cos --gammas 2,3,4 --gamma-rest 1,2 --policy confidence:0.4 --batch-sizes 1 --prompts 4 --max-new-tokens 32 --repeats 3 --no-hf --out $C/we
step hfconf python -m spectune bench --models draft-s,smollm2-135m --methods sd --gammas 2,3,4,5 --policy confidence:0.3 --policy confidence:0.5 --policy confidence:0.6 --batch-sizes 1 --prompts 4 --max-new-tokens 32 --repeats 3 --out $C/hfconf
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
