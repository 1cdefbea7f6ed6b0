"""Distil the bundled drafts from SmolLM2-135M-Instruct on a GPU: teacher generations + online full-vocabulary KD.

The CPU recipe (``train_drafts.py``) can afford ~1M training tokens and a top-32 teacher; on one GPU this
script trains several students side by side on tens of millions of tokens against SmolLM2's full distribution.
Stages (the first two cached in --work-dir):

1. corpus:   ``train_drafts.build_texts`` with ``--corpus v2`` and no workload prompts (the workloads' calibration
             and held-out prompts are never seen): 794 written instruction prompts, stdlib function heads
             (signature + docstring) as code prompts, Python standard-library source as raw code text.
2. generate: SmolLM2 (bf16) continues each instruction prompt through the chat template (1 greedy + --samples
             at T=1) and each code prompt raw (1 greedy + 1 at T=1), up to --gen-tokens new tokens, stopping at
             EOS: the text a draft must predict while decoding with SmolLM2. Kept as token ids (safetensors).
3. distil:   every step draws a batch of windows (--gen-weight of them from the generations, the rest from
             stdlib source), runs the teacher once, and each student takes one AdamW step on the forward KL
             KL(p || q) = sum_x p(x) (log p(x) - log q(x)) over all 49152 tokens (p: teacher, q: student).
             Students start from a PCA projection of SmolLM2's embedding matrix (``train_drafts.pca_embeddings``).
4. write:    fp16 safetensors + config + training.json per student in --out/<name>.

Example (one H100, ~9 minutes in all):
    python examples/distill_drafts.py --device cuda --students draft-s,draft-m --gen-minutes 3 --minutes 4.5
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_drafts as td  # noqa: E402  (corpus, PCA init, config and fp16 writer are shared with the CPU recipe)
from spectune.decoding.attention import eager_attention  # noqa: E402

# name: Llama shape (tied embeddings, SmolLM2 vocabulary); the first two are the shipped drafts' shapes
STUDENTS = {
    "draft-s": td.DRAFT_CONFIGS["draft-s"],
    "draft-m": td.DRAFT_CONFIGS["draft-m"],
    "s64x2": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=256),
    "m192x6": dict(hidden_size=192, num_hidden_layers=6, num_attention_heads=3, num_key_value_heads=1,
                   intermediate_size=768),
}
log = td.log
T_START = time.time()


def make_config(name: str):
    """LlamaConfig of student ``name`` (same conventions as the CPU recipe's drafts)."""
    return td.make_config(name, STUDENTS[name])


# ---------------------------------------------------------------- 1-2: corpus and teacher generations


@torch.no_grad()
def generate_ids(model, tok, prompts: list[str], *, chat: bool, sample: bool, max_new: int, batch: int,
                 seed: int, deadline: float) -> list[list[int]]:
    """Token ids of prompt + SmolLM2 continuation (cut after the first EOS), one list per prompt.

    Stops early (returning what it has) once time.time() passes ``deadline``."""
    tok.padding_side = "left"
    dev = next(model.parameters()).device
    eos = tok.eos_token_id
    out: list[list[int]] = []
    for i in range(0, len(prompts), batch):
        if time.time() > deadline:
            log(f"  generation budget reached after {len(out)}/{len(prompts)} prompts")
            break
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                 if chat else p for p in prompts[i : i + batch]]
        enc = tok(texts, return_tensors="pt", padding=True).to(dev)
        torch.manual_seed(seed + i)
        with eager_attention(dev):  # no cuDNN plan per cache length (spectune/decoding/attention.py)
            gen = model.generate(**enc, max_new_tokens=max_new, do_sample=sample,
                                 temperature=1.0 if sample else None, top_k=0 if sample else None,
                                 top_p=1.0 if sample else None, pad_token_id=tok.pad_token_id)
        n_in = enc.input_ids.shape[1]
        for j in range(len(texts)):
            prompt = enc.input_ids[j][enc.attention_mask[j].bool()].tolist()
            cont = gen[j, n_in:].tolist()
            if eos in cont:
                cont = cont[: cont.index(eos) + 1]
            out.append(prompt + cont)
    return out


def stage_generate(args, work: Path, teacher, tok) -> Path:
    """Build (or reuse) ``generations.safetensors``: the texts' token ids concatenated (int32), and the code windows."""
    from safetensors.torch import save_file

    path = work / f"generations_v2_T{args.gen_tokens}_s{args.samples}.safetensors"
    if path.exists():
        log(f"generations: reusing {path}")
        return path
    rng = random.Random(args.seed)
    texts = td.build_texts(argparse.Namespace(code_chars=args.code_chars, corpus="v2", workload_prompts=False), rng)
    chat, code = texts["chat_prompts"], texts["code_prompts"][: args.code_prompts]
    log(f"corpus: {len(texts['code'])} stdlib files, {len(chat)} instruction prompts, {len(code)} code prompts")
    t0 = time.time()
    deadline = t0 + args.gen_minutes * 60
    kw = dict(max_new=args.gen_tokens, batch=args.gen_batch, deadline=deadline)
    seqs: list[list[int]] = []
    # one pass of each kind first, so that every kind has some texts if the budget runs out
    jobs = [("chat greedy", chat, True, False), ("code greedy", code, False, False)]
    jobs += [("chat T=1 #0", chat, True, True)] if args.samples else []
    jobs += [("code T=1", code, False, True)]
    jobs += [(f"chat T=1 #{k}", chat, True, True) for k in range(1, args.samples)]
    for seed, (label, prompts, is_chat, sample) in enumerate(jobs, start=1):
        got = generate_ids(teacher, tok, prompts, chat=is_chat, sample=sample, seed=1000 * seed, **kw)
        seqs += got
        log(f"  {label}: {len(got)} texts, {sum(map(len, got))} tokens ({time.time() - t0:.0f}s)")
    random.Random(args.seed + 1).shuffle(seqs)
    flat = torch.tensor([t for s in seqs for t in s], dtype=torch.int32)
    code_ids = td.pack(tok, texts["code"] + texts["docs"], args.seq_len, args.code_windows)
    save_file({"flat": flat, "code": code_ids}, str(path))
    log(f"generation: {len(seqs)} texts, {flat.numel()} tokens, {code_ids.shape[0]} code windows in "
        f"{time.time() - t0:.0f}s")
    return path


def windows(flat: torch.Tensor, L: int) -> torch.Tensor:
    """Cut the concatenated generations into [n, L] windows (texts already end with EOS or run to the cap)."""
    n = flat.numel() // L
    return flat[: n * L].view(n, L)


# ---------------------------------------------------------------- 3: distillation


def forward_kl(logp: torch.Tensor, s_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(p || q) = sum_x p(x) (log p(x) - log q(x)) per position, and the student's argmax.

    logp: [B, L, V] fp32 teacher log-probabilities; s_logits: [B, L, V] student logits (any float dtype).
    Returns (kl [B, L] fp32, argmax q [B, L])."""
    logq = torch.log_softmax(s_logits.float(), -1)
    return (logp.exp() * (logp - logq)).sum(-1), s_logits.argmax(-1)


def distil(args, teacher, gen: torch.Tensor, code: torch.Tensor, names: list[str], out: Path, budget: float) -> None:
    """Train ``names`` side by side for ``budget`` seconds (or --steps) and write them to ``out``."""
    from transformers import LlamaForCausalLM

    dev = torch.device(args.device)
    n_val_g, n_val_c = max(8, gen.shape[0] // 100), max(8, code.shape[0] // 100)
    val = torch.cat([gen[:n_val_g], code[:n_val_c]])
    gen_tr, code_tr = gen[n_val_g:], code[n_val_c:]
    temb = teacher.get_input_embeddings().weight.detach().float().cpu()
    students, opts = {}, {}
    for name in names:
        torch.manual_seed(args.seed)
        cfg = make_config(name)
        m = LlamaForCausalLM(cfg)
        with torch.no_grad():
            m.model.embed_tokens.weight.copy_(td.pca_embeddings(temb, cfg.hidden_size))
        m.to(dev).train()
        decay = [p for p in m.parameters() if p.dim() >= 2]
        no_decay = [p for p in m.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
        opts[name] = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), fused=dev.type == "cuda")
        students[name] = m
        log(f"{name}: {sum(p.numel() for p in m.parameters()) / 1e6:.2f}M params")
    log(f"train windows: {gen_tr.shape[0]} generated + {code_tr.shape[0]} code; val {val.shape[0]}; "
        f"batch {args.batch} x {args.seq_len}")
    g = torch.Generator().manual_seed(args.seed)
    amp = dict(device_type=dev.type, dtype=torch.bfloat16, enabled=args.bf16)

    def batch() -> torch.Tensor:
        pick = torch.rand(args.batch, generator=g) < args.gen_weight
        gi = torch.randint(0, gen_tr.shape[0], (args.batch,), generator=g)
        ci = torch.randint(0, code_tr.shape[0], (args.batch,), generator=g)
        return torch.where(pick[:, None], gen_tr[gi], code_tr[ci]).long().to(dev, non_blocking=True)

    @torch.no_grad()
    def evaluate() -> dict[str, tuple[float, float]]:
        res = {n: [0.0, 0.0] for n in names}
        for i in range(0, val.shape[0], args.batch):
            x = val[i : i + args.batch].long().to(dev)
            with torch.autocast(**amp):
                logp = torch.log_softmax(teacher(x).logits.float(), -1)
            ap = logp.argmax(-1)
            for n, m in students.items():
                m.eval()
                with torch.autocast(**amp):
                    kl, aq = forward_kl(logp, m(x).logits)
                res[n][0] += kl.mean().item() * len(x)
                res[n][1] += (ap == aq).float().mean().item() * len(x)
                m.train()
        return {n: (v[0] / val.shape[0], v[1] / val.shape[0]) for n, v in res.items()}

    t0 = time.time()
    step = 0
    ema = {n: None for n in names}
    while (step < args.steps) if args.steps else (time.time() - t0 < budget):
        frac = step / args.steps if args.steps else (time.time() - t0) / budget
        lr = td.lr_at(args, frac, step)
        x = batch()
        with torch.no_grad(), torch.autocast(**amp):
            logp = torch.log_softmax(teacher(x).logits.float(), -1)  # [B, L, V]
        ap = logp.argmax(-1)
        for n, m in students.items():
            for grp in opts[n].param_groups:
                grp["lr"] = lr
            with torch.autocast(**amp):
                kl, aq = forward_kl(logp, m(x).logits)
            loss = kl.mean()
            opts[n].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[n].step()
            if step % args.log_every == 0:
                agree = (ap == aq).float().mean().item()
                ema[n] = (loss.item(), agree) if ema[n] is None else (0.8 * ema[n][0] + 0.2 * loss.item(),
                                                                      0.8 * ema[n][1] + 0.2 * agree)
        step += 1
        if step % (args.log_every * 10) == 0:
            tok_s = step * args.batch * args.seq_len / (time.time() - t0)
            log(f"step {step} lr {lr:.2e} {tok_s / 1e3:.0f}k tok/s | "
                + " | ".join(f"{n} kl {v[0]:.3f} agree {v[1]:.3f}" for n, v in ema.items() if v))
    wall = time.time() - t0
    final = evaluate()
    for n, m in students.items():
        vl, va = final[n]
        meta = {"name": n, "recipe": "examples/distill_drafts.py", "config": STUDENTS[n],
                "parameters": sum(p.numel() for p in m.parameters()), "steps": step, "batch": args.batch,
                "seq_len": args.seq_len, "tokens_seen": step * args.batch * args.seq_len, "wall_seconds": round(wall),
                "lr": args.lr, "warmup": args.warmup, "gen_weight": args.gen_weight, "seed": args.seed,
                "train_windows": {"generated": int(gen_tr.shape[0]), "code": int(code_tr.shape[0])},
                "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
                "val_forward_kl": round(vl, 4), "val_greedy_agreement": round(va, 4)}
        td.save_draft(m.float().cpu(), out / n, meta)
        log(f"{n}: {step} steps in {wall:.0f}s, val KL {vl:.3f}, val agreement {va:.3f} -> {out / n}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--students", default="draft-s,draft-m", help=f"comma-separated, from {', '.join(STUDENTS)}")
    ap.add_argument("--out", default="distilled-drafts")
    ap.add_argument("--work-dir", default=str(td.bundled.cache_root() / "distill_drafts"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--code-chars", type=int, default=8_000_000, help="stdlib source characters to read")
    ap.add_argument("--code-prompts", type=int, default=2000, help="stdlib function heads to continue")
    ap.add_argument("--code-windows", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=3, help="T=1 continuations per instruction prompt (plus 1 greedy)")
    ap.add_argument("--gen-tokens", type=int, default=256)
    ap.add_argument("--gen-batch", type=int, default=512)
    ap.add_argument("--gen-minutes", type=float, default=3.0, help="generation budget (stops starting new batches)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--gen-weight", type=float, default=0.75, help="share of each batch drawn from the generations")
    ap.add_argument("--minutes", type=float, default=4.5, help="wall-time budget for distillation (all students)")
    ap.add_argument("--total-minutes", type=float, default=0.0,
                    help="cap on the whole run: distillation gets what loading and generation left of it")
    ap.add_argument("--steps", type=int, default=0, help="train exactly this many steps (no time budget; lr by step)")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True, help="bf16 teacher + autocast")
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    names = [n.strip() for n in args.students.split(",")]
    unknown = [n for n in names if n not in STUDENTS]
    if unknown:
        sys.exit(f"error: unknown student(s) {unknown}; choose from {list(STUDENTS)}")
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    log(f"args: {vars(args)}")
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = td.bundled.resolve(td.bundled.TARGET)
    tok = AutoTokenizer.from_pretrained(str(d))
    if tok.pad_token is None:  # older transformers convert SmolLM2's GGUF tokenizer without one
        tok.pad_token = tok.eos_token
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    teacher = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype).to(args.device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    data = load_file(str(stage_generate(args, work, teacher, tok)))
    gen = windows(data["flat"], args.seq_len)
    code = data["code"]
    budget = args.minutes * 60
    if args.total_minutes:  # whatever generation left of the whole run, keeping 45 s for evaluation and writing
        budget = min(budget, args.total_minutes * 60 - (time.time() - T_START) - 45)
    log(f"distillation budget: {budget:.0f}s")
    distil(args, teacher, gen, code, names, Path(args.out), budget)


if __name__ == "__main__":
    main()
