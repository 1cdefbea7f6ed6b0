"""Distil the bundled draft models (draft-s, draft-m) from SmolLM2-135M-Instruct, offline, on CPU.

The CPU recipe: it produced the first shipped drafts (greedy agreement with SmolLM2 0.21 / 0.26 on the held-out
prompts). The weights shipped now come from ``distill_drafts.py`` on one GPU (0.39 / 0.46); see the model cards.

Reproducible (fixed seeds, deterministic corpus order); prints its losses. Stages, each cached in --work-dir:

1. corpus:  Python standard-library source (.py under sysconfig's stdlib, site-packages excluded), its
            docstrings, the workloads' *calibration* prompts (never the held-out ones), and prompts written here.
2. generate: SmolLM2 continuations of those prompts (chat-templated instructions and raw code/text), half
            greedy, half sampled at T=1 -- the text a draft must predict while decoding with SmolLM2.
3. teacher: one SmolLM2 pass over all packed training windows, keeping only the top-k log-probabilities
            (indices int32, values fp16) per position.
4. train:   each draft (LlamaForCausalLM, tied embeddings, SmolLM2 vocabulary) starts from a PCA projection of
            SmolLM2's embedding matrix and minimises the cross-entropy to the teacher's top-k distribution with
            the remaining tail mass as one extra bucket; weights are written as fp16 safetensors.

Example:
    nice -n 10 python examples/train_drafts.py --drafts draft-s,draft-m --minutes 20
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectune.models import bundled  # noqa: E402

DRAFT_CONFIGS = {
    # name: (hidden, layers, heads, kv_heads, ffn)
    "draft-s": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                    intermediate_size=384),
    "draft-m": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=3, num_key_value_heads=1,
                    intermediate_size=768),
}

# Prompts written for this project: instructions across the workloads' domains (chat, math, summarise, code).
TOPICS = [
    "photosynthesis", "the water cycle", "compound interest", "how vaccines work", "the French Revolution",
    "black holes", "recursion in programming", "supply and demand", "the immune system", "plate tectonics",
    "machine learning", "climate change", "the printing press", "how a bill becomes law", "electric cars",
    "healthy sleep habits", "time management", "the solar system", "prime numbers", "binary search",
    "the Roman Empire", "renewable energy", "how the internet works", "volcanoes", "the human heart",
    "budgeting for students", "learning a new language", "public speaking", "composting at home", "gravity",
]
INSTRUCTIONS = [
    "Explain {t} in simple terms.", "Write a short paragraph about {t}.", "What are three key facts about {t}?",
    "Give me a beginner's guide to {t}.", "Why is {t} important?", "Summarise the main ideas of {t} in two sentences.",
    "Write a short story that involves {t}.", "What are common misconceptions about {t}?",
]
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "computes the factorial of n", "merges two sorted lists",
    "counts word frequencies in a text", "returns the n-th Fibonacci number", "flattens a nested list",
    "removes duplicates from a list while keeping order", "converts Celsius to Fahrenheit",
    "finds the maximum of a list",
    "checks whether a string is a palindrome", "computes the average of a list of numbers", "parses a CSV line",
    "sorts a list of dictionaries by a key", "computes the greatest common divisor of two integers",
    "validates an email address with a regular expression", "reads a file and counts its lines",
    "transposes a matrix given as a list of lists", "implements binary search", "returns the squares of even numbers",
]
CODE_FORMS = ["Write a Python function that {t}.", "How do I write Python code that {t}?",
              "Show me a short, well-documented Python function that {t}, with an example call."]
SUMMARY_ASKS = ["Summarise the passage in one sentence.", "Summarize the following text in two sentences.",
                "What is the main point of this text?", "Give a short summary with three bullet points."]
PASSAGES = [
    "The city council met on Tuesday to discuss the new bicycle lanes. Residents said the lanes made cycling safer, "
    "but some shop owners worried about losing parking spaces. The council agreed to review the plan in six months.",
    "Bees are essential pollinators. Without them, many fruits and vegetables would be far less common. Pesticides and "
    "habitat loss have reduced bee populations, and farmers are now planting wildflower strips to help them recover.",
    "The library extended its opening hours during exam season. Students could study until midnight, and volunteers "
    "offered free tutoring in mathematics and writing. Attendance doubled compared with the previous year.",
    "A new study found that short walks after meals can lower blood sugar. Participants who walked for ten minutes "
    "after eating had smaller spikes in glucose than those who sat still.",
    "The company released a software update that fixes several security problems. Users are advised to install it as "
    "soon as possible. The update also improves battery life on older phones.",
    "Rain fell for three days, flooding the valley roads. Emergency crews rescued several drivers, and schools closed "
    "early. By Friday the water had receded and cleanup began.",
]
HANDWRITTEN = [
    "Speculative decoding lets a small draft model propose several tokens that a larger target model then checks in a "
    "single forward pass. When the draft agrees with the target, many tokens are accepted at once.",
    "To make a cup of tea, boil fresh water, warm the pot, add one spoon of leaves per cup, pour the water and wait "
    "three to five minutes before serving.",
    "A good function has one job, a clear name, and a docstring that says what it returns. Tests check its behaviour "
    "on ordinary inputs and on edge cases such as empty lists.",
    "Question: If a shirt costs 20 dollars and is discounted by 25 percent, what is the new price?\nAnswer: The "
    "discount is 20 * 0.25 = 5 dollars, so the new price is 20 - 5 = 15 dollars.",
    "Dear team, thank you for your hard work this quarter. We met our goals ahead of schedule, and I am grateful for "
    "the care you put into every project. Let's celebrate on Friday.",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def math_prompts(rng: random.Random, n: int) -> list[str]:
    """Arithmetic word problems with random numbers."""
    forms = [
        "A shop sells pencils for {a} cents each. How much do {b} pencils cost?",
        "A car travels {a} kilometres per hour for {b} hours. How far does it go?",
        "Tom has {a} apples and gives {b} to his friend. How many apples does he have left?",
        "What is {a} multiplied by {b}?", "What is {a} plus {b} minus {c}?",
        "A rectangle is {a} cm long and {b} cm wide. What is its area and perimeter?",
        "If {a} workers build a wall in {b} days, how long would {c} workers take?",
        "Solve for x: {a}x + {b} = {c}.", "What is {a} percent of {b}?",
        "A recipe needs {a} eggs for {b} people. How many eggs are needed for {c} people?",
    ]
    return [rng.choice(forms).format(a=rng.randint(2, 90), b=rng.randint(2, 40), c=rng.randint(3, 200))
            for _ in range(n)]


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if rel[0] in ("site-packages", "dist-packages") or "test" in rel[0] or "tests" in rel or "idlelib" in rel[0]:
            continue
        out.append(p)
    return out


def build_texts(args, rng: random.Random) -> dict[str, list]:
    """The raw corpus: stdlib code, docstrings, handwritten text, and prompts for SmolLM2 to continue."""
    files = stdlib_files()
    rng.shuffle(files)
    code, docs, code_prompts = [], [], []
    n_chars = 0
    for p in files:
        try:
            src = p.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (UnicodeDecodeError, SyntaxError, ValueError, OSError):
            continue
        code.append(src)
        n_chars += len(src)
        lines = src.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 80:
                    docs.append(d)
                if isinstance(node, ast.FunctionDef) and d and node.body and len(code_prompts) < 4000:
                    body0 = node.body[0]
                    head = "\n".join(lines[node.lineno - 1 : body0.end_lineno])
                    if 40 < len(head) < 800:
                        code_prompts.append(__import__("textwrap").dedent(head) + "\n")
        if n_chars > args.code_chars:
            break
    rng.shuffle(code_prompts)
    if args.corpus == "v1":  # the shipped drafts' prompts (continued with --workload-prompts)
        chat = [rng.choice(INSTRUCTIONS).format(t=t) for t in TOPICS for _ in range(2)]
        chat += [f"Write a Python function that {t}." for t in CODE_TASKS]
        chat += math_prompts(rng, 60)
        chat += [f"{p}\n\nSummarise the passage in one sentence." for p in PASSAGES]
        chat += [f"Summarise the following text:\n\n{d[:600]}" for d in rng.sample(docs, min(20, len(docs)))]
    else:  # v2: every topic x instruction, more math / code / summaries (794 prompts); no workload prompts
        chat = [i.format(t=t) for t in TOPICS for i in INSTRUCTIONS]
        chat += [form.format(t=t) for t in CODE_TASKS for form in CODE_FORMS]
        chat += math_prompts(rng, 300)
        chat += [f"{p}\n\n{ask}" for p in PASSAGES + HANDWRITTEN for ask in SUMMARY_ASKS]
        chat += [f"{rng.choice(SUMMARY_ASKS)}\n\n{d[:600]}" for d in rng.sample(docs, min(150, len(docs)))]
    if args.workload_prompts:  # leaks into calibration, whose prompts these are (measured: +0.02 agreement there)
        from spectune.workloads import load_workload, workload_names

        for w in workload_names():
            if w != "mix":
                chat += list(load_workload(w).calibration)  # calibration split only: held-out stays unseen
    rng.shuffle(chat)
    return {"code": code, "docs": docs, "hand": HANDWRITTEN, "chat_prompts": chat, "code_prompts": code_prompts}


def load_teacher(dtype: str):
    """SmolLM2 from the bundled cache; bfloat16 weights make the teacher ~3x faster on AMX/AVX512-BF16 CPUs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = bundled.resolve(bundled.TARGET)
    tok = AutoTokenizer.from_pretrained(str(d))
    model = AutoModelForCausalLM.from_pretrained(str(d), dtype=getattr(torch, dtype)).eval()
    return model, tok


@torch.no_grad()
def generate(model, tok, prompts: list[str], *, chat: bool, sample: bool, max_new: int, batch: int,
             seed: int) -> list[str]:
    """SmolLM2 continuations of ``prompts`` (prompt + continuation, as one text each)."""
    tok.padding_side = "left"
    out = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                 if chat else p for p in chunk]
        enc = tok(texts, return_tensors="pt", padding=True)
        torch.manual_seed(seed + i)
        gen = model.generate(**enc, max_new_tokens=max_new, do_sample=sample, temperature=1.0 if sample else None,
                             top_k=0 if sample else None, top_p=1.0 if sample else None, pad_token_id=tok.pad_token_id)
        for j, t in enumerate(texts):
            cont = tok.decode(gen[j, enc.input_ids.shape[1]:], skip_special_tokens=False)
            cont = cont.replace(tok.pad_token, "") if not chat else cont.split(tok.eos_token)[0] + tok.eos_token
            out.append(t + cont)
        log(f"  generated {len(out)}/{len(prompts)} ({'chat' if chat else 'raw'}, {'T=1' if sample else 'greedy'})")
    return out


def pack(tok, texts: list[str], seq_len: int, max_windows: int) -> torch.Tensor:
    """Tokenise, join with EOS, cut into windows of seq_len tokens (int32 [n, seq_len])."""
    ids: list[int] = []
    for t in texts:
        ids += tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id]
        if len(ids) >= seq_len * max_windows:
            break
    n = min(len(ids) // seq_len, max_windows)
    return torch.tensor(ids[: n * seq_len], dtype=torch.int32).view(n, seq_len)


PARTS = ("gen", "code", "docs")


def part_file(args, work: Path, part: str) -> Path:
    return work / f"teacher_{part}_top{args.topk}_L{args.seq_len}.safetensors"


def stage_data(args, work: Path, parts: list[str]) -> None:
    """Corpus + SmolLM2 generations + teacher top-k, one safetensors file per part (no pickle).

    Parts are independent, so two processes (one thread each) can build "gen" and "code,docs" side by side."""
    from safetensors.torch import save_file

    todo = [p for p in parts if not part_file(args, work, p).exists()]
    if not todo:
        return
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    texts = build_texts(args, rng)
    log(f"corpus: {len(texts['code'])} stdlib files, {len(texts['docs'])} docstrings, "
        f"{len(texts['chat_prompts'])} instruction prompts, {len(texts['code_prompts'])} code prompts")
    model, tok = load_teacher(args.teacher_dtype)
    L = args.seq_len
    for part in todo:
        if part == "gen":
            t0 = time.time()
            cp, kp = texts["chat_prompts"][: args.gen_chat_prompts], texts["code_prompts"][: args.gen_code_prompts]
            half = len(cp) // 2
            kw = dict(max_new=args.gen_tokens, batch=args.gen_batch)
            gens = {
                "chat_greedy": generate(model, tok, cp[:half], chat=True, sample=False, seed=1, **kw),
                "chat_sample": generate(model, tok, cp[half:], chat=True, sample=True, seed=2, **kw),
                "code_greedy": generate(model, tok, kp[::2], chat=False, sample=False, seed=3, **kw),
                "code_sample": generate(model, tok, kp[1::2], chat=False, sample=True, seed=4, **kw),
            }
            (work / "generations.json").write_text(json.dumps(gens))
            log(f"generation: {sum(len(v) for v in gens.values())} texts in {time.time() - t0:.0f}s")
            gen_texts = [t for v in gens.values() for t in v]
            random.Random(args.seed + 1).shuffle(gen_texts)
            ids = pack(tok, gen_texts, L, 10**9)
        elif part == "code":
            ids = pack(tok, texts["code"], L, args.code_windows)
        else:
            ids = pack(tok, texts["docs"] + texts["hand"] * 4, L, args.doc_windows)
        log(f"windows: {part} {ids.shape[0]} x {L} tokens")
        n = ids.shape[0]
        top_i = torch.empty(n, L, args.topk, dtype=torch.int32)
        top_v = torch.empty(n, L, args.topk, dtype=torch.float16)
        t0 = time.time()
        with torch.no_grad():
            for i in range(0, n, args.teacher_batch):
                x = ids[i : i + args.teacher_batch].long()
                lp = torch.log_softmax(model(x).logits.float(), -1)
                v, j = lp.topk(args.topk, -1)
                top_i[i : i + len(x)] = j.int()
                top_v[i : i + len(x)] = v.half()
                if (i // args.teacher_batch) % 10 == 0:
                    done = i + len(x)
                    log(f"  teacher {part} {done}/{n} windows, {done * L / (time.time() - t0):.0f} tok/s")
        save_file({"ids": ids, "top_i": top_i, "top_v": top_v}, str(part_file(args, work, part)))
        log(f"teacher {part}: {n * L} positions in {time.time() - t0:.0f}s")


def load_data(args, work: Path) -> dict[str, torch.Tensor]:
    """All parts concatenated and shuffled with the fixed seed."""
    from safetensors.torch import load_file

    parts = [load_file(str(part_file(args, work, p))) for p in PARTS]
    d = {k: torch.cat([p[k] for p in parts]) for k in ("ids", "top_i", "top_v")}
    d["is_gen"] = torch.cat([torch.full((p["ids"].shape[0],), name == "gen") for name, p in zip(PARTS, parts)])
    perm = torch.randperm(d["ids"].shape[0], generator=torch.Generator().manual_seed(args.seed))
    return {k: v[perm] for k, v in d.items()}


def pca_embeddings(teacher_emb: torch.Tensor, d: int) -> torch.Tensor:
    """Project SmolLM2's (tied) embedding matrix onto its top-d principal directions, scaled to std 0.02*sqrt(2)."""
    E = teacher_emb.float()
    mu = E.mean(0, keepdim=True)
    _, _, V = torch.linalg.svd(E - mu, full_matrices=False)
    P = E @ V[:d].T  # keep the mean: it carries the frequency / bias direction
    return P * (0.03 / P.std())


def lr_at(args, frac: float, step: int) -> float:
    """Linear warmup over ``args.warmup`` steps, then cosine from ``args.lr`` to 10% of it as ``frac`` goes 0 -> 1."""
    return args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def kd_loss(logits: torch.Tensor, top_i: torch.Tensor, top_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy to the teacher's top-k distribution plus one bucket for the remaining tail mass.

    Returns (loss, greedy agreement of this batch)."""
    logq = torch.log_softmax(logits.float(), -1)
    p = top_v.float().exp()
    lq_top = logq.gather(-1, top_i.long())
    tail_p = (1 - p.sum(-1)).clamp_min(0)
    tail_q = (1 - lq_top.exp().sum(-1)).clamp_min(1e-6)
    loss = -(p * lq_top).sum(-1) - tail_p * tail_q.log()
    agree = (logq.argmax(-1) == top_i[..., 0].long()).float().mean()
    return loss.mean(), agree


def make_config(name: str, shape: dict | None = None):
    """LlamaConfig of draft ``name`` (or of ``shape``, a DRAFT_CONFIGS-style dict): SmolLM2's vocabulary and ids."""
    from transformers import LlamaConfig

    c = shape or DRAFT_CONFIGS[name]
    return LlamaConfig(
        vocab_size=49152, head_dim=c["hidden_size"] // c["num_attention_heads"], tie_word_embeddings=True,
        max_position_embeddings=8192, rope_parameters={"rope_theta": 100000.0, "rope_type": "default"},
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=2, hidden_act="silu", **c,
    )


def save_draft(model, out_dir: Path, meta: dict) -> None:
    """Write config + fp16 safetensors + generation config + training metadata (atomic per file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    tmp.mkdir(exist_ok=True)
    m16 = type(model)(model.config)
    m16.load_state_dict(model.state_dict())
    m16 = m16.half()
    m16.config.dtype = "float16"
    m16.save_pretrained(str(tmp), safe_serialization=True)
    (tmp / "training.json").write_text(json.dumps(meta, indent=1) + "\n")
    for f in tmp.iterdir():
        os.replace(f, out_dir / f.name)
    tmp.rmdir()


def train_draft(name: str, d: dict[str, torch.Tensor], args) -> None:
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    ids, top_i, top_v = d["ids"], d["top_i"], d["top_v"]
    n_val = max(4, ids.shape[0] // 50)
    cfg = make_config(name)
    if args.init_from:  # phase 2: continue from an earlier run's weights
        model = LlamaForCausalLM.from_pretrained(str(Path(args.init_from) / name), dtype=torch.float32)
        log(f"{name}: continuing from {Path(args.init_from) / name}")
    else:
        model = LlamaForCausalLM(cfg)
        from safetensors import safe_open

        with safe_open(str(bundled.resolve(bundled.TARGET) / "model.safetensors"), framework="pt") as f:
            temb = f.get_tensor("model.embed_tokens.weight")
        with torch.no_grad():
            model.model.embed_tokens.weight.copy_(pca_embeddings(temb, cfg.hidden_size))
        del temb
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, ffn {cfg.intermediate_size}, "
        f"{n_params / 1e6:.2f}M params; {ids.shape[0] - n_val} train / {n_val} val windows")
    decay = [p for n_, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n_, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))
    n_tr = ids.shape[0] - n_val
    gen_idx = n_val + torch.nonzero(d["is_gen"][n_val:]).flatten()
    g = torch.Generator().manual_seed(args.seed)
    budget = args.minutes * 60
    t0 = time.time()
    step, ema, ema_acc = 0, None, None
    out_dir = Path(args.out) / name
    last_ckpt = t0

    def evaluate() -> tuple[float, float]:
        model.eval()
        tot, acc = 0.0, 0.0
        with torch.no_grad():
            for i in range(0, n_val, args.batch):
                sl = slice(i, min(i + args.batch, n_val))
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    lg = model(ids[sl].long()).logits
                loss, a = kd_loss(lg, top_i[sl], top_v[sl])
                tot += loss.item() * (sl.stop - sl.start)
                acc += a.item() * (sl.stop - sl.start)
        model.train()
        return tot / n_val, acc / n_val

    # schedule by wall time: warmup then cosine to 10% over the budget
    while True:
        el = time.time() - t0
        if el > budget or (args.steps and step >= args.steps):
            break
        frac = el / budget if not args.steps else step / args.steps
        lr = lr_at(args, frac, step)
        for grp in opt.param_groups:
            grp["lr"] = lr
        if args.gen_weight > 0:  # draw this share of each batch from SmolLM2's own continuations
            pick_gen = torch.rand(args.batch, generator=g) < args.gen_weight
            b = torch.where(pick_gen, gen_idx[torch.randint(0, len(gen_idx), (args.batch,), generator=g)],
                            n_val + torch.randint(0, n_tr, (args.batch,), generator=g))
        else:
            b = n_val + torch.randint(0, n_tr, (args.batch,), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(ids[b].long()).logits
        loss, acc = kd_loss(logits, top_i[b], top_v[b])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        ema_acc = acc.item() if ema_acc is None else 0.95 * ema_acc + 0.05 * acc.item()
        if step % args.log_every == 0:
            log(f"{name} step {step} lr {lr:.2e} loss {ema:.3f} agree {ema_acc:.3f} "
                f"({step * args.batch * args.seq_len / (time.time() - t0):.0f} tok/s)")
        if args.ckpt_minutes and time.time() - last_ckpt > args.ckpt_minutes * 60:
            save_draft(model, out_dir, {"step": step, "partial": True})
            last_ckpt = time.time()
            log(f"{name}: checkpoint written at step {step}")
    vl, va = evaluate()
    wall = time.time() - t0
    meta = {
        "name": name, "config": DRAFT_CONFIGS[name], "parameters": n_params, "steps": step, "batch": args.batch,
        "seq_len": args.seq_len, "tokens_seen": step * args.batch * args.seq_len, "train_windows": n_tr,
        "wall_seconds": round(wall), "lr": args.lr, "topk": args.topk, "seed": args.seed, "bf16_autocast": args.bf16,
        "init_from": args.init_from or None, "gen_weight": args.gen_weight, "warmup": args.warmup,
        "final_train_loss_ema": round(ema, 4), "val_kd_loss": round(vl, 4), "val_greedy_agreement": round(va, 4),
    }
    save_draft(model, out_dir, meta)
    log(f"{name}: done, {step} steps in {wall:.0f}s, val loss {vl:.3f}, val agreement {va:.3f} -> {out_dir}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", default="draft-s,draft-m", help="comma-separated: draft-s, draft-m")
    ap.add_argument("--stage", choices=["data", "all"], default="all", help="data: only build the teacher files")
    ap.add_argument("--parts", default="gen,code,docs", help="which teacher files to build in this process")
    ap.add_argument("--out", default=str(REPO / "spectune" / "models" / "drafts"))
    ap.add_argument("--work-dir", default=str(bundled.cache_root() / "train_drafts"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="1 avoids OpenMP stalls on shared cores")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--topk", type=int, default=32)
    ap.add_argument("--code-chars", type=int, default=3_000_000, help="stdlib source characters to read")
    ap.add_argument("--code-windows", type=int, default=500)
    ap.add_argument("--doc-windows", type=int, default=120)
    ap.add_argument("--corpus", choices=["v1", "v2"], default="v1",
                    help="instruction prompts: v1 (the shipped drafts) or v2 (794 prompts; see the model cards)")
    ap.add_argument("--gen-tokens", type=int, default=96)
    ap.add_argument("--gen-batch", type=int, default=16)
    ap.add_argument("--gen-code-prompts", type=int, default=64)
    ap.add_argument("--gen-chat-prompts", type=int, default=160)
    ap.add_argument("--workload-prompts", action=argparse.BooleanOptionalAction, default=True,
                    help="also continue the workloads' calibration prompts (as the shipped drafts did)")
    ap.add_argument("--teacher-batch", type=int, default=16)
    ap.add_argument("--teacher-dtype", default="bfloat16",
                    help="SmolLM2 weights for generation + top-k pass (bfloat16 pays off only with AVX512-BF16/AMX; "
                         "use float32 elsewhere)")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="bf16 autocast for training (10x slower without AVX512-BF16/AMX: use --no-bf16 there)")
    ap.add_argument("--minutes", type=float, default=20.0, help="wall-time budget per draft")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps instead of the time budget")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--init-from", default="", help="phase 2: start from the drafts in this directory")
    ap.add_argument("--gen-weight", type=float, default=0.0, help="share of each batch drawn from SmolLM2 generations")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0, help="write a partial checkpoint this often (0: never)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    log(f"args: {vars(args)}")
    parts = args.parts.split(",")
    stage_data(args, work, parts)
    if args.stage == "data":
        return
    data = load_data(args, work)
    for name in args.drafts.split(","):
        train_draft(name.strip(), data, args)


if __name__ == "__main__":
    main()
