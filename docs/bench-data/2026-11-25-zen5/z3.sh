#!/usr/bin/env bash
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/z3; mkdir -p $C
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step advice_code8 python -m spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 --proposer ngram:1,3 --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code8
step rec_code_validate python -m spectune recommend --models draft-s,smollm2-135m --profile $C/advice_code8/profile --workload code --batch-size 1 --trials 300 --validate 3 --validate-prompts 8 --out $C/rec_code_validate
step advice_mix8 python -m spectune bench --models draft-s,smollm2-135m --gammas 1,2,3,4 --batch-sizes 1,4 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_mix8
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
