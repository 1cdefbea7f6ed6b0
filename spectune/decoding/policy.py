"""Draft-length policies: how many tokens the default proposer (model 0) drafts in one turn.

A policy only decides how many proposals are made; every proposal is still verified by the Leviathan rule and
every recovered / bonus token is an exact sample of r, so the output distribution is r under every policy.
The decisions depend on the past (committed tokens, earlier blocks' outcomes, the drafts themselves), never on
the coins that will verify the block being drafted.

  * ``fixed``            - gamma_0 tokens every turn (spectune's default).
  * ``heuristic``        - HF's ``num_assistant_tokens_schedule="heuristic"``: start at gamma_0; after a block
                           whose proposals were all accepted +2, else -1 (never below 1). Per sequence.
  * ``confidence:T``     - draft up to gamma_0 tokens but stop after a token whose draft probability q(x) is
                           below T (HF's ``assistant_confidence_threshold``: the unsure token is still proposed).
``sv`` (Speculative Verification) is a method of its own (sv.py); it drafts with ``fixed``.
"""
from __future__ import annotations

from dataclasses import dataclass

from spectune.errors import ConfigError


@dataclass(frozen=True)
class DraftPolicy:
    """The ``fixed`` policy; subclasses override ``update`` (block length) or ``stop`` (within a block)."""

    @property
    def spec(self) -> str:
        return "fixed"

    def update(self, length: int, drafted: int, accepted: int) -> int:
        """The next block's length after a block of ``drafted`` proposals had ``accepted`` accepted."""
        return length

    def stop(self, q_token: float) -> bool:
        """Stop drafting after a token the draft sampled with probability ``q_token``."""
        return False


@dataclass(frozen=True)
class HeuristicPolicy(DraftPolicy):
    @property
    def spec(self) -> str:
        return "heuristic"

    def update(self, length: int, drafted: int, accepted: int) -> int:
        return length + 2 if accepted == drafted else max(1, length - 1)


@dataclass(frozen=True)
class ConfidencePolicy(DraftPolicy):
    threshold: float = 0.0

    @property
    def spec(self) -> str:
        return f"confidence:{self.threshold:g}"

    def stop(self, q_token: float) -> bool:
        return q_token < self.threshold


def _confidence(args: str | None) -> DraftPolicy:
    try:
        t = float(args or "")
    except ValueError:
        raise ConfigError(f"invalid policy 'confidence:{args}': expected confidence:THRESHOLD") from None
    if not 0.0 < t < 1.0:
        raise ConfigError(f"invalid policy 'confidence:{args}': the threshold must be in (0, 1)")
    return ConfidencePolicy(t)


def _no_args(name: str, policy: DraftPolicy):
    def make(args: str | None) -> DraftPolicy:
        if args:
            raise ConfigError(f"policy '{name}' takes no parameters, got '{name}:{args}'")
        return policy

    return make


# The one registry of draft-length policies: name -> parser of the text after "name:".
POLICIES = {"fixed": _no_args("fixed", DraftPolicy()), "heuristic": _no_args("heuristic", HeuristicPolicy()),
            "confidence": _confidence}


def parse_policy(text: str | DraftPolicy | None) -> DraftPolicy:
    """``fixed`` | ``heuristic`` | ``confidence:T`` (or a DraftPolicy; None = fixed) -> DraftPolicy."""
    if isinstance(text, DraftPolicy):
        return text
    if text is not None and not isinstance(text, str):
        raise ConfigError(f"invalid policy {text!r}: use fixed, heuristic or confidence:THRESHOLD")
    name, _, args = (text or "fixed").partition(":")
    if name not in POLICIES:
        raise ConfigError(f"unknown policy '{text}': use fixed, heuristic or confidence:THRESHOLD")
    return POLICIES[name](args or None)
