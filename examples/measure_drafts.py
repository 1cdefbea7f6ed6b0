"""Measure how well the bundled drafts match SmolLM2 (and each other) on the workloads' held-out prompts.

(``--split calibration``: on the calibration prompts instead, to check that training did not leak into them.)

For every held-out prompt SmolLM2 writes a greedy continuation (fp32); each model then reads prompt +
continuation teacher-forced, and at every continuation position we compare next-token distributions:

* greedy agreement: fraction of positions where argmax q == argmax p
* mean sum_x min(p(x), q(x)) at T=1: the expected acceptance probability of one speculative token

Pairs: draft-s vs SmolLM2, draft-m vs SmolLM2, draft-s vs draft-m (p = the larger model). Also prints each
model's single-token decode latency (median ms/token with a KV cache). Prompts of the ``code`` workload are fed
raw; the others through the chat template (``--format auto``), or all raw / all chat.

Example:
    nice -n 10 python examples/measure_drafts.py --new-tokens 64 --json-out /tmp/acceptance.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectune.decoding.hf_compat import cache_of, forward  # noqa: E402
from spectune.models import load_models  # noqa: E402
from spectune.models.bundled import DEFAULT_FAMILY  # noqa: E402
from spectune.workloads import load_workload, workload_names  # noqa: E402


def format_prompt(tok, prompt: str, workload: str, fmt: str) -> str:
    chat = fmt == "chat" or (fmt == "auto" and workload != "code")
    if not chat:
        return prompt
    return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)


@torch.no_grad()
def greedy_continuations(target, tok, texts: list[str], new_tokens: int, batch: int) -> list[tuple[list[int], int]]:
    """(token ids of prompt + continuation, prompt length) per text; continuation stops after EOS."""
    tok.padding_side = "left"
    out = []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        gen = target.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        P = enc.input_ids.shape[1]
        for j in range(gen.shape[0]):
            prompt = enc.input_ids[j][enc.attention_mask[j].bool()].tolist()
            cont = gen[j, P:].tolist()
            if tok.eos_token_id in cont:
                cont = cont[: cont.index(tok.eos_token_id) + 1]
            out.append((prompt + cont, len(prompt)))
    return out


@torch.no_grad()
def next_token_probs(model, seqs: list[tuple[list[int], int]]) -> torch.Tensor:
    """Softmax (T=1) at every position that predicts a continuation token, concatenated over sequences."""
    rows = []
    for ids, plen in seqs:
        logits = model(torch.tensor([ids])).logits[0].float()
        rows.append(torch.softmax(logits[plen - 1 : len(ids) - 1], -1))
    return torch.cat(rows)


def compare(p: torch.Tensor, q: torch.Tensor) -> dict:
    return {
        "greedy_agreement": round((p.argmax(-1) == q.argmax(-1)).float().mean().item(), 4),
        "sum_min_pq": round(torch.minimum(p, q).sum(-1).mean().item(), 4),
        "positions": int(p.shape[0]),
    }


@torch.no_grad()
def decode_ms_per_token(model, steps: int = 40, context: int = 64) -> float:
    """Median wall time of one single-token forward with a KV cache after ``context`` tokens."""
    x = torch.randint(100, 40000, (1, context), generator=torch.Generator().manual_seed(0))
    o = model(x, use_cache=True)
    pk, nxt = cache_of(o), o.logits[:, -1:].argmax(-1)
    ts = []
    for _ in range(steps + 5):
        t = time.perf_counter()
        o = forward(model, pk, input_ids=nxt, use_cache=True)
        ts.append(time.perf_counter() - t)
        pk, nxt = cache_of(o), o.logits[:, -1:].argmax(-1)
    ts = sorted(ts[5:])
    return ts[len(ts) // 2] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT_FAMILY), help="drafts first, target last")
    ap.add_argument("--workloads", default="code,math,chat,summarize")
    ap.add_argument("--format", choices=["auto", "raw", "chat"], default="auto")
    ap.add_argument("--split", choices=["heldout", "calibration"], default="heldout",
                    help="which prompts of each workload (calibration: checks that training did not leak into them)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-out", default="")
    ap.add_argument("--no-latency", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    names = args.models.split(",")
    models = load_models(names)
    target, tok = models[-1].model, models[-1].tokenizer
    pairs = [(d.name, target_name) for target_name in [names[-1]] for d in models[:-1]]
    if len(models) >= 3:
        pairs.append((names[0], names[1]))
    by_name = {m.name: m.model for m in models}
    result: dict = {"format": args.format, "split": args.split, "new_tokens": args.new_tokens, "workloads": {}}
    all_probs: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    for w in args.workloads.split(","):
        if w not in workload_names():
            raise SystemExit(f"unknown workload {w}")
        wl = load_workload(w)
        split = wl.heldout if args.split == "heldout" else wl.calibration
        prompts = [format_prompt(tok, p, w, args.format) for p in split]
        t0 = time.time()
        seqs = greedy_continuations(target, tok, prompts, args.new_tokens, args.batch)
        probs = {n: next_token_probs(by_name[n], seqs) for n in names}
        for n in names:
            all_probs[n].append(probs[n])
        result["workloads"][w] = {f"{a} vs {b}": compare(probs[b], probs[a]) for a, b in pairs}
        print(f"{w}: {len(seqs)} prompts, {probs[names[0]].shape[0]} positions ({time.time() - t0:.0f}s)", flush=True)
    cat = {n: torch.cat(v) for n, v in all_probs.items()}
    result["workloads"]["all"] = {f"{a} vs {b}": compare(cat[b], cat[a]) for a, b in pairs}
    if not args.no_latency:
        result["ms_per_token"] = {m.name: round(decode_ms_per_token(m.model), 2) for m in models}
        result["threads"] = args.threads
    # table
    print(f"\nformat={args.format}; greedy agreement / mean sum_x min(p,q) at T=1 along SmolLM2-greedy continuations")
    head = ["workload"] + [f"{a} vs {b}" for a, b in pairs]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for w, row in result["workloads"].items():
        cells = [f"{row[h]['greedy_agreement']:.3f} / {row[h]['sum_min_pq']:.3f}" for h in head[1:]]
        print(f"| {w} | " + " | ".join(cells) + " |")
    if "ms_per_token" in result:
        print("\nms/token (median, KV cache, %d threads): %s" % (args.threads, result["ms_per_token"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
