#!/usr/bin/env bash
# Issue 36 measurements from a snapshot of the tree (/tmp/snap6 = git archive of HEAD): spectune's runtime on
# llama.cpp's kernels beside the eager one, a profile calibrated through it, and the advice it gives.
set -uo pipefail
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp6
cd /tmp/snap6
lscpu | head -20 > $C/lscpu.txt
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
t "RC start"
python examples/runtime_compare.py --runtimes eager,llamacpp --models smollm2-135m,draft-s --batch-sizes 1,8 \
  --ks 1,2,4,8 --repeats 5 --gen-batch-sizes 1,8 --new-tokens 32 --json-out $C/rc.json > $C/rc.log 2>&1
t "RC done rc=$?"
python -m spectune calibrate --runtime llamacpp --models draft-s,smollm2-135m --out $C/rt-llamacpp > $C/cal.log 2>&1
t "CAL done rc=$?"
for RT in llamacpp eager; do
  P=$C/rt-llamacpp; [ $RT = eager ] && P=/tmp/camp/runtime-profile
  for B in 1 8; do
    python -m spectune recommend --models draft-s,smollm2-135m --profile $P --runtime $RT --workload mix \
      --batch-size $B --trials 300 --validate 3 --out $C/rec-$RT-b$B > $C/rec-$RT-b$B.log 2>&1
    t "REC $RT b=$B done rc=$?"
  done
done
# acceptance from more calibration prompts: 12 per workload (60) instead of 3 (15), then both engines' advice
# re-priced offline against the grids they measured (vLLM: Part F's advice-vllm; llama.cpp: camp5's advice-llama)
python -m spectune calibrate --models draft-s,smollm2-135m --workload mix --prompts-per-workload 12 \
  --out $C/acc12 > $C/acc12.log 2>&1
t "ACC12 done rc=$?"
B=/work/main/docs/bench-data/2026-11-26-intel-spr-b
PYTHONPATH=/tmp/snap6 python /tmp/rep/reprice.py $B/ep-vllm $B/advice-vllm vllm > $C/reprice-vllm-acc3.txt 2>&1
PYTHONPATH=/tmp/snap6 python /tmp/rep/reprice.py $B/ep-vllm $B/advice-vllm vllm $C/acc12 > $C/reprice-vllm-acc12.txt 2>&1
PYTHONPATH=/tmp/snap6 python /tmp/rep/reprice.py /tmp/camp5/ep-llama /tmp/camp5/advice-llama llamacpp $C/acc12 > $C/reprice-llama-acc12.txt 2>&1
t "REPRICE done rc=$?"
