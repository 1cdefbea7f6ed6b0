"""Printing a :class:`~spectune.tune.recommend.Recommendation`: a rich table of the top configurations, the
numbers behind each (alpha, c, E[accepted]), predicted vs measured, the schedule and the files written."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from spectune.decoding.proposers import proposer_kind


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    if x is None:
        return "-"
    try:
        if x != x:  # nan
            return "-"
    except TypeError:
        return str(x)
    return fmt.format(x)


def _method(cfg: Any) -> str:
    """The method, with its model count (n-model cos) and its draft-length policy when not fixed; escaped for rich
    (unescaped, "[confidence:0.4]" is read as a style tag and vanishes: rows differing only in policy looked alike)."""
    from rich.markup import escape

    name = f"{cfg.method} ({len(cfg.models)} models)" if cfg.method == "cos" and len(cfg.models) > 2 else cfg.method
    return escape(name if cfg.policy == "fixed" else f"{name} [{cfg.policy}]")


def _proposer(cfg: Any) -> str:
    """Who proposes: the first model, the lookup proposer, or the lookup then the first model (escaped for rich, as
    ``_method``)."""
    from rich.markup import escape

    kind, draft = proposer_kind(cfg.proposer), Path(cfg.models[0]).name
    return escape({"model": draft, "ngram": cfg.proposer}.get(kind, f"{cfg.proposer} ({draft})"))


def print_recommendation(rec: Any, console: Any = None) -> None:
    """The top configurations, the chosen one, the schedule, notes and the files written, on ``console``."""
    from rich.console import Console

    con = console or Console(width=None if sys.stdout.isatty() else 180)
    if rec.engine:
        con.print(f"for {rec.engine['name']} {rec.engine['version']}: priced on its engine profile (its own latency, "
                  "the models' acceptance), searched over what it runs" + (", measured in it" if any(
                      r.measured for r in rec.rows) else ""))
    con.print(_top_table(rec))
    base_g = rec.baseline.prediction["goodput"]
    tgt_g = rec.target_alone["goodput"]
    c = rec.chosen.config
    how = "".join(f" {k}={v}" for k, v in (("proposer", c.proposer), ("policy", c.policy))
                  if v not in ("model", "fixed"))
    con.print(f"chosen (by {rec.chosen_by}): {c.method} models={','.join(Path(m).name for m in c.models)} "
              f"combine={c.combine} gamma={','.join(map(str, c.gamma))}{how} batch={c.batch_size}: predicted "
              f"{rec.chosen.prediction['goodput']:.1f} tok/s = {rec.chosen.prediction['goodput'] / base_g:.2f}x "
              f"standard, {rec.chosen.prediction['goodput'] / tgt_g:.2f}x the target alone"
              + (f"; measured {rec.chosen.measured['goodput']:.1f} tok/s" if rec.chosen.measured else "")
              + _robust_text(rec.chosen.robustness))
    if len(rec.by_proposer) > 1:
        con.print(_by_proposer_text(rec, tgt_g))
    con.print(_schedule_table(rec))
    for n in rec.notes:
        con.print(f"note: {n}")
    for m, why in rec.excluded_methods.items():
        if not rec.engine:  # an engine's search is what it runs, not what a profile can price
            con.print(f"not searched: {m} ({why})")
    if rec.config_path and rec.engine:
        con.print(f"config: {rec.config_path}  (serve and prove it: spectune export {rec.config_path} --engine "
                  f"{rec.engine['name']} --check)")
    elif rec.config_path:
        prof = f" --profile {rec.profile_path}" if rec.chosen.config.method == "sv" else ""
        con.print(f"config: {rec.config_path}  (run: spectune generate --config {rec.config_path}{prof} --prompt ...)")
    if rec.schedule_path:
        con.print(f"schedule: {rec.schedule_path}")
    for f in rec.plots:
        con.print(f"plot: {f}")
    con.print(f"study: {rec.storage} (optuna-dashboard {rec.storage})", soft_wrap=True)


_KINDS = {"model": "draft model", "ngram": "prompt lookup", "ngram+model": "lookup + draft"}


def _by_proposer_text(rec: Any, target_goodput: float) -> str:
    """One line: the best predicted configuration of each proposer kind at the chosen batch size."""
    parts = []
    for kind, r in sorted(rec.by_proposer.items(), key=lambda kv: -kv[1].prediction["goodput"]):
        c, g = r.config, r.prediction["goodput"]
        parts.append(f"{_KINDS.get(kind, kind)}: {_method(c)} {_proposer(c)} gamma={','.join(map(str, c.gamma))} "
                     f"{g:.1f} tok/s ({g / target_goodput:.2f}x the target alone)")
    return f"best by proposer at batch {rec.chosen.config.batch_size} (predicted): " + "; ".join(parts)


def _robust_text(rob: dict | None) -> str:
    if not rob:
        return ""
    return (f"; within {rob['tolerance'] - 1:.0%} of the best in {rob['p_near_best']:.0%} of {rob['resamples']} "
            f"resamples of the {rob['prompts']} calibration prompts "
            f"(10-90 %: {rob['goodput_p10']:.1f}-{rob['goodput_p90']:.1f} tok/s)")


def _vs_std(r: Any, m: float | None, mb: float | None) -> str:
    """The measured ratio to the baseline: an engine's side by side, repeat by repeat (what picked), else of the
    fastest runs."""
    side = (r.measured or {}).get("vs_target_alone")
    return _f(side) + "x" if side is not None else (_f(m / mb) + "x") if (m and mb) else "-"


def _top_table(rec: Any) -> Any:
    """The top configurations with their numbers, then the standard baseline."""
    from rich.table import Table

    t = Table(title=f"top configurations ({rec.trials_added} trials, {rec.search_seconds:.1f} s; study "
                    f"'{rec.study_name}')", show_lines=False)
    for col in ("#", "method", "proposer", "gamma", "b", "pred tok/s", "vs standard", "vs target", "alpha", "c",
                "E[acc]", "ms/token", "P(near best)", "measured tok/s", "meas. vs std"):
        t.add_column(col, justify="right" if col not in ("method", "proposer") else "left")
    mb = (rec.baseline.measured or {}).get("goodput")
    for i, r in enumerate(rec.rows, 1):
        p, c = r.prediction, r.config
        same_b = c.batch_size == rec.baseline.config.batch_size
        m = (r.measured or {}).get("goodput")
        t.add_row(
            ("*" if r is rec.chosen else "") + str(i), _method(c), _proposer(c), ",".join(map(str, c.gamma)),
            str(c.batch_size), _f(p["goodput"], "{:.1f}"), _f(p["speedup_vs_standard"]) + "x",
            _f(p["speedup_vs_target"]) + "x", _f(p.get("alpha"), "{:.3f}"), _f(p.get("c"), "{:.3f}"),
            _f(p.get("expected_accepted")), _f(p["latency_per_token"] * 1e3, "{:.2f}"),
            _f((r.robustness or {}).get("p_near_best")), _f(m, "{:.1f}"),
            _vs_std(r, m, mb) if same_b else "-",
        )
    bp = rec.baseline.prediction
    t.add_row("", "target alone (baseline)" if rec.engine else "standard (baseline)", "-", "-",
              str(rec.baseline.config.batch_size), _f(bp["goodput"], "{:.1f}"),
              "1.00x", _f(bp["speedup_vs_target"]) + "x", "-", "-", "-",
              _f(bp["latency_per_token"] * 1e3, "{:.2f}"), "-",
              _f(mb, "{:.1f}"), "1.00x" if mb else "-")
    return t


def _schedule_table(rec: Any) -> Any:
    """The best configuration per batch size (predicted)."""
    from rich.table import Table

    s = Table(title="schedule: best configuration per batch size (predicted)")
    for col in ("batch", "method", "proposer", "gamma", "tok/s", "vs standard"):
        s.add_column(col)
    for e in rec.schedule:
        d = e.to_dict()
        s.add_row(str(e.batch_size), "standard (no speculation)" if not d["speculate"] else _method(e.config),
                  _proposer(e.config) if d["speculate"] else "-",
                  ",".join(map(str, e.config.gamma)) if d["speculate"] else "-", f"{d['predicted_goodput']:.1f}",
                  f"{d['predicted_speedup_vs_standard']:.2f}x")
    return s
