#!/usr/bin/env bash
# The advice validation again at the final code (the latency table read non-decreasing in k): camp.sh's three
# advice steps, from a snapshot of that commit in /tmp/camp/tree3, nothing else running.
cd /tmp/camp/tree3; export PYTHONPATH=/tmp/camp/tree3
C=/tmp/camp/zc3; mkdir -p $C
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
PR="--proposer ngram:1,3 --proposer ngram+model:1,3,8"
step advice_mix8 python -m spectune bench --models draft-s,smollm2-135m --methods sd,cos --gammas 1,2,3,4 --proposer ngram+model:1,3,8 --batch-sizes 1,4 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_mix8
step advice_code8 python -m spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 $PR --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code8
step advice_edit8 python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 1,2,4,8 $PR --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_edit8
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
