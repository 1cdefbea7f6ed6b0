"""``calibration.engine.fit_latency`` on rows of a host whose speed is bimodal, as the Emerald Rapids guest was
under vLLM 0.32.0 (every stage 40-47 ms a step at b = 1 in one state, 58-72 ms in the other)."""
from __future__ import annotations

import pandas as pd
import pytest

from spectune.calibration.engine import ROW_COLUMNS, EngineGrid, fit_latency

MODELS = ["draft", "target"]
GRID = EngineGrid(batch_sizes=(1,), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=3, passes=1)
L1, SLOPE, TURN, PER = 0.040, 0.001, 0.002, 0.003  # the quiet host: L(1, k) = L1 + SLOPE (k - 1), D(K) = TURN + PER K
SLOW = 1.5  # the other state


def _rows(slow_target: bool) -> pd.DataFrame:
    """Three measurements a stage, one of them on the quiet host; the target alone mostly slow if ``slow_target``."""
    out = []

    def add(stage, draft, k, step, states):
        for r, s in enumerate(states):
            out.append(dict(zip(ROW_COLUMNS, [stage, draft, k, 1, r, 80.0, step * s, k + 1.0, 40, 40 if k else 0,
                                              40 * k, 0, 1 / step])))

    add("target", "", 0, L1, (1.0, SLOW, SLOW) if slow_target else (1.0, 1.0, SLOW))
    for k in GRID.lookup_ks:
        add(f"lookup-k{k}", "", k, L1 + SLOPE * k, (1.0, 1.0, SLOW))
    for k in GRID.draft_ks:
        add(f"draft-k{k}", "draft", k, L1 + SLOPE * k + TURN + PER * k, (SLOW, 1.0, 1.0))
    return pd.DataFrame(out, columns=ROW_COLUMNS)


@pytest.mark.parametrize("slow_target", [False, True])
def test_engine_fit_prices_the_quiet_host(slow_target):
    """Medians would put the mostly slow target alone (60 ms) above every draft stage (45-74 ms) and price the draft
    free; the fastest measurement of each stage recovers the quiet host's verification line and draft price."""
    lat = fit_latency(_rows(slow_target), MODELS, GRID)
    target = lat[lat["model"] == "target"].set_index("k")["median_s"]
    assert target[1] == pytest.approx(L1) and target[5] == pytest.approx(L1 + 4 * SLOPE)
    draft = lat[lat["model"] == "draft"].set_index("k")["median_s"]
    assert draft[0] == pytest.approx(TURN) and draft[1] == pytest.approx(PER) and draft[8] == pytest.approx(PER)
    assert "0.00 ms" not in lat[lat["model"] == "draft"]["note"].iloc[0]


def _real_prompt_rows(jump: float, per: float) -> pd.DataFrame:
    """Lookups on a workload's own prompts (a llama.cpp run): a share p of the row-steps draft, feeding f tokens
    beyond their one a step on average, the step the target alone's + jump p + per f; the draft drafts every step."""
    out = []

    def add(stage, draft, k, p, f, extra=0.0):
        step = L1 + jump * p + per * f + extra
        out.append(dict(zip(ROW_COLUMNS, [stage, draft, k, 1, 0, 80.0, step, 1.0 + f, 100, 100 * p, 100 * f, 0,
                                          1 / step])))

    add("target", "", 0, 0.0, 0.0)
    for k, p, f in [(2, 0.35, 0.62), (4, 0.25, 0.97), (8, 0.13, 0.97)]:
        add(f"lookup-k{k}", "", k, p, f)
    for k in GRID.draft_ks:
        add(f"draft-k{k}", "draft", k, 1.0, float(k), TURN + PER * k)
    return pd.DataFrame(out, columns=ROW_COLUMNS)


def test_a_drafting_rows_fixed_cost_is_priced_apart_from_its_tokens():
    """llama.cpp's verification of k > 1 tokens costs a fixed 16.5 ms a drafting row, then 2.9 ms a token (held-out
    lookups on the Emerald Rapids guest): the fit recovers both from lookups where few steps draft, so a 2-token
    step is not priced as a line from the target alone through long drafts would price it."""
    grid = EngineGrid(batch_sizes=(1,), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=1, passes=1)
    lat = fit_latency(_real_prompt_rows(0.0165, 0.0029), MODELS, grid)
    target = lat[lat["model"] == "target"].set_index("k")["median_s"]
    assert target[1] == pytest.approx(L1)
    assert target[2] == pytest.approx(L1 + 0.0165 + 0.0029) and target[9] == pytest.approx(L1 + 0.0165 + 8 * 0.0029)
    draft = lat[lat["model"] == "draft"].set_index("k")["median_s"]
    assert draft[0] == pytest.approx(TURN) and draft[1] == pytest.approx(PER)  # the draft's step less that price
    assert "16.50 ms a drafting row + 2.90 ms a token" in lat[lat["model"] == "target"]["note"].iloc[0]


def test_lookups_that_never_drafted_are_a_one_line_error():
    from spectune.errors import ProfileError

    rows = _real_prompt_rows(0.0165, 0.0029)
    look = rows["stage"].str.startswith("lookup")
    rows.loc[look, ["drafts", "draft_tokens"]] = 0
    rows.loc[look, "tokens_per_row_step"] = 1.0
    grid = EngineGrid(batch_sizes=(1,), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=1, passes=1)
    with pytest.raises(ProfileError, match="no lookup stage drafted at batch size 1") as e:
        fit_latency(rows, MODELS, grid)
    assert "\n" not in str(e.value)


def test_speculative_starts_are_priced_on_their_own_target_step():
    """llama.cpp serves speculative starts with --kv-unified, which cost its target alone ~10 % at b = 8 on the
    Emerald Rapids guest: the ``target-spec`` stage (the target alone served so) is the base of the verification
    line, and the plain start's step is kept apart (``plain_steps``) to price the target alone."""
    from spectune.calibration.engine import plain_steps

    flag = 1.12
    rows = _real_prompt_rows(0.0165, 0.0029)
    spec = rows["stage"] != "target"
    rows.loc[spec, "step_s"] += (flag - 1) * L1  # every speculative start pays the flag's share of the step
    alone = rows[rows["stage"] == "target"].assign(stage="target-spec", step_s=L1 * flag)
    rows = pd.concat([rows, alone], ignore_index=True)
    rows["decode_goodput"] = 1.0 / rows["step_s"]  # the client saw the same steps
    grid = EngineGrid(batch_sizes=(1,), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=1, passes=1)
    lat = fit_latency(rows, MODELS, grid)
    target = lat[lat["model"] == "target"].set_index("k")["median_s"]
    assert target[1] == pytest.approx(L1 * flag) and target[2] == pytest.approx(L1 * flag + 0.0165 + 0.0029)
    draft = lat[lat["model"] == "draft"].set_index("k")["median_s"]
    assert draft[0] == pytest.approx(TURN) and draft[1] == pytest.approx(PER)
    assert "as a speculative start serves it" in lat[lat["model"] == "target"]["note"].iloc[0]
    assert plain_steps(rows, grid) == {"1": pytest.approx(L1)}
    assert plain_steps(rows[rows["stage"] != "target-spec"], grid) == {}  # one start for both: L(b, 1) is the plain one


# Run y's b = 8 stages (llama.cpp b11434, Emerald Rapids guest): (stage, draft, K, p, f, fastest step in ms)
RUN_Y_B8 = [("target", "", 0, 0.0, 0.0, 56.0), ("target-spec", "", 0, 0.0, 0.0, 67.3),
            ("lookup-k2", "", 2, 0.2151, 0.4269, 86.1), ("lookup-k4", "", 4, 0.1856, 0.7058, 82.4),
            ("lookup-k8", "", 8, 0.1613, 1.1792, 97.0), ("draft-k1", "draft", 1, 0.9741, 0.9741, 95.5),
            ("draft-k4", "draft", 4, 0.9780, 3.8440, 189.5), ("draft-k8", "draft", 8, 0.9821, 7.4487, 295.3)]


def _run_y_prices(draft_ks):
    """(each stage's price from the fit of run y's b = 8 stages with the draft at ``draft_ks``, in s; the draft's
    (F, v))."""
    grid = EngineGrid(batch_sizes=(8,), lookup_ks=(2, 4, 8), draft_ks=draft_ks, repeats=1, passes=1)
    stages = [s for s in RUN_Y_B8 if not s[1] or s[2] in draft_ks]
    rows = pd.DataFrame([dict(zip(ROW_COLUMNS, [name, d, k, 8, 0, 80.0, ms / 1e3, 1.0 + f, 100, 100 * p, 100 * f, 0,
                                                8e3 / ms])) for name, d, k, p, f, ms in stages], columns=ROW_COLUMNS)
    lat = fit_latency(rows, MODELS, grid).set_index(["model", "k"])["median_s"]
    L = lambda k: lat[("target", k)]  # noqa: E731
    J, u = L(2) - L(1) - (L(3) - L(2)), L(3) - L(2)
    turn, fwd = lat.get(("draft", 0), 0.0), lat[("draft", 1)]
    assert L(1) == pytest.approx(0.0673)
    price = {name: L(1) + J * p + u * f + ((turn + fwd * k) if d else 0.0) for name, d, k, p, f, _ in RUN_Y_B8[2:]}
    return price, (turn, fwd)


def test_draft_stages_pin_the_price_of_a_drafting_row():
    """The lookups, drafting in a fifth of the row-steps, alone fit J = 37.9 ms a drafting row at b = 8, which
    prices a step where every row drafts one token above the draft stage at K = 1 that measured it (95.5 ms with
    the draft's forwards), and clamped the draft's cost at 0. Fitted with the draft stages, every stage's price is
    within 10 % of its step and the draft costs something."""
    price, (turn, fwd) = _run_y_prices((1, 4, 8))
    assert turn + fwd > 1e-3
    for name, _, _, _, _, ms in RUN_Y_B8[2:]:
        assert price[name] == pytest.approx(ms / 1e3, rel=0.10), name


def test_a_draft_at_one_k_is_priced_per_token():
    """Measured at K = 4 only, the draft's step cost F and per-token cost v are one number; the fit took F (the
    first it tried) and priced the forward at the floor, so K = 8 came out at 253 ms against the 295 measured.
    Per token it is within 10 %."""
    price, (turn, fwd) = _run_y_prices((4,))
    assert turn == 0.0 and fwd > 1e-3
    assert price["draft-k4"] == pytest.approx(0.1895, rel=0.01)
    assert price["draft-k8"] == pytest.approx(0.2953, rel=0.10)


def test_steps_are_priced_as_the_client_sees_them():
    """At b = 8 vLLM's client got 0.80 of the target alone's engine steps (Emerald Rapids guest, run v2): a stage
    whose client goodput is 0.8 of what its steps and accepted tokens give is priced at step / 0.8, the target's
    line and the draft's price alike; a measurement without a client goodput keeps the engine's step, and
    ``steps="engine"`` prices the engine's own."""
    from dataclasses import replace

    from spectune.calibration.engine import client_steps, plain_steps

    rows = _real_prompt_rows(0.0165, 0.0029)
    rows["accepted"] = (rows["drafts"] * 0.5).round()  # a step gains 1 + accepted / intervals tokens a row
    rows["decode_goodput"] = (1.0 + rows["accepted"] / rows["intervals"]) / rows["step_s"] * 0.8
    grid = EngineGrid(batch_sizes=(1,), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=1, passes=1)
    assert client_steps(rows)["step_s"].to_numpy() == pytest.approx(rows["step_s"].to_numpy() / 0.8)
    lat = fit_latency(rows, MODELS, grid)
    target = lat[lat["model"] == "target"].set_index("k")["median_s"]
    assert target[1] == pytest.approx(L1 / 0.8) and target[2] == pytest.approx((L1 + 0.0165 + 0.0029) / 0.8)
    draft = lat[lat["model"] == "draft"].set_index("k")["median_s"]
    assert draft[0] == pytest.approx(TURN / 0.8) and draft[1] == pytest.approx(PER / 0.8)
    engine = fit_latency(rows, MODELS, replace(grid, steps="engine"))
    assert engine[engine["model"] == "target"].set_index("k")["median_s"][1] == pytest.approx(L1)
    blind = rows.assign(decode_goodput=float("nan"))
    assert client_steps(blind)["step_s"].tolist() == rows["step_s"].tolist()
    spec = pd.concat([rows, rows[rows["stage"] == "target"].assign(stage="target-spec")], ignore_index=True)
    assert plain_steps(spec, grid) == {"1": pytest.approx(L1 / 0.8)}
    assert plain_steps(spec, replace(grid, steps="engine")) == {"1": pytest.approx(L1)}


def test_engine_steps_are_client_or_engine():
    from spectune.errors import ConfigError

    with pytest.raises(ConfigError, match="engine steps must be one of client, engine, got 'wall'"):
        EngineGrid(steps="wall").checked()


def test_a_stage_step_is_made_from_its_measurements_as_the_grid_says():
    """Run c1's target alone at b = 8 (llama.cpp b11434 on the Emerald Rapids guest, client steps, ms; two starts of
    three measurements): its fastest, 51.1 ms (156 tok/s), was never reached again (the grid's fastest of three
    rounds: 130 tok/s at best). The lower quartile (the expected fastest of three runs) and the median of the fastest
    start are less lucky."""
    from dataclasses import replace

    from spectune.calibration.engine import stage_step

    m = pd.DataFrame({"step_s": [61.58, 51.13, 58.49, 72.23, 71.90, 59.34], "repeat": range(6)})
    grid = EngineGrid(repeats=3, passes=2)
    assert stage_step(m, grid) == 51.13
    assert stage_step(m, replace(grid, stat="quartile")) == pytest.approx(51.13 + 0.75 * (58.49 - 51.13))
    assert stage_step(m, replace(grid, stat="fastest-start")) == pytest.approx(58.49)
    assert stage_step(m.iloc[:1], replace(grid, stat="quartile")) == 61.58  # one measurement is its own quartile


@pytest.mark.parametrize("stat", ["fastest", "quartile", "fastest-start", "paired"])
def test_the_fit_prices_every_stage_on_the_grids_statistic(stat):
    """Every stage measured at its line's step in one start and 1.5x it in the other: each statistic prices the
    quiet start's line and draft."""
    from dataclasses import replace

    quiet = _real_prompt_rows(0.0165, 0.0029)
    starts = pd.concat([quiet.assign(repeat=r) for r in range(3)]
                       + [quiet.assign(repeat=r, step_s=quiet["step_s"] * SLOW) for r in range(3, 6)],
                       ignore_index=True)
    grid = EngineGrid(batch_sizes=(1,), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=3, passes=2, stat=stat)
    lat = fit_latency(starts, MODELS, replace(grid, steps="engine"))
    target = lat[lat["model"] == "target"].set_index("k")["median_s"]
    assert target[1] == pytest.approx(L1) and target[2] == pytest.approx(L1 + 0.0165 + 0.0029)
    draft = lat[lat["model"] == "draft"].set_index("k")["median_s"]
    assert draft[0] == pytest.approx(TURN) and draft[1] == pytest.approx(PER)


def test_paired_steps_keep_a_rounds_stages_together():
    """Rounds in turn (``--engine-together``): the host ran round 1 at 1.5x and round 2 at 1.2x, and the lookup's
    round 0 drew a slow moment of its own (2.6x the target where the other rounds ran 2.0x). The fastest prices the
    lookup at its round 2, 24 ms (2.4x the target's fastest); paired, at the target's fastest times the median
    ratio, 20 ms. A measurement whose round has no target alone keeps its own step."""
    from dataclasses import replace

    from spectune.calibration.engine import paired_steps, stage_step

    rows = pd.DataFrame({"stage": ["target"] * 3 + ["lookup-k4"] * 4, "batch": [1] * 7,
                         "repeat": [0, 1, 2, 0, 1, 2, 3], "step_s": [10.0, 15.0, 12.0, 26.0, 30.0, 24.0, 17.0]})
    grid = EngineGrid(repeats=3, passes=2)
    look = rows[rows["stage"] == "lookup-k4"]
    assert stage_step(look, grid) == 17.0
    assert stage_step(look.iloc[:3], grid) == 24.0
    paired = paired_steps(rows)
    assert paired["step_s"].tolist() == pytest.approx([10.0, 10.0, 10.0, 26.0, 20.0, 20.0, 17.0])
    assert stage_step(paired[paired["stage"] == "lookup-k4"].iloc[:3], replace(grid, stat="paired")) == 20.0


def test_ratio_spread_is_the_median_stages_round_to_round_sd_beside_the_target_alone():
    """The host's level moving every stage of a round alike leaves no spread; a stage whose ratio to the target
    alone moves between rounds has one; a stage measured in one round only is left out."""
    import numpy as np

    from spectune.calibration.engine import ratio_spread

    level = [1.0, 1.5, 1.2]
    rows = pd.DataFrame({"stage": ["target"] * 3 + ["lookup-k4"] * 3 + ["draft-s-k1"] * 3 + ["lookup-k8"],
                         "batch": [8] * 10, "repeat": [0, 1, 2] * 3 + [0],
                         "step_s": [10 * x for x in level] + [20 * x for x in level]
                         + [30 * level[0], 30 * 1.1 * level[1], 30 * 0.9 * level[2]] + [50.0]})
    want = float(np.median([0.0, np.std(np.log([1.0, 1.1, 0.9]), ddof=1)]))
    assert ratio_spread(rows, EngineGrid(steps="engine")) == {"8": pytest.approx(want)}


def test_a_later_sets_stages_pair_with_their_own_target_alone():
    """--engine-together 2 over three stages: the draft's set carried the target alone, and the host ran that set at
    1.5x. Paired, the draft is priced at its ratio to the target beside it (3x the level, 30 ms), not to set 1's
    (4.5x); the carried target is that set's level only, in no price and no spread."""
    from dataclasses import replace

    from spectune.calibration.engine import priced_steps, ratio_spread

    rows = pd.DataFrame({"stage": ["target", "lookup-k4"] * 2 + ["target", "draft-s-k1"] * 2, "batch": [1] * 8,
                         "repeat": [0, 0, 1, 1] * 2, "set": [0] * 4 + [1] * 4,
                         "step_s": [10.0, 20.0, 11.0, 22.0, 15.0, 45.0, 16.0, 48.0]})
    grid = EngineGrid(repeats=2, passes=1, steps="engine", stat="paired")
    priced = priced_steps(rows, grid)
    assert priced["stage"].tolist() == ["target", "lookup-k4", "target", "lookup-k4", "draft-s-k1", "draft-s-k1"]
    assert priced["step_s"].tolist() == pytest.approx([10.0, 20.0, 10.0, 20.0, 30.0, 30.0])
    assert ratio_spread(rows, grid) == {"1": pytest.approx(0.0)}
    fastest = priced_steps(rows, replace(grid, stat="fastest"))
    assert fastest["step_s"].tolist() == [10.0, 20.0, 11.0, 22.0, 45.0, 48.0]  # as measured, the level left out


def test_the_target_alone_joins_every_set_of_stages():
    from spectune.calibration.engine import stage_sets, stages

    names = lambda sets: [[st.name for st in s] for s in sets]  # noqa: E731
    every = stages(MODELS, GRID)  # target, 3 lookups, 3 draft stages
    assert names(stage_sets(every, 4)) == [["target", "lookup-k2", "lookup-k4", "lookup-k8"],
                                           ["target", "draft-k1", "draft-k4", "draft-k8"]]
    assert names(stage_sets(every, 7)) == [[st.name for st in every]]  # one set: as they come
    assert names(stage_sets(every, 1)) == [[st.name] for st in every]  # one start at a time
    assert names(stage_sets(every[1:], 3)) == [["lookup-k2", "lookup-k4", "lookup-k8"], ["draft-k1", "draft-k4",
                                                                                          "draft-k8"]]


def test_engine_step_stat_is_one_of_four():
    from spectune.errors import ConfigError

    with pytest.raises(ConfigError, match="engine step statistic must be one of fastest, quartile, fastest-start, "
                                          "paired, got 'mean'"):
        EngineGrid(stat="mean").checked()


def test_two_drafts_of_one_name_get_stages_of_their_own():
    """Stage names key what a resumed calibration has measured: two drafts named alike must not share them."""
    from spectune.calibration.engine import stages

    grid = EngineGrid(draft_ks=(1, 2), lookup_ks=(4,))
    names = [st.name for st in stages(["a/draft", "b/draft", "target"], grid)]
    assert names == ["target", "lookup-k4", "a/draft-k1", "a/draft-k2", "b/draft-k1", "b/draft-k2"]
    assert [st.name for st in stages(["x/draft-s", "target"], grid)][-2:] == ["draft-s-k1", "draft-s-k2"]
