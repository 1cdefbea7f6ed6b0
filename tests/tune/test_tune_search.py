"""Studies: shared storage without lost or duplicated trials, constraints, Pareto front, schedule, masking."""
import threading

import optuna
import pytest

from spectune.config import DecodeConfig
from spectune.tune.cost import CostModel
from spectune.tune.search import Tuner, pareto_trials, schedule, top_trials
from spectune.tune.study import WORKER_ATTR, StudyError, WriteBehind, mask_url, open_study, push_trials, sqlite_url
from spectune.tune.space import SearchSpace
from tune_synth import make_profile


def _tuner(profile, **kw):
    cm = CostModel(profile)
    space = SearchSpace(tuple(profile.models), profile.combination, tuple(cm.batch_sizes), cm.gamma_max)
    return Tuner(cm, space, **kw)


def test_mask_url_hides_the_password():
    assert mask_url("postgresql://bob:s3cret@db.example:5432/st") == "postgresql://bob:***@db.example:5432/st"
    assert "s3cret" not in mask_url("mysql+pymysql://u:s3cret@h/x")
    assert mask_url("sqlite:///x.db") == "sqlite:///x.db"


def test_bad_storage_is_one_line_without_password():
    with pytest.raises(StudyError) as e:
        open_study("postgresql://bob:s3cret@127.0.0.1:1/none", "s", ["maximize"])
    assert "s3cret" not in str(e.value) and "\n" not in str(e.value)


def test_push_trials_round_trip(tmp_path):
    """Finished trials reach a shared study through Optuna's public API with everything a study reads back:
    params, values, user attributes, state; each carries the token of the run that added it."""
    local = optuna.create_study(directions=["maximize", "minimize"])
    local.optimize(lambda t: (t.suggest_int("g", 1, 9), t.suggest_categorical("m", ["x", "y"]) == "x"
                              or t.set_user_attr("cfg", {"a": [1, 2]}) or 0.5), n_trials=7)
    shared = open_study(sqlite_url(tmp_path / "s.db"), "s", ["maximize", "minimize"])
    nums = push_trials(shared, local.trials)
    assert nums == list(range(7))
    nums2 = push_trials(shared, local.trials[:3], token="run-2")
    assert nums2 == [7, 8, 9]
    got = optuna.load_study(study_name="s", storage=sqlite_url(tmp_path / "s.db")).trials
    for a, b in zip(got, local.trials + local.trials[:3]):
        attrs = dict(a.user_attrs)
        assert attrs.pop(WORKER_ATTR)
        assert (a.params, a.values, attrs, a.state) == (b.params, b.values, b.user_attrs, b.state)
        assert a.datetime_start == b.datetime_start and a.datetime_complete == b.datetime_complete
    assert {t.user_attrs[WORKER_ATTR] for t in got[7:]} == {"run-2"} and got[0].user_attrs[WORKER_ATTR] != "run-2"
    assert not any(b.user_attrs.get(WORKER_ATTR) for b in local.trials)  # the caller's trials are not changed


def _worker(url, seed, n, out, behind=False):
    t = _tuner(make_profile())
    t.seed = seed
    study = open_study(url, "shared", t.directions)  # each worker its own engine / connection pool
    out.append(t.optimize(study, n, sync_every=7, storage=url if behind else None))


@pytest.mark.parametrize("behind", [False, True], ids=["inline", "write-behind"])
def test_two_workers_one_study_no_lost_or_duplicated_trials(tmp_path, behind):
    # two concurrent workers (threads here, processes on two machines in CI with PostgreSQL) on one study; with
    # write-behind each worker's trials reach the study from its own writer process
    url = sqlite_url(tmp_path / "study.db")
    got: list = []
    ws = [threading.Thread(target=_worker, args=(url, s, n, got, behind)) for s, n in ((1, 40), (2, 33))]
    for w in ws:
        w.start()
    for w in ws:
        w.join(timeout=120)
    study = optuna.load_study(study_name="shared", storage=url)
    numbers = [t.number for t in study.trials]
    assert sorted(len(g) for g in got) == [33, 40]
    assert len(numbers) == 73 and sorted(numbers) == list(range(73))
    assert sorted(got[0] + got[1]) == list(range(73))


def test_write_behind_writes_what_push_trials_writes(tmp_path):
    """The writer process stores the same trials, numbered the same way, as push_trials in this process."""
    local = optuna.create_study()
    local.optimize(lambda t: t.suggest_int("g", 1, 9) + (t.set_user_attr("cfg", {"a": [1]}) or 0), n_trials=9)
    url = sqlite_url(tmp_path / "s.db")
    shared = open_study(url, "s", ["maximize"])
    assert push_trials(shared, local.trials[:2], token="inline") == [0, 1]
    w = WriteBehind(url, "s", ["maximize"])
    got = w.push(local.trials[2:5], "behind") + w.push(local.trials[5:], "behind")
    got += w.close()
    assert sorted(got) == list(range(2, 9))
    stored = optuna.load_study(study_name="s", storage=url).trials
    assert [(t.params, t.value, t.user_attrs["cfg"]) for t in stored] == \
        [(t.params, t.value, t.user_attrs["cfg"]) for t in local.trials]
    assert {t.user_attrs[WORKER_ATTR] for t in stored[2:]} == {"behind"}


def test_write_behind_failure_is_one_line_without_password(tmp_path):
    url = sqlite_url(tmp_path / "s.db")
    open_study(url, "s", ["maximize"])
    w = WriteBehind(url, "s", ["minimize"])  # the writer cannot open the study: other objectives
    local = optuna.create_study(direction="minimize")
    local.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    w.push(local.trials, "tok")
    with pytest.raises(StudyError, match="other objectives") as e:
        w.close()
    assert "\n" not in str(e.value)
    assert not WriteBehind.helps(None) and not WriteBehind.helps("sqlite:///:memory:")
    assert not WriteBehind.helps("sqlite://") and not WriteBehind.helps("sqlite:///file:s?mode=memory&uri=true")


def test_search_finds_the_best_and_the_schedule_says_no_speculation_when_it_loses(tmp_path):
    # alpha = 0: every speculative method is slower than standard, at every batch size
    t = _tuner(make_profile(models=("a", "c"), combine="we:0.5,0.5", alpha=0.0))
    study = open_study(None, "x", t.directions)
    t.optimize(study, 60)
    best = top_trials(study, 1)[0]
    assert best.user_attrs["config"]["method"] == "standard"
    sched = schedule(t, study)
    assert [e.batch_size for e in sched] == [1, 2, 4]
    assert all(e.config.method == "standard" and not e.to_dict()["speculate"] for e in sched)
    # alpha = 0.9 with a 10x cheaper proposer: speculation wins everywhere
    t = _tuner(make_profile(models=("a", "c"), combine="we:0.5,0.5", alpha=0.9, base={"a": 0.01, "c": 0.1}))
    study = open_study(sqlite_url(tmp_path / "y.db"), "y", t.directions)
    t.optimize(study, 120)
    best = top_trials(study, 1)[0].user_attrs
    assert best["config"]["method"] != "standard" and best["prediction"]["speedup_vs_standard"] > 2
    assert all(e.config.method != "standard" for e in schedule(t, study))


def test_max_latency_and_pareto(tmp_path):
    prof = make_profile(slope_b=0.6)  # larger batches: more goodput, slower tokens
    t = _tuner(prof, pareto=True)
    study = open_study(None, "p", t.directions)
    t.optimize(study, 150)
    front = pareto_trials(study)
    pts = [(f.user_attrs["prediction"]["goodput"], f.user_attrs["prediction"]["latency_per_token"]) for f in front]
    assert len(pts) >= 2
    for g, lat in pts:  # nothing in the study dominates a front point
        for s in study.trials:
            sg, sl = s.values
            assert not (sg >= g and sl <= lat and (sg > g or sl < lat))
    bound = sorted(lat for _, lat in pts)[len(pts) // 2]
    t2 = _tuner(prof, max_latency=bound)
    s2 = open_study(None, "c", t2.directions)
    t2.optimize(s2, 80)
    best = top_trials(s2, 3)
    assert best and all(b.user_attrs["prediction"]["latency_per_token"] <= bound for b in best)
    assert any(any(c > 0 for c in x.user_attrs["constraints"]) for x in s2.trials)  # the bound did bind


def test_memory_constraint_excludes_batch_sizes():
    prof = make_profile(infeasible={("c", 4)})
    cm = CostModel(prof)
    assert [b for b in cm.batch_sizes if cm.feasible(tuple(prof.models), b)] == [1, 2]
    t = _tuner(prof)
    cfg = DecodeConfig(models=("a", "b", "c"), method="cos", combine=prof.combination, gamma=(2, 1, 1), batch_size=4)
    assert t.evaluate(cfg)[1][0] > 0
