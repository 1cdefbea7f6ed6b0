"""Information gain on synthetic data with known answers (Bernoulli acceptance, quantile bins)."""
import math

import numpy as np
import pandas as pd
import pytest

from spectune.calibration.bins import (assign, binary_entropy, bin_table, conditional_entropy, information_gain,
                                     quantile_edges, sv_tables)


def h(p):
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def test_binary_entropy_values():
    np.testing.assert_allclose(binary_entropy([0, 1, 0.5, 0.1]), [0, 0, 1, h(0.1)], atol=1e-12)


def test_conditional_entropy_by_hand():
    beta = [1, 1, 0, 0, 0.5, 0.5]
    labels = [0, 0, 1, 1, 2, 2]
    assert conditional_entropy(beta, labels) == pytest.approx(1 / 3)  # two pure bins, one coin flip
    assert conditional_entropy(beta, [0] * 6) == pytest.approx(1.0)  # mean 0.5


def test_s_determines_acceptance_exactly():
    # s on a lattice so that 0.5 is a quantile edge; beta = 1 iff s >= 0.5: s carries all the information
    s = np.repeat(np.arange(20) / 20 + 0.025, 50)
    a = np.random.default_rng(0).uniform(size=s.size)
    beta = (s >= 0.5).astype(float)
    r = information_gain(beta, s, a, n_s=20, n_a=10)
    assert r["h_beta"] == pytest.approx(1.0)
    assert r["h_beta_s"] == pytest.approx(0.0, abs=1e-12)
    assert r["h_beta_sa"] == pytest.approx(0.0, abs=1e-12)
    assert r["info_gain_frac"] == pytest.approx(1.0)


def test_soft_beta_known_gain():
    # beta = 0.9 above the median of s, 0.1 below: H = h(0.5) = 1, H(beta | s) = h(0.1), gain 1 - h(0.1)
    s = np.repeat(np.arange(20) / 20 + 0.025, 50)
    a = np.random.default_rng(1).uniform(size=s.size)
    beta = np.where(s >= 0.5, 0.9, 0.1)
    r = information_gain(beta, s, a)
    assert r["h_beta_s"] == pytest.approx(h(0.1), abs=1e-12)
    assert r["info_gain_frac"] == pytest.approx(1 - h(0.1), abs=1e-12)
    # a is independent noise: a alone tells (almost) nothing, and the corrected gain is below the plug-in one
    assert r["h_beta_a"] > 0.98
    assert r["info_gain_frac_corrected"] < r["info_gain_frac"]


def test_independent_indicators_give_no_gain_after_correction():
    rng = np.random.default_rng(2)
    n = 20000
    s, a = rng.uniform(size=n), rng.uniform(size=n)
    beta = np.full(n, 0.3)
    r = information_gain(beta, s, a)
    assert r["info_gain"] == pytest.approx(0.0, abs=1e-12)  # constant beta: every bin has mean 0.3
    coin = (rng.uniform(size=n) < 0.3).astype(float)  # 0/1 outcomes independent of s, a
    r2 = information_gain(coin, s, a)
    assert 0 < r2["info_gain_frac"] < 0.05
    assert r2["info_gain_frac_corrected"] < r2["info_gain_frac"] / 2


def test_bin_ranges_enforced_and_edges_merge():
    with pytest.raises(ValueError):
        information_gain([1.0], [0.5], [0.5], n_s=5)
    with pytest.raises(ValueError):
        information_gain([1.0], [0.5], [0.5], n_a=25)
    x = np.array([1.0] * 90 + list(np.linspace(0, 0.9, 10)))
    e = quantile_edges(x, 10)
    assert len(e) - 1 < 10 and e[-1] == 1.0  # the mass at 1.0 merges quantiles
    b = assign(x, e)
    assert b.min() == 0 and b.max() == len(e) - 2


def test_bin_table_counts_and_sv_tables():
    rng = np.random.default_rng(3)
    n = 2000
    s, a = rng.uniform(size=n), rng.uniform(size=n)
    beta = (rng.uniform(size=n) < s * a).astype(float)
    r = information_gain(beta, s, a)
    bt = bin_table(beta, s, a, r["s_edges"], r["a_edges"])
    assert bt["count"].sum() == n
    assert ((bt["mean_beta"] >= 0) & (bt["mean_beta"] <= 1)).all()
    df = pd.DataFrame(dict(workload=np.where(np.arange(n) % 2, "code", "math"), draft="d", companion="c",
                           target="t", beta=beta, s=s, a=a))
    bins, gains = sv_tables(df)
    assert set(gains["workload"]) == {"all", "code", "math"}
    assert bins[bins["workload"] == "all"]["count"].sum() == n
    assert (gains["info_gain_frac"] > 0.05).all()  # beta depends on s and a
