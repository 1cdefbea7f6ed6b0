"""Blocks a model drafts on r's path vs drawn from the states, sd gamma 4 on the bundled Zen 5 profile, by
workload and request length (16:56, after the visit change)."""
import spectune.tune.simulate as S
from spectune.profile import load_profile
from spectune.tune.cost import CostModel
from spectune.config import DecodeConfig
n = {"path": 0, "drawn": 0}
orig_draw, orig_prop = S.TraceBackend._draw, S.TraceBackend.propose
def draw(self, i, s):
    n["drawn"] += 1
    return orig_draw(self, i, s)
def prop(self, s, i, block, pos):
    if pos == 0 and self._walk_draft(s, i) is not None:
        n["path"] += 1
    return orig_prop(self, s, i, block, pos)
S.TraceBackend._draw, S.TraceBackend.propose = draw, prop
prof = load_profile('/work/main/profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen5-x2-bf16')
for wl in ("code", "edit", None):
    for mnt in (32, 64, 128):
        n.update(path=0, drawn=0)
        cm = CostModel(prof, workload=wl, max_new_tokens=mnt)
        cm.predict(DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(4, 1), max_new_tokens=mnt))
        print(wl or "mix", mnt, "blocks on the path", n["path"], "drawn", n["drawn"])
