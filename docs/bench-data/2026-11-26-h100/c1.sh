# call 1: environment; the CUDA/compiled tests of the static path (background) beside L(b, k) of SmolLM2 and draft-s
# with random weights (timing only; it also fills the inductor cache with these shapes for call 2)
source .gpu/setup.sh; R=/tmp/res/c1; mkdir -p $R; T0=$SECONDS
{ date -u; nvidia-smi; python3 -c "import sys,torch,transformers;print(sys.version);print(torch.__version__,torch.version.cuda,transformers.__version__,torch.cuda.get_device_name(0),torch.cuda.get_device_capability(0))"; nproc; lscpu | head -16; } > $R/env.txt 2>&1
python3 -c "import json;from spectune.machine import here,describe;i=here('cuda');print(describe(i));print(json.dumps(i,indent=1))" >> $R/env.txt 2>&1
grep -E "NVIDIA H|^[0-9]\.|^2\.|cuda NVIDIA" $R/env.txt | head -5
( timeout ${T1:-250} python3 -m pytest -q -p no:cacheprovider -m "not slow" -k "cuda or compiled" tests/decoding/test_static.py > $R/tests.log 2>&1; echo "rc=$? at $((SECONDS-T0))s" >> $R/tests.log ) &
timeout ${T2:-250} python3 examples/runtime_compare.py --device cuda --random-weights --models smollm2-135m,draft-s --batch-sizes 1,8,32 --ks 1,2,3,4,6,8,12,16 --ctx 128 --repeats 3 --pair draft-s,smollm2-135m --gen-batch-sizes 1,8 --new-tokens 32 --json-out $R/latency-random.json > $R/latency-random.log 2>&1; echo "rc=$? at $((SECONDS-T0))s" >> $R/latency-random.log
wait
tail -4 $R/tests.log; grep -E "compiled for|rc=" $R/latency-random.log; du -sh /tmp/torchinductor_root 2>&1
tar czf $OUT/c1.tgz -C /tmp/res c1
