"""Timing code on tiny models (no assertions on absolute times), infeasible cells; c(b) and the latency model
(``spectune.profile``) on the tables that timing produces."""
import numpy as np
import pandas as pd
import pytest
import torch

from spectune.calibration import latency as L
from spectune.profile import LATENCY_COLUMNS, LatencyModel, cost_table


def test_measure_chunk_rows(tiny_models):
    mods = {k: m.model for k, m in tiny_models.items()}
    grid = L.LatencyGrid(batch_sizes=(2,), max_k=3, contexts=(5,), repeats=2, warmup=1)
    rows = pd.DataFrame(L.measure_chunk(mods, 2, 5, grid))
    assert list(rows.columns) == LATENCY_COLUMNS
    assert len(rows) == 3 * 3 and rows["feasible"].all()
    assert rows["repeats"].between(2, grid.max_repeats).all()  # more where tiny forwards' timings disagree
    assert ((rows["min_s"] <= rows["median_s"]) & (rows["median_s"] <= rows["max_s"])).all()
    assert (rows["min_s"] > 0).all()
    # the timed forwards leave every cache at the context length: a second chunk gives the same shape
    rows2 = pd.DataFrame(L.measure_chunk(mods, 1, 5, grid))
    assert rows2["feasible"].all()


def test_timed_forward_is_the_runtimes_forward(tiny_models):
    """Calibration times the forward the eager runtime pays: BatchedRunner's 4-D mask, positions, cache positions
    (transformers' mask-less path picks other kernels: on Zen 5 in bf16 up to 42 % slower at k = 1)."""
    from spectune.decoding.batch_cache import BatchedRunner

    model = tiny_models["s"].model
    seen: list[dict] = []
    hook = model.register_forward_pre_hook(lambda mod, args, kw: seen.append(kw), with_kwargs=True)
    try:
        grid = L.LatencyGrid(batch_sizes=(2,), max_k=3, contexts=(5,), repeats=1, warmup=0)
        L.measure_chunk({"s": model}, 2, 5, grid)
        timed = {kw["input_ids"].shape[1]: kw for kw in seen if "attention_mask" in kw}
        assert sorted(timed) == [1, 2, 3] and len(seen) > 3  # the prefill is not timed and carries no mask
        seen.clear()
        runner = BatchedRunner(model, rows=2)
        runner.forward({0: [5, 6, 7, 8, 9], 1: [9, 8, 7, 6, 5]})
        runner.forward({0: [1, 2, 3], 1: [3, 2, 1]})
    finally:
        hook.remove()
    ours, theirs = timed[3], seen[-1]
    for key in ("attention_mask", "position_ids", "cache_position"):
        assert torch.equal(ours[key], theirs[key]), key


def test_too_long_context_is_infeasible_not_a_crash(tiny_models):
    mods = {"s": tiny_models["s"].model}
    grid = L.LatencyGrid(batch_sizes=(1,), max_k=4, contexts=(254,), repeats=1, warmup=0)
    rows = pd.DataFrame(L.measure_chunk(mods, 1, 254, grid))  # tiny models: 256 positions
    assert not rows["feasible"].any() and rows["note"].str.contains("max_position_embeddings").all()


class OOMModel(torch.nn.Module):
    """Prefill works, the timed forward runs out of memory (as a CUDA OOM would)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config
        self.calls = 0

    def forward(self, input_ids, **kw):
        self.calls += 1
        if input_ids.shape[0] >= 2 and self.calls > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.inner(input_ids=input_ids, **kw)


def test_out_of_memory_is_recorded_and_skipped_above(tiny_models):
    mods = {"oom": OOMModel(tiny_models["s"].model), "ok": tiny_models["m"].model}
    grid = L.LatencyGrid(batch_sizes=(2, 4), max_k=2, contexts=(4,), repeats=1, warmup=0)
    rows = pd.DataFrame(L.measure_chunk(mods, 2, 4, grid))
    bad = rows[rows["model"] == "oom"]
    assert not bad["feasible"].any() and (bad["note"] == "out of memory").all()
    assert rows[rows["model"] == "ok"]["feasible"].all()
    skips = L.oom_skips(rows, 4, 4)
    assert set(skips) == {"oom"}
    rows4 = pd.DataFrame(L.measure_chunk(mods, 4, 4, grid, skip=skips))
    assert not rows4[rows4["model"] == "oom"]["feasible"].any()


def _synthetic():
    rows = []
    for m, (a, b) in {"small": (1.0, 0.1), "big": (10.0, 1.0)}.items():
        for batch in (1, 2, 4):
            for k in (1, 2, 3):
                for ctx in (10, 30):
                    t = (a + b * batch * k + 0.01 * batch * ctx) / 1000  # affine in the model's features
                    rows.append(dict(model=m, batch=batch, ctx=ctx, k=k, median_s=t, mean_s=t, std_s=0.0, min_s=t,
                                     max_s=t, repeats=1, feasible=True, note=""))
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)


def test_cost_table_and_latency_model():
    lat = _synthetic()
    cost = cost_table(lat)
    row = cost[(cost.proposer == "small") & (cost.verifier == "big") & (cost.batch == 2) & (cost.ctx == 10)]
    assert float(row["c"].iloc[0]) == pytest.approx((1 + 0.2 + 0.2) / (10 + 2 + 0.2))
    assert len(cost) == 2 * 3 * 2  # two ordered pairs x 3 batch sizes x 2 contexts
    lm = LatencyModel(lat)
    assert lm("big", 2, 3, 30) == pytest.approx((10 + 6 + 0.6) / 1000)  # on the grid: the measurement
    # between grid points: linear in log2(b) and ctx (k=2 is on the grid): b=3 is 0.585 of the way from 2 to 4
    w = np.log2(3) - 1
    assert lm("big", 3, 2, 20) == pytest.approx(((1 - w) * (10 + 4 + 0.4) + w * (10 + 8 + 0.8)) / 1000)
    # outside the grid: the regression, which is exact for this affine ground truth
    assert lm("big", 16, 8, 100) == pytest.approx((10 + 128 + 16.0) / 1000, rel=0.02)
    assert lm.errors["big"]["max_rel_error"] < 0.01


def test_k_grid_dense_for_small_batches_then_powers_of_two(tiny_models):
    grid = L.LatencyGrid(max_k=8)
    assert grid.k_values(1) == grid.k_values(2) == list(range(1, 9))
    assert grid.k_values(4) == grid.k_values(32) == [1, 2, 4, 8]
    assert L.LatencyGrid(max_k=6).k_values(8) == [1, 2, 4, 6]
    assert L.LatencyGrid(max_k=6, dense_k_max_batch=8).k_values(8) == list(range(1, 7))
    rows = pd.DataFrame(L.measure_chunk({"s": tiny_models["s"].model}, 4, 5,
                                        L.LatencyGrid(max_k=4, contexts=(5,), repeats=1, warmup=0)))
    assert rows["k"].tolist() == [1, 2, 4] and rows["feasible"].all()


def test_latency_model_fills_untimed_k_linearly():
    lat = _synthetic()
    sparse = lat[~((lat.batch == 4) & (lat.k == 2))]  # batch 4 timed at k = 1, 3 only
    lm = LatencyModel(sparse)
    lo, hi = (lat[(lat.model == "big") & (lat.batch == 4) & (lat.ctx == 10) & (lat.k == k)].median_s.item()
              for k in (1, 3))
    assert lm("big", 4, 2, 10) == pytest.approx((lo + hi) / 2)  # the affine truth is linear in k: exact
    assert lm("big", 4, 2, 10) == pytest.approx(LatencyModel(lat)("big", 4, 2, 10))


class _Watch:
    """A CpuWatch whose shares are given: one per measurement, in order."""

    def __init__(self, shares):
        self.shares = iter(shares)

    def __call__(self):
        return self

    def others(self):
        return next(self.shares)


def _runs():
    n = iter(range(1, 10))
    return lambda: [dict(model="m", k=1, median_s=float(next(n)), feasible=True, note=""),
                    dict(model="x", k=1, median_s=float("nan"), feasible=False, note="out of memory")]


@pytest.mark.parametrize("shares, kept, runs, note", [
    ([0.02], 1.0, 1, ""),  # quiet: one run
    ([None], 1.0, 1, ""),  # not measurable here: one run, no note
    ([0.5, 0.04], 2.0, 2, ""),  # busy, then quiet: the quiet run
    ([0.5, 0.3, 0.4], 2.0, 3, "30%"),  # busy throughout: the least busy run, and a note saying so
])
def test_measure_quiet_times_a_chunk_again_while_others_take_the_cpu(shares, kept, runs, note):
    grid = L.LatencyGrid(quiet_limit=0.1, quiet_attempts=3)
    rows, seen = L.measure_quiet(_runs(), grid, watch=_Watch(shares), pause=0.0)
    assert [r["others"] for r in seen] == shares[:runs] and rows[0]["median_s"] == kept
    assert (note in rows[0]["note"]) and (bool(rows[0]["note"]) == bool(note))
    assert rows[1]["note"] == "out of memory"  # an infeasible row keeps its reason


def test_measure_quiet_times_a_chunk_again_while_the_reference_forward_is_slow():
    """A slow host the guest cannot see: the canary (timed before and after each run) is 40 % slow around the
    first run, 5 % around the second: the second is kept."""
    grid = L.LatencyGrid(slow_limit=0.15, quiet_attempts=3)
    slow = iter([0.0, 0.4, 0.05, 0.02])
    rows, seen = L.measure_quiet(_runs(), grid, watch=_Watch([0.0, 0.0]), canary=lambda: next(slow), pause=0.0)
    assert [r["slowdown"] for r in seen] == [0.4, 0.05] and rows[0]["median_s"] == 2.0 and rows[0]["note"] == ""
    slow = iter([0.3, 0.3, 0.2, 0.25])  # slow throughout (2 runs allowed): the less slow run, with a note
    rows, seen = L.measure_quiet(_runs(), L.LatencyGrid(quiet_attempts=2), watch=_Watch([0.0, 0.0]),
                                 canary=lambda: next(slow), pause=0.0)
    assert rows[0]["median_s"] == 2.0 and "25% slower than usual" in rows[0]["note"]


def test_canary_reports_slowdown_against_its_median(tiny_models, monkeypatch):
    name, m = next(iter(tiny_models.items()))
    c = L.Canary(m.model, n=3)
    times = iter([1.0] * 3 + [1.5] * 3 + [0.8] * 3 + [2.0] * 3)
    monkeypatch.setattr(c, "timer", lambda fn: (fn(), next(times))[1])
    assert c() == 0.0 and c() == pytest.approx(1.5 / 1.25 - 1) and c() == pytest.approx(-0.2)
    assert c() == pytest.approx(2.0 / 1.25 - 1) and c.history == [1.0, 1.5, 0.8, 2.0]


def test_extra_pass_repeats_only_the_cells_whose_repeats_disagree():
    import random

    grid = L.LatencyGrid(spread_limit=0.25, max_repeats=5)
    times = {("m", 1): [1.0, 1.05, 0.98], ("m", 2): [1.0, 1.6, 1.02], ("d", 1): [0.1, 0.1, 0.3, 0.1, 0.1]}
    assert L.extra_pass(times, grid, random.Random(0)) == [[("m", 2)]]  # ("d", 1) has its 5 repeats
    assert L.extra_pass({("m", 1): [1.0, 1.1, 1.0]}, grid, random.Random(0)) == []


def test_a_burst_in_one_repeat_gets_more_repeats(tiny_models, monkeypatch):
    """Every forward takes 1 s but one (a burst: 10 s): only its cell is timed again, and its median is 1 s."""
    calls = {"n": 0}

    def steady(dev):
        def timed(fn):
            fn()
            calls["n"] += 1
            return 10.0 if calls["n"] == 6 else 1.0  # the 6th call: 2 warm-up calls, then 2 cells x 3 repeats
        return timed

    monkeypatch.setattr(L, "_timer", steady)
    grid = L.LatencyGrid(batch_sizes=(1,), max_k=2, contexts=(8,), repeats=3, warmup=1, spread_limit=0.25,
                         max_repeats=6)
    name, m = next(iter(tiny_models.items()))
    rows = L.measure_chunk({name: m.model}, 1, 8, grid)
    assert sorted(r["repeats"] for r in rows) == [3, 6]
    assert all(r["median_s"] == 1.0 for r in rows) and max(r["max_s"] for r in rows) == 10.0


def test_regression_outside_one_timed_batch_size_and_context_stays_bounded():
    # a table timed at b = 1 and one context (the acceptance-only calibration's): its regression features are
    # collinear, and a free intercept fitted -1e12 s against +1e12 s a row (3e12 s at b = 2); with every
    # coefficient non-negative the prediction grows at most linearly in b and never falls
    s = [0.17381717900002513, 0.2074085469998863, 0.2812365969998609, 0.21546291700019538, 0.1769176329999027,
         0.29994269600001644, 0.3434398599999895, 0.22146553300012783]  # SmolLM2 eager, k = 1..8, timed once
    lat = pd.DataFrame([dict(model="t", batch=1, ctx=64, k=k, median_s=v, mean_s=v, std_s=0.0, min_s=v, max_s=v,
                             repeats=1, feasible=True, note="") for k, v in enumerate(s, 1)], columns=LATENCY_COLUMNS)
    lm = LatencyModel(lat)
    for k in (1, 4, 9):
        one, two, eight = (lm("t", b, k, 200.0) for b in (1, 2, 8))
        assert 0 < one <= two <= eight <= 8 * 2 * max(s)
