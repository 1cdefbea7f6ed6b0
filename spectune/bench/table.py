"""The bench table (rich) and plots (matplotlib): goodput per run, speedups, acceptance, efficiency."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from spectune.outputs import save_figure, target_dir


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def table(summary: pd.DataFrame, title: str = "spectune bench") -> Any:
    from rich.markup import escape  # a label's brackets would be read as a style tag
    from rich.table import Table

    t = Table(title=title)
    for col, just in [("b", "right"), ("T", "right"), ("run", "left"), ("tok/s", "right"), ("decode tok/s", "right"),
                      ("spread", "right"),
                      ("x standard", "right"), ("x target", "right"), ("accepted len", "right"),
                      ("calls/tok", "right"), ("alpha", "right"), ("c", "right"), ("thm x", "right"),
                      ("efficiency", "right"), ("loop eff.", "right")]:
        t.add_column(col, justify=just)
    for r in summary.itertuples():
        t.add_row(str(r.batch_size), f"{r.temperature:g}", escape(r.label), _f(r.goodput, "{:.1f}"),
                  _f(r.decode_goodput, "{:.1f}"), _f(r.spread, "{:.0%}"),
                  _f(r.speedup_vs_standard), _f(r.speedup_vs_target), _f(r.mean_accepted_length),
                  _f(r.calls_per_token), _f(r.alpha), _f(r.c, "{:.3f}"), _f(r.thm_speedup), _f(r.efficiency),
                  _f(r.loop_efficiency))
    return t


def print_table(summary: pd.DataFrame, title: str = "spectune bench") -> None:
    from rich.console import Console

    console = Console(width=200)
    console.print(table(summary, title))
    for line in hf_draft_lines(summary):
        console.print(line, highlight=False)


def hf_draft_lines(summary: pd.DataFrame) -> list[str]:
    """What HF really drafted per step in each HF assisted / prompt-lookup row (steps by draft length, from hooks)."""
    if "draft_lengths" not in summary:
        return []
    rows = summary[summary["kind"].isin(["hf-assisted", "hf-lookup"])]
    return [f"b={r.batch_size} T={r.temperature:g} {r.label}: steps by draft length {r.draft_lengths}"
            for r in rows.itertuples() if isinstance(r.draft_lengths, str) and r.draft_lengths]


def _save(fig: Any, path: Path, force: bool) -> Path:
    fig.tight_layout()
    return save_figure(fig, path, force, dpi=120)


def plot(summary: pd.DataFrame, out_dir: str | Path, force: bool = False) -> list[Path]:
    """speedup-vs-gamma per method and batch size; measured vs theorem speedup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = target_dir(out_dir, "--plot")
    d.mkdir(parents=True, exist_ok=True)
    files = []
    spec = summary[(summary["kind"] == "spectune") & (summary["method"] != "standard")].copy()
    if not spec.empty:
        spec["g0"] = spec["gamma"].map(lambda g: int(str(g).split(",")[0]))
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (m, b, t), g in spec.groupby(["method", "batch_size", "temperature"]):
            g = g.sort_values("g0")
            ax.plot(g["g0"], g["speedup_vs_standard"], marker="o", label=f"{m} b={b} T={t:g}")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("gamma (first model's proposal length)")
        ax.set_ylabel("measured speedup vs standard")
        ax.legend(fontsize=7)
        ax.set_title("spectune bench: speedup vs gamma")
        files.append(_save(fig, d / "bench_speedup_vs_gamma.png", force))
        ok = spec[spec["thm_speedup"].map(lambda x: isinstance(x, float) and math.isfinite(x))]
        if not ok.empty:
            fig, ax = plt.subplots(figsize=(5, 5))
            for m, g in ok.groupby("method"):
                ax.scatter(g["thm_speedup"], g["speedup_vs_standard"], label=f"{m} (theorem)")
                ax.scatter(g["renewal_speedup"], g["speedup_vs_standard"], marker="x", label=f"{m} (renewal, run L(k))")
            lim = [0, max(1.5, float(ok[["thm_speedup", "speedup_vs_standard", "renewal_speedup"]].max().max()) * 1.1)]
            ax.plot(lim, lim, color="grey", lw=0.8, ls="--")
            ax.set_xlim(lim)
            ax.set_ylim(lim)
            ax.set_xlabel("predicted speedup (alpha, c from the same run)")
            ax.set_ylabel("measured speedup")
            ax.legend(fontsize=7)
            ax.set_title("decoder efficiency")
            files.append(_save(fig, d / "bench_efficiency.png", force))
    return files
