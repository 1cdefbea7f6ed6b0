# call 1: environment, the CUDA tests of the static path, SmolLM2 L(b, k) eager vs compiled (random weights)
source .gpu/setup.sh; R=/tmp/res/c1; mkdir -p $R
{ date -u; nvidia-smi; python3 -c "import sys,torch,transformers;print(sys.version);print(torch.__version__,torch.version.cuda,transformers.__version__,torch.cuda.get_device_name(0),torch.cuda.get_device_capability(0))"; nproc; lscpu | head -16; } > $R/env.txt 2>&1
python3 -c "import json;from spectune.machine import here,describe;i=here('$DEV');print(describe(i));print(json.dumps(i,indent=1))" >> $R/env.txt 2>&1
head -30 $R/env.txt | grep -E "NVIDIA|Driver|^[0-9]|Python|AMD|Intel|Model name" | head -8
timeout ${T1:-240} python3 -m pytest -q -p no:cacheprovider -m "not slow" -k "cuda or compiled" tests/decoding/test_static.py > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tail -4 $R/tests.log
timeout ${T2:-300} python3 examples/runtime_compare.py --device $DEV --random-weights --models smollm2-135m --batch-sizes ${BS:-1,8,32} --ks ${KS:-1,2,4,8,16} --ctx 256 --repeats ${REP:-7} --pair '' --json-out $R/latency-smollm2.json > $R/latency-smollm2.log 2>&1; echo "rc=$?" >> $R/latency-smollm2.log
tail -22 $R/latency-smollm2.log
tar czf ${OUT:-/tmp}/c1.tgz -C /tmp/res c1
