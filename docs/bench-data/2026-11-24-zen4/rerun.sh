cd /work/main
C=OUT
step() { local name=$1; shift; echo "=== $name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log;
  ( time "$@" ) > $C/$name.out 2>&1; echo "=== $name end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $C/log; }
step advice_code2 spectune bench --models draft-s,smollm2-135m --workload code --methods sd,cos --gammas 1,2,3,4 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_code2
step advice_edit2 spectune bench --models draft-s,smollm2-135m --workload edit --methods sd --gammas 1,2,4,8 --proposer ngram:1,3 --batch-sizes 1 --prompts 4 --max-new-tokens 64 --repeats 3 --no-hf --validate-advice --trials 300 --out $C/advice_edit2
echo "=== rerun done $(date -u +%H:%M:%S)" >> $C/log
