"""HF assisted generation's step, priced like spectune's (``spectune.tune.cost.round_sd``), with the one forward
cost that differs, and what is left unpriced.

Per step, transformers 5.23 (``_assisted_decoding`` in generation/utils.py, ``AssistedCandidateGenerator``):

* the assistant's cache is cropped to the sequence length - 2 before it drafts, so its first forward always
  feeds 2 tokens -- after a rejection it re-encodes the last accepted token, which spectune's loop keeps
  cached (spectune feeds 1 token then, 2 only after a full accept). Priced: L(draft, 2) instead of L(draft, 1)
  on the (1 - P[full accept]) share of steps;
* then K - 1 one-token forwards of the assistant and one target forward over K + 1 tokens; the step keeps the
  accepted drafts plus one token from the target (the recovered token, or the bonus after a full accept) --
  the same tokens per step as spectune's SD, so no bonus token is lost;
* the first step of every sequence prefills the prompt in the assistant's first forward and in the target's
  verification forward (the bench counts only their excess over a decoding forward as prefill);
* the last steps draft min(K, tokens left - 1) (nothing at the very end): a few short steps per sequence.

Not priced: the Python around the forwards -- a full ``assistant_model.generate()`` call (config copies,
logits processors, stopping criteria) per step and the target loop's bookkeeping. The bench measures it as the
row's ``loop_efficiency`` (renewal price at the forward times paid in the run / measured).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from spectune.tune.closed_forms import block_accepted


def round_hf_assisted(S: Sequence[float], gamma: int, L: list[Callable[[int], float]]) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one HF assisted-generation step; ``L[0]`` the assistant's forward latency by
    feed length, ``L[1]`` the target's; ``S`` the survival curve of the drafts
    (``closed_forms.survival_from_betas``)."""
    seconds = L[0](2) + (gamma - 1) * L[0](1) + L[1](gamma + 1)
    return 1.0 + block_accepted(S, gamma), seconds


def predict_hf_goodput(cm: Any, draft: str, target: str, gamma: int) -> float:
    """Predicted goodput (tokens/s, batch 1) of HF assisted generation with K = ``gamma`` from a ``CostModel``
    whose profile holds ``draft`` and ``target`` (profile names); ``gamma`` 0: the target alone."""
    if gamma == 0:
        return 1.0 / cm.L(target, 1, 1)
    if gamma > cm.gamma_max:
        raise ValueError(f"gamma {gamma} exceeds the calibrated gamma_max {cm.gamma_max}")
    label, comb = cm.calibrated.acceptance_key((draft, target), "target")
    S = cm.calibrated.survival(draft, label, comb)
    tokens, seconds = round_hf_assisted(S, gamma, [lambda k: cm.L(draft, 1, k), lambda k: cm.L(target, 1, k)])
    return tokens / seconds
