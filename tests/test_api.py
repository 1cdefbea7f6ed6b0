"""The Python API runs one ``DecodeConfig`` (and keywords over it): every setting is checked once, by the config,
before any model loads; ``build_decoder``, ``generate`` and the tuner's and bench's measurements take it whole."""
import pytest

from spectune import api
from spectune.config import DecodeConfig
from spectune.decoder import build_decoder, decode_config, encode
from spectune.decoding.combine import Combination
from spectune.errors import ConfigError


def test_keywords_go_over_a_config_and_none_keeps_its_value(tiny_models):
    models = [tiny_models["s"], tiny_models["l"]]
    cfg = DecodeConfig(models=("a", "b"), method="sd", gamma=(3, 1), max_new_tokens=8, seed=2)
    run = decode_config(models, cfg, {"method": "cos", "gamma": None, "policy": None})
    assert (run.method, run.gamma, run.seed, run.max_new_tokens) == ("cos", (3, 1), 2, 8)
    assert run.models == (models[0].name, models[1].name)  # the models that run, not the file's names
    assert decode_config(models, None, {}).method == DecodeConfig().method  # the defaults are the config's


def test_generate_runs_a_saved_config_with_a_keyword_over_it(tiny_dirs, tmp_path):
    models = [str(tiny_dirs["s"]), str(tiny_dirs["l"])]
    cfg = DecodeConfig(models=("draft", "target"), method="sd", gamma=(2, 1), max_new_tokens=6)
    path = cfg.save(tmp_path / "c.json")
    sd = api.generate(models, "w1 w2", DecodeConfig.load(path), ignore_eos=True)
    std = api.generate(models, "w1 w2", method="standard", max_new_tokens=6, ignore_eos=True)
    assert len(sd.token_ids) == 6 and sd.token_ids == std.token_ids  # greedy: sd is the target alone's output
    assert sd.stats.models[0].proposed > 0  # and the draft did propose (the config's method ran)
    short = api.generate(models, "w1 w2", DecodeConfig.load(path), max_new_tokens=3, ignore_eos=True)
    assert short.token_ids == sd.token_ids[:3]
    many = api.generate_batch(models, ["w1 w2", "w3"], DecodeConfig.load(path), ignore_eos=True)
    assert many.results[0].token_ids == sd.token_ids  # prompt i seeded seed + i, whatever its batch


def test_an_unknown_or_bad_setting_is_one_error_before_any_model_loads(monkeypatch):
    monkeypatch.setattr(api, "load_models", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ConfigError, match="unknown decoding setting.*gama"):
        api.generate(["x", "y"], "p", gama=3)
    with pytest.raises(ConfigError, match="top-p"):
        api.generate(["x", "y"], "p", top_p=2.0)
    with pytest.raises(ConfigError, match="gamma has 3 values but there are 2 models"):
        api.generate(["x", "y"], "p", DecodeConfig(models=("a", "b", "c"), gamma=(4, 1, 1)))


def test_a_custom_combination_object_travels_in_the_config(tiny_models):
    models = [tiny_models["s"], tiny_models["l"]]
    mean = Combination.custom(lambda xs: 0.5 * xs[0] + 0.5 * xs[1], 2)
    cfg = decode_config(models, None, {"method": "cos", "combine": mean, "gamma": [2, 1]})
    assert cfg.combination is mean and decode_config(models, cfg, {"gamma": [3, 1]}).combination is mean
    ids = encode(models[-1].tokenizer, "w3 w7 w1")
    ref = build_decoder(models, method="standard", combine="we:0.5,0.5", ignore_eos=True).generate(ids, 10, 0)[0]
    assert build_decoder(models, cfg, ignore_eos=True).generate(ids, 10, 0)[0] == ref


def test_the_config_holds_its_parsed_proposer_and_policy_once():
    from spectune.decoding.policy import ConfidencePolicy
    from spectune.decoding.proposers import MODEL, NgramProposer

    cfg = DecodeConfig(models=("a", "b"), method="sd", gamma=(4, 1), proposer="ngram+model:1,3,8",
                       policy="confidence:0.4")
    assert isinstance(cfg.proposing, NgramProposer) and cfg.proposing.fallback and cfg.proposing is cfg.proposing
    assert isinstance(cfg.draft_policy, ConfidencePolicy) and cfg.draft_policy is cfg.draft_policy
    cfg.proposer, cfg.policy = "model", "fixed"  # a changed text is parsed again, never a stale object
    assert cfg.proposing is MODEL and cfg.proposing.drafts and not cfg.proposing.looks_up
    assert cfg.draft_policy.spec == "fixed"


def test_bench_and_simulate_settings_objects_take_keywords_over_them():
    from spectune.bench import RunSettings
    from spectune.tune.simulate import SimOptions, simulate

    assert RunSettings.given(RunSettings(workload="code"), {"repeats": 5}) == RunSettings(workload="code", repeats=5)
    with pytest.raises(ConfigError, match="bench: .*repeets"):
        RunSettings.given(None, {"repeets": 5})
    draft = [[1.0, 0.0]] * 4  # the first drafted token accepted, the second never
    a = simulate("sd", (2, 1), [1], [draft, None], options=SimOptions(max_new_tokens=30, seed=1))
    b = simulate("sd", (2, 1), [1], [draft, None], max_new_tokens=30, seed=1)
    assert (a.tokens, a.rounds) == (b.tokens, b.rounds) and a.rounds > 0
