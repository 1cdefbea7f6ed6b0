"""Python API: ``spectune.generate`` mirrors ``spectune generate``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from spectune.config import validate_settings
from spectune.decoding.combine import Combination, parse_combination
from spectune.decoding.loop import Decoder, SamplingParams
from spectune.decoding.stats import DecodeStats
from spectune.errors import ConfigError
from spectune.models import LoadedModel, load_models


@dataclass
class GenerateResult:
    token_ids: list[int]  # generated ids only (prompt excluded)
    text: str
    stats: DecodeStats

    def to_dict(self) -> dict[str, Any]:
        return {"token_ids": self.token_ids, "text": self.text, "stats": self.stats.to_dict()}


def build_decoder(
    models: Sequence[LoadedModel],
    *,
    method: str = "cos",
    combine: str | Combination = "target",
    gamma: Any = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    ignore_eos: bool = False,
    device: str = "cpu",
) -> Decoder:
    """A ``Decoder`` for already-loaded, compatible models (validates every setting first)."""
    n = len(models)
    gamma_t, _ = validate_settings(n, method, combine, gamma, temperature, top_k, top_p, 1)
    eos = None if ignore_eos else models[-1].tokenizer.eos_token_id
    return Decoder(
        [m.model for m in models], [m.name for m in models], method, parse_combination(combine, n), gamma_t,
        SamplingParams(temperature, top_k, top_p), eos, device=device,
    )


def encode(tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    """Prompt text (or ids) -> non-empty list of token ids."""
    ids = list(prompt) if not isinstance(prompt, str) else tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ConfigError("the prompt is empty: give at least one token of text")
    return [int(i) for i in ids]


def generate(
    models: Sequence[Any],
    prompt: str | Sequence[int],
    *,
    method: str = "cos",
    combine: str | Combination = "target",
    gamma: Any = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 64,
    ignore_eos: bool = False,
    device: str = "cpu",
) -> GenerateResult:
    """Decode ``prompt`` with ``method`` over ``models`` (smallest first; the first is the default proposer).

    ``models`` items: bundled names, local directories, ``LoadedModel`` or ``(model, tokenizer)`` pairs.
    ``combine``: ``"target"``, ``"we:W1,W2"``, ``"cd:MU"`` or a ``Combination`` (see ``Combination.custom``).
    ``gamma``: per-model proposal lengths (``"5,1"``, ``[5, 1]``); default 5 for the first model, 1 for others.
    Output tokens are an exact sample of the combined distribution r (greedy: its argmax at each step).
    """
    # cheap checks first: a typo in a setting is reported before any model loads
    validate_settings(len(models), method, combine, gamma, temperature, top_k, top_p, max_new_tokens)
    loaded = load_models(models, device=device)
    dec = build_decoder(
        loaded, method=method, combine=combine, gamma=gamma, temperature=temperature, top_k=top_k, top_p=top_p,
        ignore_eos=ignore_eos, device=device,
    )
    tok = loaded[-1].tokenizer
    ids, stats = dec.generate(encode(tok, prompt), max_new_tokens, seed)
    return GenerateResult(ids, tok.decode(ids, skip_special_tokens=True), stats)
