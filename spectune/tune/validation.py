"""Validation runs: configurations measured on spectune's runtime decoder over held-out prompts.

``validate(...)`` measures each chosen trial's configuration and the ``standard`` baseline and records the measured
goodput on the study (study user attribute ``measured:<trial number>``; Optuna does not allow changing finished
trials); ``measure(...)`` is one configuration's median over repeats, decoding phase only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import optuna

from spectune.config import DecodeConfig
from spectune.decoding.runtime import resolve_runtime
from spectune.errors import ConfigError


@dataclass
class Measurement:
    config: DecodeConfig
    goodput: float  # output tokens / s of the decoding phase over the held-out prompts (prefill excluded)
    latency_per_token: float  # decoding seconds per output token of one request (batch time / tokens per row)
    tokens: int
    seconds: float
    mean_accepted_length: float
    trial: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def measure(config: DecodeConfig, loaded: dict[str, Any], prompts: Sequence[str], repeats: int = 1,
            ignore_eos: bool = True, profile: Any = None, runtime: str = "auto", device: str = "cpu",
            warm: bool = False) -> Measurement:
    """Decode ``prompts`` with ``config`` on the runtime decoder (``batch_size`` at a time, models and caches on
    ``device``); median of repeats. ``warm``: one untimed pass first (the compiled runtime's compile and capture,
    a GPU's first calls), so no timing holds them.

    Times the decoding phase: the forwards that prefill the prompts are left out, as the cost model prices
    decoding only (prefill costs every method the same, and depends on the prompt, not on the configuration)."""
    from spectune.decoder import build_decoder, encode_prompt

    models = [loaded[m] for m in config.models]
    dec = build_decoder(models, config, ignore_eos=ignore_eos, runtime=runtime, device=device,
                        profile=profile if config.method == "sv" else None)
    tok = models[-1].tokenizer
    ids = [encode_prompt(tok, p) for p in prompts]  # as calibration encoded its prompts
    if warm:
        _decode_pass(dec, ids, config)
    runs = sorted(_decode_pass(dec, ids, config) for _ in range(max(1, repeats)))
    seconds, tokens, rows_time, mal = runs[len(runs) // 2]
    return Measurement(config, tokens / seconds if seconds else 0.0, rows_time / tokens if tokens else float("inf"),
                       tokens, seconds, mal)


def _decode_pass(dec: Any, ids: list[list[int]], config: DecodeConfig) -> tuple[float, int, float, float]:
    """(decode seconds, output tokens, seconds x rows, mean accepted length) of one pass over ``ids``."""
    tokens, seconds, rows_time, acc_n, acc_sum = 0, 0.0, 0.0, 0, 0.0
    for outs, _, st in dec.batches(ids, config.max_new_tokens, config.batch_size, config.seed):
        dt = st.decode_seconds
        tokens += sum(len(o) for o in outs)
        seconds += dt
        rows_time += dt * len(outs)
        acc_n += st.blocks
        acc_sum += st.mean_accepted_length * st.blocks
    return seconds, tokens, rows_time, acc_sum / acc_n if acc_n else 0.0


def validate(study: optuna.Study | None, trials: Sequence[optuna.trial.FrozenTrial], baseline: DecodeConfig,
             model_specs: Sequence[str], prompts: Sequence[str], progress: Any = None, *, profile: Any = None,
             dtype: str = "auto", runtime: str = "auto", device: str = "cpu") -> tuple[list[Measurement], Measurement]:
    """Measure each trial's config and the ``standard`` baseline once (models on ``device`` in ``dtype``, forwards
    on ``runtime``); record them on the study (if given). With the compiled runtime or on a GPU every config is
    decoded once untimed first: else the first measured (the baseline) holds the compile and first-call costs."""
    from spectune.models import load_models

    if not prompts:
        raise ConfigError("validation needs held-out prompts; the workload has none")
    warm = resolve_runtime(runtime, device) == "compiled" or not str(device).startswith("cpu")
    loaded = {m.name: m for m in load_models(list(model_specs), dtype=dtype, device=device)}
    names = dict(zip(model_specs, loaded))
    resolve = lambda cfg: DecodeConfig.from_dict({**cfg.to_dict(), "models": [names.get(m, m) for m in cfg.models]})  # noqa: E731
    base = measure(resolve(baseline), loaded, prompts, runtime=runtime, device=device, warm=warm)
    base.config = baseline
    out = []
    for t in trials:
        cfg = DecodeConfig.from_dict(t.user_attrs["config"])
        if progress:
            progress(cfg)
        m = measure(resolve(cfg), loaded, prompts, profile=profile, runtime=runtime, device=device, warm=warm)
        m.config, m.trial = cfg, t.number
        out.append(m)
        if study is not None:
            study.set_user_attr(f"measured:{t.number}", {"goodput": m.goodput, "latency_per_token": m.latency_per_token,
                                                        "mean_accepted_length": m.mean_accepted_length,
                                                        "prompts": len(prompts)})
    if study is not None:
        study.set_user_attr("measured:standard", {"goodput": base.goodput, "latency_per_token": base.latency_per_token,
                                                  "config": baseline.to_dict(), "prompts": len(prompts)})
    return out, base
