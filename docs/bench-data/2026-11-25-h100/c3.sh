# call 3: the bundled family on the GPU: compiled == eager greedy tokens, then calibrate with the compiled runtime
source .gpu/setup.sh; R=/tmp/res/c3; mkdir -p $R
timeout ${T1:-100} python3 -m pytest -q -p no:cacheprovider -m slow -k "cuda" tests/decoding/test_static.py > $R/slow.log 2>&1; echo "rc=$?" >> $R/slow.log
tail -3 $R/slow.log
rm -rf $R/prof
t0=$SECONDS; timeout ${T2:-360} python3 -m spectune calibrate --models draft-s,draft-m,smollm2-135m --device $DEV --runtime ${RT:-compiled} ${CAL:-} --out $R/prof > $R/calibrate.log 2>&1; echo "rc=$? wall=$((SECONDS-t0))s" >> $R/calibrate.log
tail -8 $R/calibrate.log
python3 -m spectune profile show $R/prof > $R/show.txt 2>&1; head -40 $R/show.txt
tar czf ${OUT:-/tmp}/c3.tgz -C /tmp/res c3
