#!/bin/bash
cd /work/main
date -u +%H:%M:%S > /tmp/camp/hyb8b/start.txt
( while true; do echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg)"; sleep 30; done ) > /tmp/camp/hyb8b/loadavg.txt &
LP=$!
python -m spectune bench --models draft-s,smollm2-135m --methods sd --gammas 2,3,4 --policy confidence:0.4 \
  --proposer ngram+model:1,3,8 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 5 \
  --out /tmp/camp/hyb8b > /tmp/camp/hyb8b/log.txt 2>&1
echo "rc=$?" >> /tmp/camp/hyb8b/log.txt
date -u +%H:%M:%S > /tmp/camp/hyb8b/end.txt
kill $LP
