#!/usr/bin/env bash
# A/B: does --kv-unified cost llama-server at b = 8? target alone and the never-drafting twin ngram:1,2 K=1,
# with llama-server as spectune starts it (default), with -kvu forced (target alone too), with -no-kvu forced.
# Usage: kvu_ab.sh [PASS ...]   (default: passes 1 2; passes 3-5 ran as kvu_ab.sh 3 4 5)
set -u
OUT=/tmp/camp/kvu; mkdir -p $OUT
cd /tmp/snap2
export SPECTUNE_LLAMACPP=$HOME/.cache/spectune-engines/llamacpp-11434/bin/llama-server
for rep in ${*:-1 2}; do
  for v in default kvu nokvu; do
    case $v in default) A=();; kvu) A=(--engine-args=-kvu);; nokvu) A=(--engine-args=-no-kvu);; esac
    echo "$v-$rep $(date -u +%T)" >> $OUT/times.txt
    python -m spectune bench --engine llamacpp --engine-only --models draft-s,smollm2-135m --gammas 1 \
      --proposer ngram:1,2 --batch-sizes 8 --workload mix --prompts 8 --max-new-tokens 48 --repeats 3 \
      --out $OUT/$v-$rep "${A[@]}" > $OUT/$v-$rep.log 2>&1
    echo "$v-$rep rc=$? $(date -u +%T)" >> $OUT/times.txt
  done
done
