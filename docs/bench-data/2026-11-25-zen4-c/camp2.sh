#!/usr/bin/env bash
# After camp.sh: WE and CD again with 5 repeats (camp.sh's CD run had one disturbed repeat), fixed vs adaptive draft
# lengths with 6 repeats (hyb8's medians beat the priced oracle bound: noise or not?), and the compiled vs
# eager runtime on this CPU (docs/gpu.md's CPU table). Same snapshot, one step at a time.
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/zc; D=/work/main/docs/bench-data/2026-11-25-zen4-c
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step cd8r5 python -m spectune bench --models draft-s,smollm2-135m --combine cd:0.1 --methods standard,sd,cos --gammas 2,3 --gamma-rest 1 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 5 --no-hf --out $C/cd8r5
step we8r5 python -m spectune bench --models draft-s,smollm2-135m --combine we:0.5,0.5 --methods standard,sd,cos --gammas 2,3 --gamma-rest 1 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 5 --no-hf --out $C/we8r5
step adaptive8r6 python -m spectune bench --models draft-s,smollm2-135m --methods sd --gammas 2,3,4 --policy confidence:0.4 --proposer ngram+model:1,3,8 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 6 --no-hf --out $C/adaptive8r6
step runtime python examples/runtime_compare.py --device cpu --json-out $C/runtime-cpu.json
echo "=== camp2 done $(date -u +%H:%M:%S)" >> $C/log
