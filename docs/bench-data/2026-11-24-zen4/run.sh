#!/usr/bin/env bash
# Benchmark campaign, one step after another, nothing else running. Each step logs start/end and load.
cd REPO; export PYTHONPATH=REPO
C=OUT
P=profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step identity python -c "from spectune.machine import describe, here; import json; print(describe(here())); print(json.dumps(here(), indent=1))"
step calibrate python -m spectune calibrate --out $C/profile-zen4
[ -f $C/profile-zen4/profile.json ] && { rm -rf $C/zen4-old; mv $P $C/zen4-old; cp -r $C/profile-zen4 $P; }
step profile_show python -m spectune profile show $P
step target python -m spectune bench --models draft-s,smollm2-135m --gammas 1,2,3,4 --batch-sizes 1 --prompts 4 --max-new-tokens 32 --repeats 3 --out $C/target --plot $C/target/plots
step adaptive python -m spectune bench --models draft-s,smollm2-135m --methods sd --gammas 2,3,4 --policy heuristic --policy confidence:0.4 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 32 --repeats 3 --out $C/adaptive
step edit python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 2,4,8 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/edit
step we python -m spectune bench --models draft-s,smollm2-135m --combine we:0.5,0.5 --methods standard,sd,naive-cos,cos --gammas 1,2 --gamma-rest 1,2 --batch-sizes 1 --prompts 2 --max-new-tokens 32 --repeats 3 --no-hf --out $C/we
step cd python -m spectune bench --models draft-s,smollm2-135m --combine cd:0.1 --methods standard,sd,naive-cos,cos --gammas 1,2 --gamma-rest 1,2 --batch-sizes 1 --prompts 2 --max-new-tokens 32 --repeats 3 --no-hf --out $C/cd
step advice_mix python -m spectune bench --models draft-s,smollm2-135m --gammas 1,2,3,4 --batch-sizes 1,4 --prompts 2 --max-new-tokens 32 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_mix
step advice_edit python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 1,2,4,8 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_edit
step advice_code python -m spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code
step sampling python -m spectune bench --models draft-s,smollm2-135m --gammas 2 --batch-sizes 1 --temperatures 0.8 --prompts 4 --max-new-tokens 32 --repeats 3 --out $C/sampling
step sv python examples/bench_sv.py --batch-sizes 1,8,32 --gamma 4 --max-new-tokens 16 --repeats 3
step export_check python -m spectune export $C/sd1.json --engine hf --profile $P --check --prompts 4 --repeats 3
step recommend python -m spectune recommend --trials 500 --out $C/rec
step runtime python examples/runtime_compare.py --device cpu --json-out $C/runtime-cpu.json
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
