#!/usr/bin/env bash
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/z1; mkdir -p $C
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step hf8 python -m spectune bench --models draft-s,smollm2-135m --methods sd,cos --gammas 1,2,3,4,6 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --out $C/hf8
step advice_code8 python -m spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 --proposer ngram:1,3 --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code8
step advice_mix8 python -m spectune bench --models draft-s,smollm2-135m --gammas 1,2,3,4 --batch-sizes 1,4 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_mix8
step advice_edit8 python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 1,2,4,8 --proposer ngram:1,3 --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_edit8
step we8 python -m spectune bench --models draft-s,smollm2-135m --combine we:0.5,0.5 --methods standard,cos --gammas 2,3,4 --gamma-rest 1 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --out $C/we8
step cd8 python -m spectune bench --models draft-s,smollm2-135m --combine cd:0.1 --methods standard,cos --gammas 2,3,4 --gamma-rest 1 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --out $C/cd8
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
