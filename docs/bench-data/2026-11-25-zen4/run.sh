#!/usr/bin/env bash
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/c2
P=profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step calibrate python -m spectune calibrate --out $C/profile-zen4
[ -f $C/profile-zen4/profile.json ] && { rm -rf $P; cp -r $C/profile-zen4 $P; }
step advice_mix python -m spectune bench --models draft-s,smollm2-135m --gammas 1,2,3,4 --batch-sizes 1,4 --prompts 2 --max-new-tokens 32 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_mix
step advice_code python -m spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code
step advice_edit python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 1,2,4,8 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_edit
step recommend python -m spectune recommend --trials 500 --out $C/rec
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
