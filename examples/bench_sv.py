"""Benchmark: Speculative Verification vs SD vs the target alone, per batch size (paper §7 on this hardware).

Reports, from the calibrated profile, the information gain of the companion bins, and measured side by side
(interleaved repeats, medians): goodput of target-alone (`standard`, r = target), `sd` and `sv`, and the
fraction of verification spent on drafts that were not accepted:
    wasted = (drafts sent to the verifier - drafts accepted) / drafts sent
(sd sends every draft; sv sends only the first k* of each step).

Example:
    python examples/bench_sv.py --models draft-s,draft-m,smollm2-135m --batch-sizes 1,8,32 --gamma 5
"""
from __future__ import annotations

import statistics

import click
import pandas as pd

from spectune.decoder import as_profile, build_decoder, encode_prompt, find_profile
from spectune.models import load_models
from spectune.workloads import load_workload


@click.command()
@click.option("--models", default="draft-s,draft-m,smollm2-135m", show_default=True,
              help="draft, companion, target")
@click.option("--gamma", default=5, show_default=True)
@click.option("--batch-sizes", default="1,8,32", show_default=True)
@click.option("--workload", default="mix", show_default=True)
@click.option("--max-new-tokens", default=32, show_default=True)
@click.option("--repeats", default=3, show_default=True)
@click.option("--profile", "profile_path", default=None, help="default: the profile found for these models")
@click.option("--dtype", default="auto", show_default=True, help="as spectune generate --dtype")
def main(models, gamma, batch_sizes, workload, max_new_tokens, repeats, profile_path, dtype):
    from spectune.machine import describe, here
    from spectune.models.loading import dtype_line

    names = models.split(",")
    loaded = load_models(names, dtype=dtype)
    click.echo(f"machine: {describe(here())}; {dtype_line(loaded)}")
    dtypes = [m.dtype for m in loaded]
    prof = find_profile(names, "cpu", dtypes) if profile_path is None else as_profile(profile_path, "cpu", dtypes)
    ig = prof.information_gain(names[0], names[1], names[2])
    click.echo(f"information gain of (s, a) bins: {ig['info_gain_frac']:.1%} of H(beta) "
               f"(bias-corrected {ig['info_gain_frac_corrected']:.1%}; H(beta)={ig['h_beta']:.3f} bits, "
               f"n={ig['n']})")
    tok = loaded[-1].tokenizer
    heldout = load_workload(workload).heldout
    g = [gamma, 1, 1]
    decs = {
        "target-alone": build_decoder(loaded, method="standard", combine="target", gamma=g, ignore_eos=True),
        "sd": build_decoder(loaded, method="sd", combine="target", gamma=g, ignore_eos=True),
        "sv": build_decoder(loaded, method="sv", combine="target", gamma=g, profile=prof, ignore_eos=True),
    }
    rows = []
    for rep in range(repeats):
        for b in [int(x) for x in batch_sizes.split(",")]:
            prompts = [encode_prompt(tok, p) for p in (heldout * 8)[:b]]
            names_ = list(decs)
            for m in names_[rep % 3:] + names_[: rep % 3]:
                _, _, st = decs[m].generate_batch(prompts, max_new_tokens, list(range(b)))
                d0 = st.models[0]
                sent = d0.proposed + st.discarded_tokens
                rows.append(dict(repeat=rep, batch=b, method=m, tok_s=st.tokens_per_second,
                                 wasted=(sent - d0.accepted) / sent if sent else float("nan"),
                                 mean_verified=(sum(k * v for k, v in st.verified_len_hist.items())
                                                / max(1, sum(st.verified_len_hist.values()))) if m == "sv" else gamma,
                                 predicted_acc=st.predicted_accepted, realised_acc=st.realised_accepted))
    df = pd.DataFrame(rows)
    out = []
    for (b, m), d in df.groupby(["batch", "method"], sort=False):
        base = df[(df.batch == b) & (df.method == "target-alone")].set_index("repeat").tok_s
        out.append(dict(batch=b, method=m, tok_s=statistics.median(d.tok_s), tok_s_min=d.tok_s.min(),
                        tok_s_max=d.tok_s.max(), vs_target=statistics.median(d.set_index("repeat").tok_s / base),
                        wasted_verification=d.wasted.iloc[0], mean_verified_len=d.mean_verified.iloc[0],
                        sv_pred_vs_real=(f"{d.predicted_acc.iloc[0]:.1f}/{d.realised_acc.iloc[0]}"
                                         if m == "sv" else "")))
    click.echo(f"models={models} gamma={gamma} workload={workload} max_new_tokens={max_new_tokens} "
               f"repeats={repeats} (greedy)")
    click.echo(pd.DataFrame(out).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
