# call 2: the drafts' L(b, k) and the target alone's tok/s, eager vs compiled (random weights); GGUF assembled
source .gpu/setup.sh; R=/tmp/res/c2; mkdir -p $R
timeout ${T1:-150} python3 examples/runtime_compare.py --device $DEV --random-weights --models draft-s,draft-m --batch-sizes ${BS:-1,8,32} --ks ${KS:-1,2,4,8,16} --ctx 256 --repeats ${REP:-5} --pair '' --json-out $R/latency-drafts.json > $R/latency-drafts.log 2>&1; echo "rc=$?" >> $R/latency-drafts.log
tail -3 $R/latency-drafts.log
timeout ${T2:-110} python3 examples/runtime_compare.py --device $DEV --random-weights --models '' --pair draft-s,smollm2-135m --gen-batch-sizes ${BS:-1,8,32} --new-tokens ${NT:-64} --repeats 3 --json-out $R/generate.json > $R/generate.log 2>&1; echo "rc=$?" >> $R/generate.log
tail -7 $R/generate.log
tar czf ${OUT:-/tmp}/c2.tgz -C /tmp/res c2
