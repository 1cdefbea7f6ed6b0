"""Prompt lookup (n-gram) proposals: copy what followed the context's own suffix earlier in the context.

Glossary:
  * context    - prompt + committed output tokens (+ nothing pending: a lookup starts a fresh block).
  * suffix     - the last n tokens of the context, n from ``n_max`` down to ``n_min``.
  * match      - an earlier occurrence of the suffix (it must end before the context does, so at least one token
                 follows it); the most recent occurrence of the longest matching suffix wins (``match="recent"``,
                 spectune's runtime, llama.cpp's ``--lookup``); vLLM's ``ngram`` takes the earliest one
                 (``match="earliest"``: ``_find_longest_matched_ngram_and_propose_tokens`` in
                 ``vllm/v1/spec_decode/ngram_proposer.py``, 0.32.0), and llama.cpp's ``ngram-simple`` its own
                 (``match="llamacpp"``: ``common_ngram_simple_draft`` in common/ngram-map.cpp, b11434: the suffix
                 of length n_max only, its most recent occurrence not at index 0 and not the one just before the
                 suffix, and no proposal when the context is at most n + k + 1 long or fewer than n tokens
                 follow that occurrence). Each prices lookups for its engine.
  * proposal   - the up to k tokens that followed the match (they may run into the suffix itself, which
                 continues a repeating pattern). No match: no proposal, and the step is a plain verification.

``ngram+model`` (``proposers.NgramProposer(fallback=True)``): the lookup proposes up to ``k`` tokens when it
matches and model 0 drafts (its gamma_0, under its draft-length policy) when it misses -- llama.cpp's
``--spec-type ngram-simple,draft-simple``, where a draftless implementation takes precedence over the draft
model. Which of the two proposes depends only on the context, never on the coins that verify the block, so each
block is still verified by the Leviathan rule against its own proposer's q.

The proposer's distribution is a point mass, q = onehot(x). The Leviathan rule then accepts x with probability
r(x); the residual norm(max(0, r - onehot(x))) is r with x removed and renormalised (``sampling.residual``), and
greedy accepts iff x = argmax r. So the output is an exact sample of r whatever the lookup proposes.
"""
from __future__ import annotations

from typing import Sequence


MATCHES = ("recent", "earliest", "llamacpp")  # which occurrence of the longest matching suffix a lookup copies after


def find_continuation(context: Sequence[int], n_min: int, n_max: int, k: int, match: str = "recent") -> list[int]:
    """The up to ``k`` tokens that followed the most recent (``match="earliest"``: the earliest) earlier
    occurrence of the longest suffix of ``context`` of length n in [n_min, n_max]; [] when no suffix of those
    lengths occurs earlier.

    A backward scan over plain ints: O(len(context) * n_max) on a miss, and one token per step costs less
    than the tensor ops a vectorised match would launch on the contexts decoding sees.
    """
    ctx = list(context)
    L = len(ctx)
    if k <= 0:
        return []
    if match == "llamacpp":
        return _llamacpp_simple(ctx, n_max, k)
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        suffix = ctx[L - n :]
        starts = range(L - n) if match == "earliest" else range(L - n - 1, -1, -1)
        for i in starts:  # a match starting at i ends at i + n - 1 <= L - 2
            if ctx[i] == suffix[0] and ctx[i : i + n] == suffix:
                return ctx[i + n : i + n + k]
    return []


def _llamacpp_simple(ctx: list[int], n: int, m: int) -> list[int]:
    """llama.cpp's ``common_ngram_simple_draft`` (common/ngram-map.cpp, b11434) over ``ctx`` = its ``tokens`` plus
    the ``sampled`` token: the last n tokens' most recent earlier occurrence at j >= 1, ending at least two tokens
    before the context does; up to m tokens after it, none when fewer than n of them are there."""
    cur = len(ctx) - 1  # llama.cpp's tokens: the context less the token just sampled
    if cur <= n + m + 1:
        return []
    pattern = ctx[cur + 1 - n :]
    for j in range(cur - n - 1, 0, -1):
        if ctx[j : j + n] == pattern:
            copy = min(m, cur - (j + n))
            return ctx[j + n : j + n + copy] if copy >= n else []
    return []
