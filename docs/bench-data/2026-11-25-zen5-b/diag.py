"""Tokens per target forward and per-proposer acceptance of sd / ngram+model / ngram on one split of mix (the
runtime's own counts). Usage: python diag.py SPLIT N_PROMPTS N_TOKENS (13:02: calibration 15 64)."""
import sys

from spectune.decoder import build_decoder, encode_prompt
from spectune.models import load_models
from spectune.workloads.registry import load_workload

split, n, ntok = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
models = load_models(["draft-s", "smollm2-135m"])
tok = models[-1].tokenizer
prompts = [encode_prompt(tok, p) for p in load_workload("mix").split(split)[:n]]
runs = [("sd3", models, dict(gamma=[3, 1])), ("hyb3", models, dict(gamma=[3, 1], proposer="ngram+model:1,3,8")),
        ("look8", models[1:], dict(gamma=[8], proposer="ngram:1,3"))]
for name, ms, kw in runs:
    d = build_decoder(ms, method="sd", ignore_eos=True, runtime="eager", **kw)
    toks = calls = lk_blocks = lk_acc = dr_blocks = dr_acc = 0
    for i, p in enumerate(prompts):
        out, st = d.generate(p, ntok, seed=i)
        tgt = next(m for m in st.models if m.name == "smollm2-135m")
        toks, calls = toks + len(out), calls + tgt.forward_calls - 1  # the prompt's forward aside
        for m in st.models:
            blocks = m.proposed_by_pos[0] if m.proposed_by_pos else 0
            if m.name.startswith("ngram"):
                lk_blocks, lk_acc = lk_blocks + blocks, lk_acc + m.accepted
            elif m.name == "draft-s":
                dr_blocks, dr_acc = dr_blocks + blocks, dr_acc + m.accepted
    print(name, f"tokens/target call {toks / calls:.2f}", "calls", calls, "lookup blocks/acc", lk_blocks, lk_acc,
          "draft blocks/acc", dr_blocks, dr_acc, flush=True)
