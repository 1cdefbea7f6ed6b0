# call 4: decoding measured on the GPU with the compiled runtime: target alone vs sd / cos vs HF; WE; recommend --validate
source .gpu/setup.sh; R=/tmp/res/c4; mkdir -p $R; P=/tmp/res/c3/prof
timeout ${T1:-240} python3 -m spectune bench --device $DEV --runtime ${RT:-compiled} --models draft-s,smollm2-135m --methods standard,sd,cos --gammas ${GAM:-1,2,3} --batch-sizes ${BS:-1,8} --prompts ${NP:-6} --max-new-tokens ${NT:-48} --repeats 3 --out $R/bench-target > $R/bench-target.log 2>&1; echo "rc=$?" >> $R/bench-target.log
tail -22 $R/bench-target.log
timeout ${T2:-90} python3 -m spectune bench --device $DEV --runtime ${RT:-compiled} --models draft-s,smollm2-135m --combine we:0.5,0.5 --methods standard,cos --gammas ${GAM:-1,2,3} --batch-sizes 1 --prompts ${NP:-6} --max-new-tokens ${NT:-48} --repeats 3 --no-hf --out $R/bench-we > $R/bench-we.log 2>&1; echo "rc=$?" >> $R/bench-we.log
tail -8 $R/bench-we.log
timeout ${T3:-150} python3 -m spectune recommend --device $DEV --profile $P --no-calibrate --trials 300 --validate 3 --out $R/rec > $R/recommend.log 2>&1; echo "rc=$?" >> $R/recommend.log
tail -30 $R/recommend.log
tar czf ${OUT:-/tmp}/c4.tgz -C /tmp/res c4
