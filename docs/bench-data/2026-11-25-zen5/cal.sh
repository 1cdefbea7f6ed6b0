set -x
date -u; cat /proc/loadavg
cd /tmp/camp/tree
/usr/bin/time -v env PYTHONPATH=/tmp/camp/tree python -m spectune calibrate --models draft-s,draft-m,smollm2-135m --workload mix --out /tmp/camp/zen5prof > /tmp/camp/cal.log 2>&1
echo rc $?
date -u; cat /proc/loadavg
