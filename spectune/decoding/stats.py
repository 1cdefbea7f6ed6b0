"""DecodeStats: the one stats object every method fills, with one convention for acceptance length.

Convention. A *draft block* is the run of tokens one model proposes in one turn (gamma drafted tokens, or in
``cos`` a bonus token followed by gamma-1 drafted tokens). Its **accepted length** is the number of the block's
proposals that were accepted before the first rejection (0..len(block)). It does NOT include the recovered
token or the ``sd`` bonus token (those are exact samples, never proposals). A ``cos`` bonus token *is* a
proposal of the next block and counts there when accepted. Blocks cut short because an earlier block was
rejected are counted as ``discarded`` tokens, not as verified proposals.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def _add(x: list[int], y: list[int], n: int) -> list[int]:
    x, y = x + [0] * (n - len(x)), y + [0] * (n - len(y))
    return [a + b for a, b in zip(x, y)]


@dataclass
class ModelStats:
    name: str
    forward_calls: int = 0
    forward_seconds: float = 0.0
    tokens_fed: int = 0
    calls_by_k: dict[int, list[float]] = field(default_factory=dict)  # feed length k -> [calls, seconds]
    prefill_seconds: float = 0.0  # forwards that fed a prompt (part of forward_seconds)
    # proposals this model made that reached verification, and how many were accepted, by position in block
    proposed_by_pos: list[int] = field(default_factory=list)
    accepted_by_pos: list[int] = field(default_factory=list)

    def record_block(self, verified: int, accepted: int) -> None:
        """``verified`` proposals of one block were checked, the first ``accepted`` of them kept."""
        self.proposed_by_pos = _add(self.proposed_by_pos, [1] * verified, max(verified, len(self.proposed_by_pos)))
        self.accepted_by_pos = _add(self.accepted_by_pos, [1] * accepted, len(self.proposed_by_pos))

    @property
    def proposed(self) -> int:
        return sum(self.proposed_by_pos)

    @property
    def accepted(self) -> int:
        return sum(self.accepted_by_pos)


@dataclass
class DecodeStats:
    method: str
    models: list[ModelStats]
    output_tokens: int = 0
    wall_seconds: float = 0.0
    blocks: int = 0
    accepted_length_hist: Counter = field(default_factory=Counter)
    recovered_tokens: int = 0  # sampled from the residual after a rejection
    bonus_tokens: int = 0  # sd: sampled from r after a full accept; cos: a verifier's bonus proposal
    discarded_tokens: int = 0  # proposals dropped unverified because an earlier token was rejected
    # sv only: drafts cut before verification, verified length k per step, predicted vs realised acceptance
    truncated_tokens: int = 0
    verified_len_hist: Counter = field(default_factory=Counter)
    predicted_accepted: float = 0.0  # sum over sv steps of E[accepted | k] from the companion bins
    realised_accepted: int = 0  # sum over sv steps of the drafts actually accepted

    @classmethod
    def for_models(cls, method: str, names: list[str]) -> "DecodeStats":
        return cls(method=method, models=[ModelStats(n) for n in names])

    def record_block(self, proposer: int, verified: int, accepted: int) -> None:
        self.blocks += 1
        self.accepted_length_hist[accepted] += 1
        self.models[proposer].record_block(verified, accepted)

    @property
    def mean_accepted_length(self) -> float:
        """Mean accepted proposals per verified draft block (see the module docstring)."""
        n = sum(self.accepted_length_hist.values())
        return sum(k * v for k, v in self.accepted_length_hist.items()) / n if n else 0.0

    def acceptance_by_position(self, k: int) -> list[float]:
        """P(the first i proposals of a block are accepted), i = 1..k, over the blocks that verified a proposal:
        what an engine's per-position counter over its drafts reads (a lookup's miss verifies nothing and is no
        draft to vLLM's ``num_drafts`` or llama.cpp's verification steps). NaN without any such block. Every
        proposer's blocks together: an engine's one draft model or lookup (a chain's two), verified by the target."""
        drafts = sum(m.proposed_by_pos[0] for m in self.models if m.proposed_by_pos)
        accepted = [sum(m.accepted_by_pos[i] for m in self.models if len(m.accepted_by_pos) > i) for i in range(k)]
        return [a / drafts if drafts else float("nan") for a in accepted]

    @property
    def acceptance_rate(self) -> float:
        """Accepted / verified proposals over all proposers."""
        p = sum(m.proposed for m in self.models)
        return sum(m.accepted for m in self.models) / p if p else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def decode_seconds(self) -> float:
        """Wall seconds without the prompt prefill forwards: the decoding phase the cost model prices."""
        return max(0.0, self.wall_seconds - sum(m.prefill_seconds for m in self.models))

    @property
    def decode_tokens_per_second(self) -> float:
        return self.output_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def forward_calls(self) -> int:
        return sum(m.forward_calls for m in self.models)

    @property
    def calls_per_token(self) -> float:
        return self.forward_calls / self.output_tokens if self.output_tokens else 0.0

    def merge(self, other: "DecodeStats") -> None:
        """Add another run's counts (same method and models) into this one."""
        assert len(other.models) == len(self.models)
        for a, b in zip(self.models, other.models):
            a.forward_calls += b.forward_calls
            a.forward_seconds += b.forward_seconds
            a.tokens_fed += b.tokens_fed
            a.prefill_seconds += b.prefill_seconds
            for k, (n_, t) in b.calls_by_k.items():
                acc = a.calls_by_k.setdefault(k, [0, 0.0])
                acc[0] += n_
                acc[1] += t
            n = max(len(a.proposed_by_pos), len(b.proposed_by_pos))
            a.proposed_by_pos = _add(a.proposed_by_pos, b.proposed_by_pos, n)
            a.accepted_by_pos = _add(a.accepted_by_pos, b.accepted_by_pos, n)
        for k in ("output_tokens", "wall_seconds", "blocks", "recovered_tokens", "bonus_tokens", "discarded_tokens",
                  "truncated_tokens", "predicted_accepted", "realised_accepted"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.accepted_length_hist.update(other.accepted_length_hist)
        self.verified_len_hist.update(other.verified_len_hist)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "output_tokens": self.output_tokens,
            "wall_seconds": round(self.wall_seconds, 6),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "decode_tokens_per_second": round(self.decode_tokens_per_second, 3),
            "blocks": self.blocks,
            "mean_accepted_length": round(self.mean_accepted_length, 4),
            "acceptance_rate": round(self.acceptance_rate, 4),
            "accepted_length_hist": {str(k): v for k, v in sorted(self.accepted_length_hist.items())},
            "recovered_tokens": self.recovered_tokens,
            "bonus_tokens": self.bonus_tokens,
            "discarded_tokens": self.discarded_tokens,
            **({"sv": {
                "truncated_tokens": self.truncated_tokens,
                "verified_len_hist": {str(k): v for k, v in sorted(self.verified_len_hist.items())},
                "mean_verified_len": round(sum(k * v for k, v in self.verified_len_hist.items())
                                           / max(1, sum(self.verified_len_hist.values())), 4),
                "predicted_accepted": round(self.predicted_accepted, 4),
                "realised_accepted": self.realised_accepted,
            }} if self.method == "sv" else {}),
            "forward_calls": self.forward_calls,
            "calls_per_token": round(self.calls_per_token, 4),
            "models": [
                {
                    "name": m.name,
                    "forward_calls": m.forward_calls,
                    "forward_seconds": round(m.forward_seconds, 6),
                    "tokens_fed": m.tokens_fed,
                    "prefill_seconds": round(m.prefill_seconds, 6),
                    "calls_by_k": {str(k): [int(n), round(t, 6)] for k, (n, t) in sorted(m.calls_by_k.items())},
                    "proposed": m.proposed,
                    "accepted": m.accepted,
                    "proposed_by_pos": m.proposed_by_pos,
                    "accepted_by_pos": m.accepted_by_pos,
                }
                for m in self.models
            ],
        }
