#!/bin/bash
cd /work/main
date -u +%H:%M:%S > /tmp/camp/hyb8/start.txt
( while true; do echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg)"; sleep 30; done ) > /tmp/camp/hyb8/loadavg.txt &
LP=$!
python -m spectune bench --models draft-s,smollm2-135m --methods sd,cos --gammas 2,3,4 --policy confidence:0.4 \
  --proposer ngram+model:1,3,8 --proposer ngram:1,3 --batch-sizes 1 --prompts 8 --max-new-tokens 32 --repeats 3 \
  --out /tmp/camp/hyb8 > /tmp/camp/hyb8/log.txt 2>&1
echo "rc=$?" >> /tmp/camp/hyb8/log.txt
date -u +%H:%M:%S > /tmp/camp/hyb8/end.txt
kill $LP
