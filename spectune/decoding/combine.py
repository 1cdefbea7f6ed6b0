"""Combination functions r = C(model outputs) and where temperature / top-k / top-p apply.

Where the sampling settings apply (the same in every method):
  * probability-level combinations (``target``, ``we``, custom ``level="prob"``): each model's logits are warped
    (temperature, top-k, top-p) and softmaxed *before* combining; r is the combination of those distributions.
  * logit-level combinations (``cd``, custom ``level="logit"``): raw logits are combined first, and the warp and
    softmax apply *after* combining.
  * a proposer always samples from its own warped distribution, and that distribution is its q.

A user-supplied combination is any callable ``fn(xs) -> tensor`` where ``xs`` is a list with one ``[..., V]``
tensor per model (probabilities for ``level="prob"``, logits for ``level="logit"``) in model order, returning
probabilities (prob level, rows summing to 1) or logits (logit level). Wrap it with ``Combination.custom``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from spectune.errors import ConfigError

if TYPE_CHECKING:  # parsing a combination needs no torch (config and the cost model parse them)
    import torch

CombineFn = Callable[[list["torch.Tensor"]], "torch.Tensor"]


@dataclass(frozen=True)
class Combination:
    """r = C(...) over ``n`` models; ``uses`` are the model indices r depends on."""

    spec: str  # canonical text form, e.g. "we:0.5,0.5"; "custom" for callables
    level: str  # "prob" or "logit"
    fn: CombineFn
    uses: tuple[int, ...]

    def probs(self, logits: Sequence[torch.Tensor], temperature: float, top_k: int, top_p: float) -> torch.Tensor:
        """r as probabilities. ``logits``: one ``[..., V]`` tensor per model in ``uses`` order."""
        from spectune.decoding.sampling import logits_to_probs

        if self.level == "logit":
            return logits_to_probs(self.fn(list(logits)), temperature, top_k, top_p)
        return self.fn([logits_to_probs(lg, temperature, top_k, top_p) for lg in logits])

    @staticmethod
    def custom(fn: CombineFn, n_models: int, level: str = "prob", uses: Sequence[int] | None = None) -> "Combination":
        """A user combination; ``fn`` receives the outputs of the models in ``uses`` (default: all)."""
        if level not in ("prob", "logit"):
            raise ConfigError(f"combination level must be 'prob' or 'logit', got '{level}'")
        uses_t = tuple(range(n_models)) if uses is None else tuple(uses)
        if not uses_t or any(not 0 <= i < n_models for i in uses_t):
            raise ConfigError(f"combination uses models {list(uses_t)}, but there are {n_models}")
        return Combination("custom", level, fn, uses_t)


def _target(xs: list[torch.Tensor]) -> torch.Tensor:
    return xs[0]


def _weighted(weights: Sequence[float]) -> CombineFn:
    w = list(weights)

    def fn(xs: list[torch.Tensor]) -> torch.Tensor:
        # r = sum_i w_i p_i  (weighted ensemble of probabilities)
        return sum(wi * x for wi, x in zip(w, xs))

    return fn


def _contrastive(mu: float) -> CombineFn:
    def fn(xs: list[torch.Tensor]) -> torch.Tensor:
        # r = softmax(l_expert - mu * l_amateur)  (contrastive decoding at logit level; first = amateur)
        amateur, expert = xs
        return expert.float() - mu * amateur.float()

    return fn


def _floats(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise ConfigError(f"invalid {what} '{text}': expected comma-separated numbers") from None
    if not all(math.isfinite(v) for v in vals):
        raise ConfigError(f"invalid {what} '{text}': every number must be finite (no nan or inf)")
    return vals


def parse_combination(spec: str | Combination, n_models: int) -> Combination:
    """Parse ``target`` | ``we:W1,W2[,...]`` | ``cd:MU`` for ``n_models`` models, validating the numbers."""
    if isinstance(spec, Combination):
        if any(i >= n_models for i in spec.uses):
            raise ConfigError(f"combination uses models {list(spec.uses)}, but there are {n_models}")
        return spec
    if callable(spec):
        return Combination.custom(spec, n_models)
    text = str(spec).strip().lower()
    kind, _, arg = text.partition(":")
    if kind == "target":
        if arg:
            raise ConfigError(f"'target' takes no argument, got '{spec}'")
        return Combination("target", "prob", _target, (n_models - 1,))
    if kind == "we":
        w = _floats(arg, "weights") if arg else [1.0 / n_models] * n_models
        if len(w) != n_models:
            raise ConfigError(f"we needs {n_models} weights (one per model), got {len(w)}")
        if any(x < 0 for x in w):
            raise ConfigError(f"we weights must be >= 0, got {arg}")
        if abs(sum(w) - 1.0) > 1e-6:
            raise ConfigError(f"we weights must sum to 1, got {sum(w):g}")
        canon = "we:" + ",".join(f"{x:g}" for x in w)
        return Combination(canon, "prob", _weighted(w), tuple(range(n_models)))
    if kind == "cd":
        mu = _floats(arg, "mu")
        if len(mu) != 1:
            raise ConfigError(f"cd takes one number mu (cd:MU), got '{spec}'")
        if mu[0] < 0:
            raise ConfigError(f"cd mu must be >= 0, got {mu[0]:g}")
        if n_models != 2:
            raise ConfigError(
                f"cd (contrastive decoding) is defined for exactly 2 models (amateur, expert), got {n_models}"
            )
        return Combination(f"cd:{mu[0]:g}", "logit", _contrastive(mu[0]), (0, n_models - 1))
    raise ConfigError(f"unknown combination '{spec}': use target, we:W1,W2 or cd:MU")
