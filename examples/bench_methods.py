"""Benchmark: tokens/s of standard vs sd vs naive-cos vs cos on one model set and prompt set, per batch size.

Repeats are interleaved (method order rotates every repeat) so machine noise does not bias one method; we
report the median over repeats of each method's aggregate tokens/s, the spread (min-max), the speedup over
``standard`` measured side by side (same repeat, same batch size), mean accepted length and model calls per
output token. With batch size B the first max(B, --prompts) held-out prompts run in batches of B.

Example:
    python examples/bench_methods.py --models draft-s,smollm2-135m --combine we:0.5,0.5 --gamma 5,1 \
        --workload mix --prompts 4 --max-new-tokens 48 --repeats 3 --batch-sizes 1,4,16
"""
from __future__ import annotations

import statistics

import click
import pandas as pd

from spectune.api import build_decoder, encode
from spectune.models import load_models
from spectune.workloads import load_workload

METHODS = ["standard", "sd", "naive-cos", "cos"]


@click.command()
@click.option("--models", default="draft-s,smollm2-135m", show_default=True)
@click.option("--combine", default="target", show_default=True)
@click.option("--gamma", default=None, help="per-model proposal lengths (default 5,1,...)")
@click.option("--methods", default=",".join(METHODS), show_default=True)
@click.option("--workload", default="mix", show_default=True)
@click.option("--prompts", "n_prompts", default=4, show_default=True, help="held-out prompts used")
@click.option("--max-new-tokens", default=48, show_default=True)
@click.option("--temperature", default=0.0, show_default=True)
@click.option("--repeats", default=3, show_default=True)
@click.option("--batch-sizes", default="1", show_default=True, help="comma-separated batch sizes")
@click.option("--csv", "csv_path", default=None, help="also write the per-repeat rows here")
def main(models, combine, gamma, methods, workload, n_prompts, max_new_tokens, temperature, repeats, batch_sizes,
         csv_path):
    loaded = load_models(models.split(","))
    tok = loaded[-1].tokenizer
    heldout = load_workload(workload).heldout
    methods = methods.split(",")
    sizes = [int(b) for b in batch_sizes.split(",")]
    decoders = {m: build_decoder(loaded, method=m, combine=combine, gamma=gamma, temperature=temperature)
                for m in methods}
    decoders[methods[0]].generate(encode(tok, heldout[0]), 4, 0)  # warm-up (allocator, first-call overheads)
    rows = []
    for rep in range(repeats):
        for b in sizes:
            prompts = [encode(tok, p) for p in (heldout * 4)[: max(b, n_prompts)]]
            order = methods[rep % len(methods):] + methods[: rep % len(methods)]
            for m in order:
                stats = None
                for first in range(0, len(prompts), b):
                    chunk = prompts[first : first + b]
                    _, _, st = decoders[m].generate_batch(chunk, max_new_tokens, list(range(first, first + len(chunk))))
                    stats = st if stats is None else (stats.merge(st) or stats)
                rows.append(dict(repeat=rep, batch_size=b, method=m, tokens=stats.output_tokens,
                                 seconds=stats.wall_seconds, tok_s=stats.tokens_per_second,
                                 mean_accepted_length=stats.mean_accepted_length,
                                 calls_per_token=stats.calls_per_token, acceptance_rate=stats.acceptance_rate))
    df = pd.DataFrame(rows)
    if csv_path:
        df.to_csv(csv_path, index=False)
    out = []
    for b in sizes:
        # speedup per repeat (same repeat and batch size = measured side by side), then the median over repeats
        db = df[df.batch_size == b]
        base = db[db.method == "standard"].set_index("repeat").tok_s if "standard" in methods else None
        for m in methods:
            d = db[db.method == m].set_index("repeat")
            speed = (d.tok_s / base).tolist() if base is not None else [float("nan")]
            out.append(dict(batch=b, method=m, tok_s_median=statistics.median(d.tok_s), tok_s_min=d.tok_s.min(),
                            tok_s_max=d.tok_s.max(), speedup_vs_standard=statistics.median(speed),
                            mean_accepted_length=d.mean_accepted_length.iloc[0],
                            calls_per_token=d.calls_per_token.iloc[0], acceptance_rate=d.acceptance_rate.iloc[0]))
    click.echo(f"models={models} combine={combine} gamma={gamma or 'default'} T={temperature} "
               f"workload={workload} max_new_tokens={max_new_tokens} repeats={repeats}")
    click.echo(pd.DataFrame(out).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
