"""Tokens per target forward: priced by the cost model from each profile given, and made by the runtime on the
same 15 mix calibration prompts x 64 tokens (greedy, bf16, eager). Usage: python tpr.py PROFILE [PROFILE ...]
(--no-runtime: prices only)."""
import sys

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

PAIR, TGT = ("draft-s", "smollm2-135m"), ("smollm2-135m",)
CONFIGS = [(PAIR, (2, 1), "model", "fixed"), (PAIR, (3, 1), "model", "fixed"), (PAIR, (4, 1), "model", "fixed"),
           (PAIR, (4, 1), "model", "confidence:0.4"), (PAIR, (4, 1), "model", "heuristic"),
           (TGT, (8,), "ngram:1,3", "fixed"), (PAIR, (3, 1), "ngram+model:1,3,8", "fixed"),
           (PAIR, (4, 1), "ngram+model:1,3,8", "confidence:0.4"), (PAIR, (2, 1), "ngram+model:2,4,8", "fixed")]
NTOK = 64


def cfg(models, g, prop, pol):
    return DecodeConfig(models=models, method="sd", gamma=g, proposer=prop, policy=pol, max_new_tokens=NTOK)


def name(c):
    return f"{','.join(c.models):22s} g={c.gamma} {c.proposer:18s} {c.policy:15s}"


args = [a for a in sys.argv[1:] if not a.startswith("--")]
for path in args:
    cm = CostModel(load_profile(path), workload=None, max_new_tokens=NTOK)
    for spec in CONFIGS:
        c = cfg(*spec)
        label = path.rstrip("/").rsplit("/", 1)[-1][:28]
        print(f"priced {label:28s} {name(c)} tpr={cm.predict(c).tokens_per_round:.3f}", flush=True)
if "--no-runtime" in sys.argv:
    sys.exit()
from spectune.decoder import build_decoder, encode_prompt  # noqa: E402
from spectune.models import load_models  # noqa: E402
from spectune.workloads.registry import load_workload  # noqa: E402

models = load_models(["draft-s", "smollm2-135m"])
tok = models[-1].tokenizer
prompts = [encode_prompt(tok, p) for p in load_workload("mix").split("calibration")[:15]]
for spec in CONFIGS:
    c = cfg(*spec)
    ms = models if len(c.models) == 2 else models[1:]
    d = build_decoder(ms, method="sd", gamma=list(c.gamma), proposer=c.proposer, policy=c.policy, ignore_eos=True,
                      runtime="eager")
    toks = calls = 0
    for i, p in enumerate(prompts):
        out, st = d.generate(p, NTOK, seed=i)
        tgt = next(m for m in st.models if m.name == "smollm2-135m")
        toks, calls = toks + len(out), calls + tgt.forward_calls - 1  # the prompt's forward aside
    print(f"runtime {'':28s} {name(c)} tpr={toks / calls:.3f}", flush=True)
