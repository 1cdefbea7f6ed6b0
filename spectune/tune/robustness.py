"""Does the calibration decide the pick? Configurations re-priced over bootstrap resamples of its prompts.

A profile prices acceptance from a handful of calibration prompts per workload, and prompts differ far more than
rounds within one: on Zen 5 (`code`, 15 calibration prompts) draft-s accepted 1.01 tokens per 8-token draft on
average, with a standard error of 0.20 over prompts, and 1.38 on 8 held-out prompts. Two configurations whose
predictions differ by less than that are a near-tie the calibration cannot order, however exact the simulator.

:func:`robustness` re-prices the candidates over ``resamples`` bootstrap resamples of the calibration prompts
(``CostModel.resampled``: each workload's prompts drawn with replacement, one draw shared by all candidates, so
they stay paired) and reports, per candidate, how often it is within ``tolerance`` of the best candidate of the same
resample (``p_near_best``; the advice's regret bar is 1.05) and the 10th / 90th percentiles of its goodput.
A pick with a low ``p_near_best`` is a coin flip between contenders: measuring them on held-out prompts
(``recommend --validate N``) decides it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class Robustness:
    p_near_best: float  # fraction of resamples where goodput >= the resample's best / tolerance
    goodput_p10: float  # tokens/s, 10th percentile over resamples
    goodput_p90: float
    resamples: int
    prompts: int  # calibration prompts resampled
    tolerance: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resampled_goodputs(cm: Any, configs: Sequence[Any], resamples: int = 20, seed: int = 0) -> np.ndarray:
    """[resamples, len(configs)] predicted goodput of every config under each bootstrap resample."""
    out = np.empty((resamples, len(configs)))
    for s in range(resamples):
        other = cm.resampled(seed + s)
        out[s] = [other.predict(c).goodput for c in configs]
    return out


def robustness(cm: Any, configs: Sequence[Any], resamples: int = 20, tolerance: float = 1.05,
               seed: int = 0) -> list[Robustness]:
    """Per config (same order): how often it is within ``tolerance`` of the best of ``configs`` when the
    calibration prompts are resampled, and its goodput's 10-90 % range (see the module docstring)."""
    if resamples < 1 or not configs:
        return []
    g = resampled_goodputs(cm, configs, resamples, seed)
    g = g[np.isfinite(g).all(axis=1)]  # a resample that cannot price every config is left out
    if not len(g):
        return []
    near = g >= g.max(axis=1, keepdims=True) / tolerance
    n = len(cm.calibrated.prompts())
    return [Robustness(float(near[:, i].mean()), float(np.percentile(g[:, i], 10)), float(np.percentile(g[:, i], 90)),
                       len(g), n, tolerance) for i in range(len(configs))]
