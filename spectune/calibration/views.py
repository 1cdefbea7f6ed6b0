"""Human-readable views of a profile: ``summary`` (text for ``spectune profile show``) and ``plot`` (PNGs)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from spectune.calibration.hardware import describe
from spectune.outputs import save_figure, target_dir
from spectune.profile import Profile


def _short(name: str) -> str:
    return Path(name).name or name


def _mid_ctx(prof: Profile) -> int | None:
    cs = sorted(prof.latency["ctx"].unique())
    return int(cs[len(cs) // 2]) if cs else None


def _fmt_table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    return ["  " + "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [head] + rows]


def _compile_note(meta: dict) -> str:
    """' (compiling N s, not in any latency)' for a profile of the compiled runtime, else ''."""
    stage = (meta.get("stages") or {}).get("compile")
    sec = stage.get("seconds") if isinstance(stage, dict) else None
    ok = isinstance(sec, (int, float)) and not isinstance(sec, bool)
    return f" (compiling {sec:.0f} s, not in any latency)" if ok else ""


def summary(prof: Profile) -> str:
    """c per pair and batch size, L(b, k), alpha per pair and workload, SV information gain."""
    ctx = _mid_ctx(prof)
    out = _header(prof) + _cost_lines(prof, ctx) + _latency_lines(prof, ctx) + _acceptance_lines(prof)
    return "\n".join(out + _gain_lines(prof))


def _header(prof: Profile) -> list[str]:
    """The profile, its machine, models and settings, one line each."""
    m = prof.meta
    st = prof.settings
    hw = prof.hardware
    return [f"profile {prof.path}  ({m.get('schema')}, finished {m.get('finished', '?')}, "
            f"calibration {m.get('total_seconds', float('nan')):.0f} s)",
            f"hardware: {describe(hw)}  (torch {m.get('software', {}).get('torch')}, {hw.get('torch_threads')} "
            f"threads, load average {hw.get('load_avg_start')} -> {hw.get('load_avg_end')})",
            "models: " + ", ".join(f"{_short(x['name'])} ({x['dtype'].replace('torch.', '')}, "
                                   f"{x['parameters'] / 1e6:.1f}M, {x['hash'][:8]})" for x in m.get("models", [])),
            f"settings: combine {st.get('combine')}; workloads {', '.join(map(_short, st.get('workloads', [])))}; "
            f"temperature {st.get('acceptance', {}).get('temperature')}; "
            f"gamma_max {st.get('acceptance', {}).get('gamma_max')}; runtime {st.get('runtime', 'eager')}"
            + _compile_note(m)] + ([f"latency: {prof.latency_caveat}"] if prof.latency_caveat else [])


def _cost_lines(prof: Profile, ctx: int | None) -> list[str]:
    """c(b) per ordered pair at the middle context."""
    cost = prof.cost
    if cost.empty:
        return []
    out = ["", f"cost coefficient c(b) = L_proposer(b, k=1) / L_verifier(b, k=1)  [ctx {ctx}]"]
    sel = cost[cost["ctx"] == ctx]
    bs = sorted(sel["batch"].unique())
    rows = [[f"{_short(p)} -> {_short(v)}"] + [f"{g.set_index('batch')['c'].get(b, np.nan):.3f}" for b in bs]
            for (p, v), g in sel.groupby(["proposer", "verifier"], sort=False)]
    out += _fmt_table(["pair"] + [f"b={b}" for b in bs], rows)
    return out


def _latency_lines(prof: Profile, ctx: int | None) -> list[str]:
    """L(b, k) per model at the middle context, with the fit's errors."""
    lat = prof.latency
    if lat.empty:
        return []
    fit = prof.meta.get("latency_fit", {})
    out = ["", f"latency L(b, k) in ms (median; - = not timed)  [ctx {ctx}]"]
    for name, g in lat[lat["ctx"] == ctx].groupby("model", sort=False):
        err = fit.get(name, {})
        out.append(f" {_short(name)}  (fit: median rel. error {100 * err.get('median_rel_error', np.nan):.1f}%,"
                   f" max {100 * err.get('max_rel_error', np.nan):.1f}%)")
        piv = g.pivot_table(index="batch", columns="k", values="median_s", aggfunc="first", dropna=False)
        timed = set(zip(g["batch"], g["k"]))

        def cell(b, k, v):
            return "-" if (b, k) not in timed else "infeasible" if np.isnan(v) else f"{1000 * v:.1f}"

        rows = [[f"b={b}"] + [cell(b, k, v) for k, v in piv.loc[b].items()] for b in piv.index]
        out += _fmt_table(["", *[f"k={k}" for k in piv.columns]], rows)
    return out


def _acceptance_lines(prof: Profile) -> list[str]:
    """Mean alpha (and E[accepted]) per proposer, combination and workload."""
    acc = prof.acceptance
    if acc.empty:
        return []
    gm = int(prof.settings.get("acceptance", {}).get("gamma_max", acc["pos"].max() + 1))
    wls = [w for w in dict.fromkeys(acc["workload"]) if w != "all"]
    wls += ["all"] if "all" in set(acc["workload"]) else []
    out = ["", f"acceptance: mean alpha over draft positions (E[accepted | gamma={gm}])"]
    rows = []
    for (p, models, comb), g in acc.groupby(["proposer", "models", "combination"], sort=False):
        cells = []
        for w in wls:
            gw = g[g["workload"] == w]
            if gw.empty:
                cells.append("-")
                continue
            a = float(np.average(gw["alpha"], weights=gw["n"]))
            try:
                e = prof.expected_accepted(p, gm, comb, models, None if w == "all" else w)
                cells.append(f"{a:.2f} ({e:.2f})")
            except (KeyError, ValueError):
                cells.append(f"{a:.2f}")
        rows.append([_short(p), "r=" + comb + "(" + ",".join(_short(x) for x in models.split(",")) + ")"] + cells)
    out += _fmt_table(["proposer", "verified against", *map(_short, wls)], rows)
    return out


def _gain_lines(prof: Profile) -> list[str]:
    """SV information gain per (draft, companion, target), pooled over workloads."""
    ig = prof.info_gain
    if ig.empty:
        return []
    out = ["", "SV information gain of s and a (bits; fraction of H(beta): plug-in / bias-corrected)"]
    rows = [[_short(r.draft), _short(r.companion), _short(r.target), str(r.n), f"{r.mean_beta:.2f}",
             f"{r.h_beta:.3f}", f"{r.h_beta_s:.3f}", f"{r.h_beta_a:.3f}", f"{r.h_beta_sa:.3f}",
             f"{100 * r.info_gain_frac:.0f}% / {100 * r.info_gain_frac_corrected:.0f}%"]
            for r in ig[ig["workload"] == "all"].itertuples()]
    out += _fmt_table(["draft", "companion", "target", "n", "E[beta]", "H(b)", "H(b|s)", "H(b|a)", "H(b|s,a)",
                       "gain"], rows)
    return out


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_")


def plot(prof: Profile, out_dir: str | Path, force: bool = False) -> list[Path]:
    """PNGs: latency vs k per batch size (one per model), alpha by draft position, SV bin heatmaps. A PNG of the
    same name that spectune did not write is an ``OutputError`` unless ``force`` (``spectune.outputs``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = target_dir(out_dir, "--plot")
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    ctx = _mid_ctx(prof)
    lat = prof.latency
    for name, g in lat[(lat["ctx"] == ctx) & lat["feasible"].astype(bool)].groupby("model", sort=False):
        fig, ax = plt.subplots(figsize=(6, 4))
        for b, gb in g.groupby("batch"):
            gb = gb.sort_values("k")
            ax.errorbar(gb["k"], 1000 * gb["median_s"], yerr=1000 * gb["std_s"], marker="o", capsize=2, label=f"b={b}")
        ax.set(xlabel="new tokens k", ylabel="forward latency (ms)", title=f"{_short(name)}  (ctx {ctx})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        f = out / f"latency_{_safe(_short(name))}.png"
        files.append(save_figure(fig, f, force))
    acc = prof.acceptance
    if not acc.empty:
        pooled = acc[acc["workload"] == ("all" if "all" in set(acc["workload"]) else acc["workload"].iloc[0])]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (p, models, comb), g in pooled.groupby(["proposer", "models", "combination"], sort=False):
            lab = f"{_short(p)} | r={comb}({','.join(_short(x) for x in models.split(','))})"
            ax.plot(g["pos"], g["alpha"], marker="o", label=lab)
        ax.set(xlabel="draft position", ylabel="mean alpha", ylim=(-0.02, 1.02), title="acceptance by draft position")
        ax.legend(fontsize=6)
        fig.tight_layout()
        f = out / "alpha_by_position.png"
        files.append(save_figure(fig, f, force))
    bins = prof.sv_bins_table
    for (d, c, t), g in bins[bins["workload"] == "all"].groupby(["draft", "companion", "target"], sort=False):
        ns, na = int(g["s_bin"].max()) + 1, int(g["a_bin"].max()) + 1
        grid = np.full((na, ns), np.nan)
        grid[g["a_bin"].to_numpy(int), g["s_bin"].to_numpy(int)] = g["mean_beta"].to_numpy(float)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        im = ax.imshow(grid, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis")
        fig.colorbar(im, ax=ax, label="mean beta")
        s_df = g.drop_duplicates("s_bin").sort_values("s_bin")
        a_df = g.drop_duplicates("a_bin").sort_values("a_bin")
        ax.set_xticks(s_df["s_bin"].to_numpy(int))
        ax.set_xticklabels([f"{v:.2f}" for v in s_df["s_lo"]], rotation=90, fontsize=6)
        ax.set_yticks(a_df["a_bin"].to_numpy(int))
        ax.set_yticklabels([f"{v:.2f}" for v in a_df["a_lo"]], fontsize=6)
        ax.set(xlabel="s bin (lower edge)", ylabel="a bin (lower edge)",
               title=f"SV bins: draft {_short(d)}, companion {_short(c)}, target {_short(t)}")
        fig.tight_layout()
        f = out / f"sv_bins_{_safe(_short(d))}__{_safe(_short(c))}__{_safe(_short(t))}.png"
        files.append(save_figure(fig, f, force))
    return files
