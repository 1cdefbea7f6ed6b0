"""spectune's runtimes side by side (eager vs compiled, or eager vs llamacpp): forward latency L(b, k) and
decoding tok/s.

1. L(b, k): for every model, batch size b and new-token count k, one runner per (runtime, b) holds ``--ctx``
   prompt tokens per row; a timed forward feeds k tokens to every row and is rolled back. ``L`` is the
   runner's own timing (wall clock to a synchronize: what calibration and the decode loop price); ``wall``
   adds the host work around it (inputs, copying the logits to the CPU). The compiled runtime compiles (and on
   CUDA captures) every bucket first; that time is printed apart, never in a timing.
2. tok/s of ``spectune generate``'s decoder: the target alone (``standard``), ``sd`` (draft + target, gamma
   ``--gamma``), the prompt lookup ``ngram:1,3`` (K 4) and, over the weighted ensemble ``we:0.5,0.5``, standard
   beside ``cos`` (gamma 2,1) at each ``--gen-batch-sizes``, greedy, EOS ignored, on held-out prompts of
   ``--workload``. Every (runtime, method, batch) is decoded once untimed (compile, warm-up), then ``--repeats``
   times.

Repeats are interleaved (every cell once per round, in a shuffled order) and medians reported. The machine's
identity (spectune.machine) is printed first; ``--json-out`` keeps everything.

``--random-weights``: every model is built from its architecture with random weights (SmolLM2-135M's config is
written below; the drafts' configs come from the repository) -- a forward's time does not depend on the weights'
values, so L(b, k) and the target-alone tok/s are exact, but acceptance is not, so ``sd`` is skipped. For a
machine that cannot receive SmolLM2's 98 MB of weights (docs/gpu.md).

``--runtimes A,B``: the two compared (default eager,compiled; ``eager,llamacpp`` needs llama-cpp-python and the
models' GGUFs, which ``spectune.decoder.runner_models`` converts once and caches).

Examples:
    python examples/runtime_compare.py --device cpu --json-out /tmp/runtime-cpu.json
    python examples/runtime_compare.py --runtimes eager,llamacpp --json-out /tmp/runtime-llamacpp.json
    python examples/runtime_compare.py --device cuda --batch-sizes 1,8,32 --json-out $OUT/runtime-h100.json
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectune.decoder import build_decoder, encode_prompt, runner_models  # noqa: E402
from spectune.decoding.runtime import make_runner  # noqa: E402
from spectune.decoding.static_cache import batch_bucket, k_bucket  # noqa: E402
from spectune.machine import describe, here  # noqa: E402
from spectune.models import load_models  # noqa: E402
from spectune.workloads import load_workload  # noqa: E402

SMOLLM2_135M = dict(  # SmolLM2-135M-Instruct as spectune's bundled conversion declares it
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
    rope_parameters={"rope_theta": 100000.0, "rope_type": "default"}, bos_token_id=1, eos_token_id=2, pad_token_id=2)


def random_models(names: list[str], dtype: str, device: str) -> list:
    """LoadedModels of these bundled names with random weights (their architecture and the drafts' tokenizer)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from spectune.machine import here as ident_here, resolve_dtype
    from spectune.models import LoadedModel

    drafts = REPO / "spectune" / "models" / "drafts"
    tok = AutoTokenizer.from_pretrained(str(drafts / "tokenizer"))
    out = []
    for i, name in enumerate(names):
        cfg = SMOLLM2_135M if name == "smollm2-135m" else json.loads((drafts / name / "config.json").read_text())
        dt, why = resolve_dtype(dtype, "bfloat16", ident_here(device))
        torch.manual_seed(i)
        cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "dtype", "transformers_version")}
        model = LlamaForCausalLM(LlamaConfig(**cfg)).to(device=device, dtype=getattr(torch, dt)).eval()
        out.append(LoadedModel(name, model, tok, f"random weights; {why}"))
    return out


def ints(text: str) -> list[int]:
    """Comma-separated integers."""
    return [int(x) for x in text.split(",") if x.strip()]


def sync(device: str) -> None:
    """Wait for the device (CUDA): a wall-clock timing starts with nothing queued."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def latency_cells(lm, name: str, args) -> list[dict]:
    """Median L and wall per (runtime, b, k) of one model, compile seconds per (runtime, b)."""
    from spectune.decoding.static_cache import StaticRunner

    gen = torch.Generator().manual_seed(0)
    model = lm.model
    vocab = model.config.vocab_size
    runners, compile_s = {}, {}
    for rt in args.runtimes:
        what = runner_models([lm], rt)[0]  # the module, or its GGUF for llamacpp
        for b in args.batch_sizes:
            if rt != "compiled":
                run = make_runner(rt, what, b, args.device, max_len=args.ctx + max(args.ks))
            else:  # one store shape for every b: the graphs compile once and are shared
                run = StaticRunner(model, b, args.device, max_len=args.ctx + max(args.ks),
                                   rows_cap=max(args.batch_sizes))
                t0 = time.perf_counter()
                run.warmup(batch_buckets=[batch_bucket(b)], k_buckets=sorted({k_bucket(k) for k in args.ks}))
                compile_s[rt, b] = time.perf_counter() - t0
                print(f"  {name}: compiled for b = {b} in {compile_s[rt, b]:.1f} s", flush=True)
            prompt = torch.randint(0, vocab, (b, args.ctx), generator=gen)
            run.forward({r: prompt[r].tolist() for r in range(b)})
            runners[rt, b] = run
    feeds = {(b, k): torch.randint(0, vocab, (b, k), generator=gen).tolist() for b in args.batch_sizes for k in args.ks}
    cells = [(rt, b, k) for rt in args.runtimes for b in args.batch_sizes for k in args.ks]
    times: dict[tuple, list] = {c: [] for c in cells}
    rng = random.Random(0)
    for rep in range(args.warmup + args.repeats):
        rng.shuffle(cells)
        for rt, b, k in cells:
            run = runners[rt, b]
            before, comp = run.seconds, getattr(run, "compile_seconds", 0.0)
            sync(args.device)
            t0 = time.perf_counter()
            run.forward(dict(enumerate(feeds[b, k])))
            wall = time.perf_counter() - t0
            for r in range(b):
                run.rollback(r, args.ctx)
            if rep >= args.warmup and getattr(run, "compile_seconds", 0.0) == comp:
                times[rt, b, k].append((run.seconds - before, wall))
    out = []
    for (rt, b, k), ts in sorted(times.items()):
        out.append(dict(model=name, runtime=rt, batch=b, k=k, samples=len(ts),
                        L_ms=1e3 * statistics.median(t for t, _ in ts) if ts else float("nan"),
                        wall_ms=1e3 * statistics.median(w for _, w in ts) if ts else float("nan"),
                        compile_s=compile_s.get((rt, b), 0.0)))
    return out


def generate_cells(loaded, args) -> list[dict]:
    """Median tok/s per (runtime, method, batch) of the decoder, compile seconds of the untimed first run."""
    draft, target = loaded
    tok = target.tokenizer
    pool = [encode_prompt(tok, p) for p in load_workload(args.workload).heldout]
    configs = {"standard": ([target], dict(method="standard"))}
    if not args.random_weights:  # random weights: acceptance means nothing
        configs |= {"sd": ([draft, target], dict(method="sd", gamma=[args.gamma, 1])),
                    "ngram:1,3": ([target], dict(method="sd", gamma=[4], proposer="ngram:1,3")),
                    "we standard": ([draft, target], dict(method="standard", combine="we:0.5,0.5")),
                    "we cos": ([draft, target], dict(method="cos", combine="we:0.5,0.5", gamma=[2, 1]))}
    cells = [(rt, m, b) for rt in args.runtimes for m in configs for b in args.gen_batch_sizes]
    decs, compile_s, tokens = {}, {}, {}
    for rt, method, b in sorted(cells, key=lambda c: -c[2]):  # largest batch first: smaller ones reuse its store
        models, kw = configs[method]
        dec = build_decoder(models, ignore_eos=True, device=args.device, runtime=rt, **kw)
        ids = [pool[i % len(pool)] for i in range(b)]
        t0 = time.perf_counter()
        tokens[rt, method, b] = dec.generate_batch(ids, args.new_tokens, list(range(b)))[0]
        compile_s[rt, method, b] = time.perf_counter() - t0
        decs[rt, method, b] = (dec, ids)
    rates: dict[tuple, list[float]] = {c: [] for c in cells}
    rng = random.Random(1)
    for _ in range(args.repeats):
        rng.shuffle(cells)
        for c in cells:
            dec, ids = decs[c]
            _, _, st = dec.generate_batch(ids, args.new_tokens, list(range(len(ids))))
            rates[c].append(st.output_tokens / st.wall_seconds)
    return [dict(runtime=rt, method=m, batch=b, tok_s=statistics.median(rates[rt, m, b]),
                 tok_s_min=min(rates[rt, m, b]), tok_s_max=max(rates[rt, m, b]),
                 first_run_s=compile_s[rt, m, b], **agreement(tokens, rt, m, b, args.runtimes[0]))
            for rt, m, b in sorted(rates)]


def agreement(tokens: dict, rt: str, method: str, b: int, base: str) -> dict:
    """Greedy tokens of one cell (its untimed first run) against the baseline runtime's same cell and against
    the target alone (``standard``; ``we standard`` for CoS over the ensemble) on its own runtime: the position
    of the first differing token over the batch's rows, or None where every row is identical."""
    def first_diff(a: list[list[int]], o: list[list[int]]) -> int | None:
        at = [next((i for i, (x, y) in enumerate(zip(ra, ro)) if x != y), None) for ra, ro in zip(a, o)]
        return min((i for i in at if i is not None), default=None)

    ref = "we standard" if method.startswith("we ") else "standard"
    mine = tokens[rt, method, b]
    return dict(diff_vs_base=first_diff(mine, tokens[base, method, b]),
                diff_vs_ref=first_diff(mine, tokens[rt, ref, b]))


def report(lat: list[dict], gen: list[dict], runtimes: list[str]) -> None:
    """The two tables, the second runtime beside the first (the baseline)."""
    if lat:
        _report_latency(lat, *runtimes)
    if gen:
        _report_generate(gen, *runtimes)


def _report_latency(lat: list[dict], a: str, o: str) -> None:
    """L(b, k) per model, runtime ``o`` beside the baseline ``a``, and the compile time per batch size."""
    print("\nL(b, k) in ms (median; wall = with host work and the logits' copy to the CPU)")
    print(f"{'model':14} {'b':>3} {'k':>3} {a + ' L':>11} {o + ' L':>11} {'speedup':>8} "
          f"{a + ' wall':>12} {o + ' wall':>12}")
    by = {(r["model"], r["runtime"], r["batch"], r["k"]): r for r in lat}
    for (name, rt, b, k), r in sorted(by.items()):
        if rt != a:
            continue
        c = by[name, o, b, k]
        print(f"{name:14} {b:>3} {k:>3} {r['L_ms']:>11.2f} {c['L_ms']:>11.2f} {r['L_ms'] / c['L_ms']:>7.2f}x "
              f"{r['wall_ms']:>12.2f} {c['wall_ms']:>12.2f}")
    comp = {(r["model"], r["batch"]): r["compile_s"] for r in lat if r["runtime"] == "compiled"}
    if comp:
        print("compile + capture, s (apart from every timing): "
              + ", ".join(f"{n} b={b}: {s:.1f}" for (n, b), s in sorted(comp.items())))


def _report_generate(gen: list[dict], a: str, o: str) -> None:
    """tok/s per method and batch size, runtime ``o`` beside the baseline ``a``, and the greedy tokens' agreement."""
    print("\ndecoder tok/s (median of interleaved repeats [min-max]; first run = compile + warm-up, untimed)")
    print(f"{'method':12} {'b':>3} {a:>20} {o:>20} {'speedup':>8} {'1st run s':>14}  greedy tokens")
    g = {(r["runtime"], r["method"], r["batch"]): r for r in gen}
    span = lambda r: f"{r['tok_s']:.1f} [{r['tok_s_min']:.1f}-{r['tok_s_max']:.1f}]"  # noqa: E731
    for (rt, m, b), r in sorted(g.items()):
        if rt == a:
            c = g[o, m, b]
            print(f"{m:12} {b:>3} {span(r):>20} {span(c):>20} {c['tok_s'] / r['tok_s']:>7.2f}x "
                  f"{r['first_run_s']:>6.1f} / {c['first_run_s']:.1f}  {_agree(r, c, a, o)}")


def _agree(r: dict, c: dict, a: str, o: str) -> str:
    """Where the greedy tokens first differ (position), or '=' where they are identical."""
    pos = lambda d: "=" if d is None else f"@{d}"  # noqa: E731
    return f"{o} vs {a} {pos(c.get('diff_vs_base'))}; vs target alone: {a} {pos(r.get('diff_vs_ref'))}, " \
        f"{o} {pos(c.get('diff_vs_ref'))}"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runtimes", default="eager,compiled", help="the two runtimes compared (eager,llamacpp)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--models", default="smollm2-135m", help="models whose L(b, k) is measured ('' skips it)")
    ap.add_argument("--batch-sizes", type=ints, default=None, help="[default: 1,8 on CPU; 1,8,32 on CUDA]")
    ap.add_argument("--ks", type=ints, default=[1, 2, 4, 8, 16])
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds before the repeats")
    ap.add_argument("--pair", default="draft-s,smollm2-135m", help="draft,target of the tok/s part ('' skips it)")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--gen-batch-sizes", type=ints, default=[1, 8])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--workload", default="mix")
    ap.add_argument("--random-weights", action="store_true", help="models with random weights (timing only)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    loaded: dict[str, object] = {}  # each model loaded once: the decoders reuse the timed runners' engines

    def load(names: list[str]) -> list:
        todo = [n for n in names if n not in loaded]
        if todo:
            new = random_models(todo, args.dtype, args.device) if args.random_weights else \
                load_models(todo, dtype=args.dtype, device=args.device)
            loaded.update(zip(todo, new))
        return [loaded[n] for n in names]

    args.batch_sizes = args.batch_sizes or ([1, 8, 32] if args.device.startswith("cuda") else [1, 8])
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    ident = here(args.device)
    print(f"machine: {describe(ident)}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    lat = []
    for lm in load(args.models.split(",")) if args.models else []:
        print(f"timing {lm.name} ({lm.dtype}) ...", flush=True)
        lat += latency_cells(lm, lm.name, args)
    res = dict(machine=ident, args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               latency=lat, generate=[])
    report(lat, [], args.runtimes)
    save(res, args.json_out)  # the latency table is kept even if the decoding part is cut short
    if args.pair:
        pair = load(args.pair.split(","))
        print(f"decoding with {args.pair} ...", flush=True)
        res["generate"] = generate_cells(pair, args)
        report([], res["generate"], args.runtimes)
        save(res, args.json_out)
    return res


def save(res: dict, path: Path | None) -> None:
    """Write the results so far (JSON) to ``path``, if given."""
    if path:
        path.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
