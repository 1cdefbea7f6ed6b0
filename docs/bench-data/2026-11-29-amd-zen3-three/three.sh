#!/usr/bin/env bash
# The three-way table on this machine (AMD EPYC family 25 model 1, AVX2): spectune's runtime beside llama.cpp, then
# beside vLLM, the same configurations as the Emerald Rapids table (camp5.sh's R step), from a snapshot.
set -uo pipefail
export SPECTUNE_VLLM=/root/.cache/spectune-engines/vllm-0.32.0/bin/vllm
export SPECTUNE_LLAMACPP=/root/.cache/spectune-engines/llamacpp-11434/bin/llama-server
C=/tmp/camp/three; mkdir -p $C
cd /tmp/snap; export PYTHONPATH=/tmp/snap
lscpu | head -20 > $C/lscpu.txt
t() { echo "$1 $(date -u +%T)" >> $C/times.txt; }
for E in llamacpp vllm; do
  t "R $E start"
  python -m spectune bench --engine $E --models draft-s,smollm2-135m --gammas 3,4 --proposer ngram:1,3 \
    --workload mix --batch-sizes 1,8 --prompts 4 --max-new-tokens 64 --repeats 3 --out $C/versus-$E \
    --engine-log-dir $C/logs-v-$E > $C/R-$E.log 2>&1; t "R $E done rc=$?"
done
