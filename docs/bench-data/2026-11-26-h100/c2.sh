# call 2: the bundled family's real weights: L(b, k) eager vs compiled at b = 1/8/32, k = 1..16, then the decoder's
# tok/s at b = 1 and 8 (standard, sd, ngram:1,3, we:0.5,0.5 standard and cos) with the greedy tokens compared
source .gpu/setup.sh; R=/tmp/res/c2; mkdir -p $R; T0=$SECONDS
du -sh /tmp/torchinductor_root 2>&1
timeout ${T1:-370} python3 examples/runtime_compare.py --device cuda --models smollm2-135m,draft-s --batch-sizes 1,8,32 --ks 1,2,3,4,6,8,12,16 --ctx 128 --repeats 4 --pair draft-s,smollm2-135m --gen-batch-sizes 1,8 --new-tokens 32 --json-out $R/runtime-h100.json > $R/runtime-h100.log 2>&1; echo "rc=$? at $((SECONDS-T0))s" >> $R/runtime-h100.log
cat $R/runtime-h100.log | grep -v Warning | tail -60
tar czf $OUT/c2.tgz -C /tmp/res c2
