"""``spectune export CONFIG --engine hf --check``: run the exported artifact in HF's own
``generate(assistant_model=...)`` on the workload's held-out prompts and set what it measures beside what
spectune predicts for that configuration.

Measured with ``spectune bench``'s runner (interleaved repeats, EOS held back so every run decodes the same
tokens, batch 1 as assisted generation runs): the artifact, HF ``generate`` of the target alone and spectune's
target alone (the reference of the loop efficiency). Predicted from the profile at batch size 1: spectune's cost
model for the same configuration (SD with K drafts, the number ``export`` prints) and the same step priced as HF
runs it (``hf_price.py``: its assistant re-encodes a token after each rejection). What neither prices is HF's
Python loop; the row's loop efficiency (renewal price at the forward times HF paid / measured) says how much.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

NAN = float("nan")


@dataclass
class HFCheck:
    k: int  # drafts per step the artifact runs (0: plain generate on the target)
    workload: str
    prompts: int
    repeats: int
    max_new_tokens: int
    summary: pd.DataFrame  # the bench summary of every measured run
    row: dict[str, Any]  # the artifact's summary row
    predicted: float  # spectune's cost model, decode tok/s (NaN without a profile)
    predicted_hf: float  # the same with HF's step priced
    profile: str | None  # the profile's path, None without one

    @property
    def measured(self) -> float:
        return float(self.row["decode_goodput"])

    def error(self, predicted: float) -> float:
        """(predicted - measured) / measured."""
        return (predicted - self.measured) / self.measured if self.measured > 0 else NAN

    def to_dict(self) -> dict[str, Any]:
        """What ``--json`` prints under "check"."""
        fin = lambda x: float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None  # noqa: E731
        r = self.row
        return {"k": self.k, "workload": self.workload, "prompts": self.prompts, "repeats": self.repeats,
                "max_new_tokens": self.max_new_tokens, "measured_decode_goodput": fin(self.measured),
                "measured_goodput": fin(r["goodput"]), "predicted_goodput": fin(self.predicted),
                "predicted_goodput_hf_step": fin(self.predicted_hf), "error": fin(self.error(self.predicted)),
                "error_hf_step": fin(self.error(self.predicted_hf)), "draft_lengths": r["draft_lengths"],
                "alpha": fin(r["alpha"]), "loop_efficiency": fin(r["loop_efficiency"]), "profile": self.profile}

    def report(self) -> str:
        r, pct = self.row, lambda x: f"{x:+.1%}" if math.isfinite(x) else "-"  # noqa: E731
        what = f"K = {self.k}" if self.k else "no assistant: plain generate()"
        lines = [f"# check: HF runs this artifact ({what}) on {self.prompts} held-out prompt(s) of {self.workload}, "
                 f"{self.repeats} repeat(s), {self.max_new_tokens} tokens each, batch 1",
                 f"#   measured: {self.measured:.1f} tok/s decoding ({r['goodput']:.1f} with the prompt prefill)"]
        if self.k:
            lines.append(f"#   HF's steps by draft length: {r['draft_lengths']} (K every step; fewer only where the "
                         f"sequence ends); accepted per step {r['mean_accepted_length']:.2f}, alpha {r['alpha']:.2f}")
        if self.profile is None:
            lines.append("#   predicted: no profile holds these models (spectune calibrate) -- measured only")
        else:
            lines += [f"#   predicted by spectune's cost model: {self.predicted:.1f} tok/s "
                      f"({pct(self.error(self.predicted))} vs measured; profile {self.profile})",
                      f"#   predicted with HF's own step (its assistant re-encodes a token after each rejection): "
                      f"{self.predicted_hf:.1f} tok/s ({pct(self.error(self.predicted_hf))})"]
        if self.k and math.isfinite(r["loop_efficiency"]):
            lines.append(f"#   not priced, HF's Python loop (an assistant generate() call per step): loop efficiency "
                         f"{r['loop_efficiency']:.2f} (measured / price at the forward times HF paid)")
        for label in ("HF generate (target alone)", "target alone"):
            other = self.summary[self.summary["label"] == label]
            if len(other):
                lines.append(f"#   {label}: {float(other['decode_goodput'].iloc[0]):.1f} tok/s decoding")
        return "\n".join(lines)


def check_hf_export(exp: Any, *, workload: str = "mix", prompts: int = 4, repeats: int = 3, seed: int = 0,
                    out: str | os.PathLike | None = None, say: Callable[[str], None] = lambda s: None) -> HFCheck:
    """Measure ``exp`` (an ``Export`` for engine hf) as described in the module docstring."""
    from spectune.bench.grid import BenchSpec
    from spectune.bench.hf import hf_artifact
    from spectune.bench.runner import bench
    from spectune.errors import ConfigError
    from spectune.export.hf import hf_k

    if exp.engine != "hf":
        raise ConfigError(f"--check runs the artifact in HF transformers: use --engine hf, not {exp.engine}")
    plan, k = exp.plan, hf_k(exp.plan)
    draft = plan.draft or exp.config.models[0]
    if draft == plan.target:
        raise ConfigError("--check needs a draft model to compare with: the config has one model")
    spec = BenchSpec(models=(draft, plan.target), methods=(), gammas=(max(k, 1),), temperatures=(plan.temperature,),
                     top_k=plan.top_k, top_p=plan.top_p, max_new_tokens=plan.max_new_tokens, hf_defaults=False)
    run = next(r for r in spec.runs() if r.kind == ("hf-assisted" if k else "hf-target"))
    _same_artifact(hf_artifact(run), exp.rendered.artifact)
    res = bench(spec, workload=workload, prompts=prompts, repeats=repeats, seed=seed, out=out, say=say)
    row = res.summary.set_index("key").loc[run.key].to_dict()
    predicted, predicted_hf, prof = _predictions(exp, draft, k, workload)
    return HFCheck(k, workload, prompts, repeats, plan.max_new_tokens, res.summary, row, predicted, predicted_hf,
                   prof)


def _same_artifact(run_art: dict[str, Any], exported: dict[str, Any]) -> None:
    """The bench row must run exactly the exported settings (the installed transformers version aside)."""
    strip = lambda d: {s: {k: v for k, v in c.items() if k != "transformers_version"} for s, c in d.items()}  # noqa
    if strip(run_art) != strip(exported):
        raise AssertionError(f"the HF run would not execute the exported artifact: {run_art} != {exported}")


def _predictions(exp: Any, draft: str, k: int, workload: str) -> tuple[float, float, str | None]:
    """(spectune's predicted goodput, HF-priced, profile path) at batch 1; NaN and None without a profile."""
    from spectune.bench.hf_price import predict_hf_goodput
    from spectune.config import DecodeConfig
    from spectune.tune.cost import CostModel
    from spectune.profile import profile_names

    prof = exp.profile
    if prof is None:
        return NAN, NAN, None
    cm = CostModel(prof, workload)
    d, t = profile_names(prof, (draft, exp.plan.target))
    cfg = (DecodeConfig(models=(t,), method="standard", batch_size=1) if k == 0 else
           DecodeConfig(models=(d, t), method="sd", gamma=(k, 1), batch_size=1))
    try:
        return cm.predict(cfg).goodput, predict_hf_goodput(cm, d, t, k), str(getattr(prof, "path", "in memory"))
    except (KeyError, ValueError):
        return NAN, NAN, None
