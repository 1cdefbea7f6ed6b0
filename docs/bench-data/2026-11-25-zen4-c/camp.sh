#!/usr/bin/env bash
# Zen 4 campaign at the commit snapshotted in /tmp/camp/tree (git archive of HEAD): every table of the current
# code on this machine, one step after another with nothing else running; /proc/loadavg before and after each.
cd /tmp/camp/tree; export PYTHONPATH=/tmp/camp/tree
C=/tmp/camp/zc; mkdir -p $C
P=/tmp/camp/tree/profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16
D=/work/main/docs/bench-data/2026-11-25-zen4-c
S=/work/main/docs/bench-data/2026-11-25-zen5-c  # Part 0c's scripts (oracle.py, cumul.py, tpr.py)
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step identity python -c "from spectune.machine import describe, identity; print(describe(identity('cpu')))"
# 1. the bundled profile, re-calibrated with defaults (the runtime's masked forward, r's paths, path drafts)
step calibrate python -m spectune calibrate --models draft-s,draft-m,smollm2-135m --workload mix --out $C/profile
rm -rf $P && cp -r $C/profile $P
# 2. spectune's best vs HF assisted generation at each gamma (issue 15's headline), 8 mix prompts
step hyb8 python -m spectune bench --models draft-s,smollm2-135m --methods sd --gammas 1,2,3,4 --policy confidence:0.4 --proposer ngram+model:1,3,8 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --out $C/hyb8
# 3. naive-cos / cos at fixed gamma beside them (the target-only table)
step cos8 python -m spectune bench --models draft-s,smollm2-135m --methods naive-cos,cos --gammas 1,2,3,4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --out $C/cos8
# 4. prompt lookup on edit (issue 19's >= 1.5x) beside HF's prompt lookup and assisted generation
step edit4 python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 2,4,8 --proposer ngram:1,3 --proposer ngram+model:1,3,8 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/edit4
# 5. WE and CD (issue 15's CoS bars)
step we8 python -m spectune bench --models draft-s,smollm2-135m --combine we:0.5,0.5 --methods standard,sd,cos --gammas 2,3 --gamma-rest 1 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --out $C/we8
step cd8 python -m spectune bench --models draft-s,smollm2-135m --combine cd:0.1 --methods standard,sd,cos --gammas 2,3 --gamma-rest 1 --policy confidence:0.4 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --out $C/cd8
# 6. advice validation (z9.sh's commands): each calibrates the pair on its workload, recommends, measures
PR="--proposer ngram:1,3 --proposer ngram+model:1,3,8"
step advice_mix8 python -m spectune bench --models draft-s,smollm2-135m --methods sd,cos --gammas 1,2,3,4 --proposer ngram+model:1,3,8 --batch-sizes 1,4 --prompts 8 --max-new-tokens 32 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_mix8
step advice_code8 python -m spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 $PR --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code8
step advice_edit8 python -m spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 1,2,4,8 $PR --batch-sizes 1 --prompts 8 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_edit8
# 7. what any draft-length policy could gain (priced on r's path), and priced vs runtime tokens per forward
step oracle python $S/oracle.py $P mix
step oracle_ngm python $S/oracle.py $P mix ngram+model:1,3,8
step cumul python $S/cumul.py model $P
step cumul_ngm python $S/cumul.py ngram+model:1,3,8 $P
step tpr python $S/tpr.py $P
# 8. sampling, SV, an exported configuration run by HF, search time
step sampling python -m spectune bench --models draft-s,smollm2-135m --gammas 2 --batch-sizes 1 --temperatures 0.8 --prompts 4 --max-new-tokens 32 --repeats 3 --out $C/sampling
step sv python examples/bench_sv.py --batch-sizes 1,8,32 --gamma 4 --max-new-tokens 16 --repeats 3
step export_check python -m spectune export $D/sd1.json --engine hf --profile $P --check --prompts 4 --repeats 3 --out $C/sd1_hf.json
step search500 python -m spectune recommend --trials 500 --out $C/rec500
echo "=== all done $(date -u +%H:%M:%S)" >> $C/log
