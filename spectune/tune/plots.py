"""``recommend --plot DIR``: predicted speedup vs gamma per method, and the Pareto front of the study."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from spectune.config import DecodeConfig
from spectune.outputs import save_figure
from spectune.tune.search import feasible_trials, pareto_trials


def speedup_vs_gamma(tuner: Any, study: optuna.Study, batch_size: int) -> dict[str, list[tuple[int, float]]]:
    """Per method: (gamma of the default proposer, predicted speedup over standard) at ``batch_size``, with the
    proposer and the other models' gamma of the method's best trial."""
    from dataclasses import replace

    space, cm = tuner.space, tuner.cost
    best: dict[str, DecodeConfig] = {}
    for t in sorted(feasible_trials(study), key=lambda t: -t.values[0]):
        m = t.params.get("method")
        if m and m != "standard" and m not in best:
            best[m] = DecodeConfig.from_dict(t.user_attrs["config"])
    std = cm.predict(space.config("standard", space.models[0], None, batch_size)).goodput
    out: dict[str, list[tuple[int, float]]] = {}
    for label, cfg in best.items():
        pts = []
        for g in range(1, space.gamma_hi + 1):
            c = replace(cfg, gamma=(g, *cfg.gamma[1:]), batch_size=batch_size)
            pts.append((g, cm.predict(c).goodput / std))
        out[label] = pts
    return out


def plot_recommendation(rec: Any, tuner: Any, study: optuna.Study, out_dir: Path, force: bool = False) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    b = rec.chosen.config.batch_size
    curves = speedup_vs_gamma(tuner, study, b)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in curves.items():
        ax.plot([g for g, _ in pts], [s for _, s in pts], marker="o", label=label)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="standard")
    ax.set_xlabel("gamma of the default proposer")
    ax.set_ylabel("predicted speedup vs standard")
    ax.set_title(f"predicted speedup vs gamma (batch {b})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(save_figure(fig, out_dir / "speedup_vs_gamma.png", force, dpi=110))

    ts = feasible_trials(study)
    front = pareto_trials(study)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([t.user_attrs["prediction"]["latency_per_token"] * 1e3 for t in ts],
               [t.user_attrs["prediction"]["goodput"] for t in ts], s=8, alpha=0.4, label="trials")
    fr = sorted(front, key=lambda t: t.user_attrs["prediction"]["latency_per_token"])
    ax.plot([t.user_attrs["prediction"]["latency_per_token"] * 1e3 for t in fr],
            [t.user_attrs["prediction"]["goodput"] for t in fr], color="C3", marker="o", label="Pareto front")
    ax.set_xlabel("predicted latency per token (ms)")
    ax.set_ylabel("predicted goodput (tokens/s)")
    ax.set_title("goodput vs per-request latency")
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(save_figure(fig, out_dir / "pareto.png", force, dpi=110))
    return files
