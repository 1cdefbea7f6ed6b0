"""Unit tests of the pure rejection-sampling functions on hand-built q and r."""
import torch

from spectune.decoding import sampling as S


def g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_accept_probability_matches_min_one_ratio():
    q = torch.tensor([0.5, 0.25, 0.25, 0.0])
    r = torch.tensor([0.25, 0.25, 0.25, 0.25])
    gen = g()
    n = 40000
    acc0 = sum(bool(S.accept(r, q, torch.tensor(0), False, gen)) for _ in range(n)) / n
    assert abs(acc0 - 0.5) < 0.015  # r(0)/q(0) = 0.5
    assert all(bool(S.accept(r, q, torch.tensor(1), False, gen)) for _ in range(200))  # ratio 1
    assert float(S.accept_prob(r, q, torch.tensor(0))) == 0.5


def test_residual_is_normalised_positive_part():
    q = torch.tensor([0.5, 0.25, 0.25, 0.0])
    r = torch.tensor([0.25, 0.25, 0.25, 0.25])
    res = S.residual(r, q)
    assert torch.allclose(res, torch.tensor([0.0, 0.0, 0.0, 1.0]))
    r2 = torch.tensor([0.1, 0.6, 0.2, 0.1])
    res2 = S.residual(r2, q)
    assert torch.allclose(res2, torch.tensor([0.0, 0.35, 0.0, 0.1]) / 0.45)


def test_zero_residual_falls_back_to_r_without_nan():
    q = torch.tensor([0.2, 0.3, 0.5])
    res = S.residual(q.clone(), q)
    assert torch.allclose(res, q) and not torch.isnan(res).any()
    tok = S.recover(q.clone(), q, greedy=False, generator=g())
    assert 0 <= int(tok) < 3


def test_greedy_limit_accepts_only_argmax_of_r():
    r = torch.tensor([0.1, 0.7, 0.2])
    q = torch.tensor([0.0, 0.0, 1.0])
    assert not bool(S.accept(r, q, torch.tensor(2), True, None))
    assert bool(S.accept(r, q, torch.tensor(1), True, None))
    assert int(S.recover(r, q, True, None)) == 1


def test_exact_rejection_sampling_gives_r():
    """Draft from q, accept with min(1, r/q), else resample the residual: the result is distributed as r."""
    q = torch.tensor([0.6, 0.3, 0.1, 0.0])
    r = torch.tensor([0.1, 0.2, 0.3, 0.4])
    gen = g(1)
    n = 30000
    counts = torch.zeros(4)
    for _ in range(n):
        x = S.sample(q, False, gen)
        if not bool(S.accept(r, q, x, False, gen)):
            x = S.recover(r, q, False, gen)
        counts[int(x)] += 1
    assert (counts / n - r).abs().max() < 0.015


def test_sample_never_picks_zero_mass_and_matches_probs():
    p = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0])
    gen = g(2)
    xs = S.sample(p.expand(20000, 5), False, gen)
    assert set(xs.tolist()) <= {1, 3}
    assert abs((xs == 1).float().mean().item() - 0.5) < 0.02


def test_top_k_top_p_and_temperature():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert torch.isinf(S.apply_top_k(logits, 2)[2:]).all() and not torch.isinf(S.apply_top_k(logits, 2)[:2]).any()
    p = torch.softmax(logits, -1)  # [0.644, 0.237, 0.087, 0.032]
    kept = ~torch.isinf(S.apply_top_p(logits, 0.85))
    assert kept.tolist() == [True, True, False, False]
    assert S.logits_to_probs(logits, 0.0, 0, 1.0).allclose(p)  # greedy builds distributions at T=1
    assert S.logits_to_probs(logits, 0.5, 0, 1.0).allclose(torch.softmax(logits / 0.5, -1))


def test_overlap_is_one_minus_tv():
    q = torch.tensor([0.6, 0.3, 0.1])
    r = torch.tensor([0.2, 0.3, 0.5])
    assert abs(float(S.overlap(q, r)) - (1 - 0.5 * float((q - r).abs().sum()))) < 1e-6
