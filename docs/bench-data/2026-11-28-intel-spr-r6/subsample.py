"""A copy of an engine profile whose measured rows keep 3 of each pass's 6 repeats (first3: 0-2, last3: 3-5),
renumbered, its grid's repeats set to 3; reprice.py refits it."""
import json
import sys
import shutil
from pathlib import Path
src, dst, which = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
shutil.copytree(src, dst)
meta = json.loads((src / "profile.json").read_text())
e = meta["engine"]
n = int(e["grid"]["repeats"])
lo = 0 if which == "first3" else n - 3
kept = []
for r in e["measured"]:
    p, i = divmod(int(r["repeat"]), n)
    if lo <= i < lo + 3:
        kept.append(dict(r, repeat=p * 3 + i - lo))
e["measured"], e["grid"]["repeats"] = kept, 3
(dst / "profile.json").write_text(json.dumps(meta))
print(len(kept), "of", len(json.loads((src / "profile.json").read_text())["engine"]["measured"]))
