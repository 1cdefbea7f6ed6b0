"""The sampling math of spectune, as a ladder of small pure tensor functions.

Glossary (one verification of a draft block):
  * draft / proposal tokens - tokens sampled by a proposer from its own distribution q.
  * accepted token  - a proposal kept by the rule  u <= min(1, r(x) / q(x)),  u ~ U(0, 1).
  * recovered token - the replacement for the first rejected proposal, sampled from
                      norm(max(0, r - q)) (the residual); it is exact, never re-verified.
  * bonus token     - sampled after a fully accepted block: from r in ``sd`` (exact, committed at once), or
                      from the verifier's own distribution p in ``cos`` (then it is a *proposal* with q = p).

Conventions:
  * Every tensor here has a trailing vocabulary axis ``V``; leading axes are free (``...``).
  * ``temperature == 0`` means greedy: distributions are built at temperature 1 and the token is the argmax.
    The greedy limit of the acceptance rule is "accept iff x == argmax r", and the recovered token is argmax r.
  * ``q`` passed to ``accept`` is always the distribution the token was actually sampled from.
"""
from __future__ import annotations

import torch

# Mass below this is treated as "no residual"; the recovered token is then sampled from r itself.
RESIDUAL_EPS = 1e-12


def apply_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits (ties at the k-th value are kept); others -> -inf. 0 disables."""
    # logits: [..., V]
    if top_k <= 0 or top_k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of tokens whose probability reaches ``top_p``. 1.0 disables."""
    # logits: [..., V]
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    # mass strictly before each token; a token is kept while the mass before it is < top_p
    before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def warp_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Temperature, then top-k, then top-p. Temperature 0 (greedy) scales by 1."""
    # logits: [..., V] float
    t = temperature if temperature > 0 else 1.0
    out = logits.float() / t
    out = apply_top_k(out, top_k)
    return apply_top_p(out, top_p)


def logits_to_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """softmax(warp(logits)): the distribution a model samples from. [..., V] -> [..., V]"""
    return torch.softmax(warp_logits(logits, temperature, top_k, top_p), dim=-1)


def sample(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row. probs: [..., V] -> [...] (int64)."""
    if greedy:
        return probs.argmax(dim=-1)
    # inverse-CDF sampling: the first index whose cumulative mass exceeds u ~ U(0, 1) (clamped so rounding in
    # the cumsum can never run past the last token with positive mass)
    cdf = probs.float().cumsum(dim=-1)
    u = torch.rand(probs.shape[:-1] + (1,), generator=generator) * cdf[..., -1:]
    idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return torch.minimum(idx, (probs > 0).long().cumsum(-1).argmax(-1))


def accept_prob(r: torch.Tensor, q: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """min(1, r(x) / q(x)) for the drafted token x. r, q: [..., V]; token: [...] -> [...]"""
    rx = r.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    qx = q.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    assert bool((qx > 0).all()), "a drafted token must have positive probability under the q it was drawn from"
    return torch.clamp(rx / qx, max=1.0)


def accept(
    r: torch.Tensor, q: torch.Tensor, token: torch.Tensor, greedy: bool, generator: torch.Generator | None
) -> torch.Tensor:
    """The Leviathan rule u <= min(1, r(x)/q(x)) (greedy limit: x == argmax r). -> bool [...]"""
    # r, q: [..., V]; token: [...]
    if greedy:
        return token == r.argmax(dim=-1)
    u = torch.rand(token.shape, generator=generator, dtype=r.dtype)
    # u * q(x) <= r(x)  is  u <= r(x)/q(x)  without dividing
    rx = r.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    qx = q.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    return u * qx <= rx


def residual(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, r - q)); rows with no residual mass fall back to r. [..., V] -> [..., V], never NaN."""
    res = torch.clamp(r - q, min=0.0)
    mass = res.sum(dim=-1, keepdim=True)
    empty = mass <= RESIDUAL_EPS
    return torch.where(empty, r, res / torch.where(empty, torch.ones_like(mass), mass))


def recover(
    r: torch.Tensor, q: torch.Tensor, greedy: bool, generator: torch.Generator | None
) -> torch.Tensor:
    """The recovered token after a rejection: a sample of the residual (greedy: argmax r). [..., V] -> [...]"""
    if greedy:
        return r.argmax(dim=-1)
    return sample(residual(r, q), greedy=False, generator=generator)


def overlap(q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """alpha = sum_x min(q(x), r(x)) = 1 - TV(q, r): the exact acceptance probability of a draft. -> [...]"""
    return torch.minimum(q, r).sum(dim=-1)


def point_mass(token: int, vocab: int) -> torch.Tensor:
    """onehot(token): the q of a proposal that was looked up, not sampled (see ``ngram.py``). -> [V]"""
    q = torch.zeros(vocab)
    q[token] = 1.0
    return q
