"""(python cumul.py [PROPOSER [PROFILE]]; first run 16:35 on Zen 5, bf16) Offline estimate of a cumulative-confidence
stop rule (stop once the product of the block's q falls below T, the form of SpecDec++'s stopping rule), priced by the
path-walking cost model on the bundled profile (mix, batch 1, 32-token requests), as x the best fixed gamma.
Not a spectune policy: Machine.draft is patched to reset the product at each block and the cost model's setup to
swap the policy in."""
import sys

import spectune.decoding.state_machine as M
from spectune.config import DecodeConfig
from spectune.decoding.policy import ConfidencePolicy
from spectune.profile import load_profile
from spectune.tune.cost import CostModel


class Cumulative(ConfidencePolicy):
    prod = 1.0

    def stop(self, q):
        Cumulative.prod *= q
        return Cumulative.prod < self.threshold


_draft = M.Machine.draft


def draft(self, s, i, count):
    Cumulative.prod = 1.0
    return (yield from _draft(self, s, i, count))


M.Machine.draft = draft
prof = load_profile(sys.argv[2] if len(sys.argv) > 2 else "profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen5-x2-bf16")
prop = sys.argv[1] if len(sys.argv) > 1 else "model"
cm = CostModel(prof, workload=None, max_new_tokens=32)
_setup = cm._setup


def setup(config):
    kw = _setup(config)
    if config.extra.get("cumulative"):
        kw["policy"] = Cumulative(float(config.policy.split(":")[1]))
    return kw


cm._setup = setup


def speedup(g, policy):
    cum = policy.startswith("cum:")
    c = DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(g, 1), proposer=prop,
                     policy=policy.replace("cum:", "confidence:"), max_new_tokens=32,
                     extra={"cumulative": 1} if cum else {})
    if cum:  # the caches are keyed by the policy text, which a confidence threshold shares
        cm._counts.clear()
        cm._batches.clear()
    return cm.predict(c).speedup_vs_target


best = max(speedup(g, "fixed") for g in range(1, 9))
print(prop, "best fixed", round(best, 3))
for g in (4, 8):
    for t in (0.05, 0.1, 0.2, 0.3, 0.4, 0.5):
        print(f"cum:{t} g<={g}", round(speedup(g, f"cum:{t}") / best, 3))
