"""--proposer and --policy: validated in DecodeConfig and the CLI (one-line errors), JSON round trip, and a run."""
import json

import pytest
from click.testing import CliRunner

from spectune.cli import cli
from spectune.config import DecodeConfig
from spectune.errors import ConfigError


def run(args):
    return CliRunner().invoke(cli, args)


def test_config_round_trips_proposer_and_policy(tmp_path):
    ng = DecodeConfig(models=("t",), method="sd", gamma=(4,), proposer="ngram:1,3")
    pol = DecodeConfig(models=("d", "t"), method="cos", policy="confidence:0.25")
    hyb = DecodeConfig(models=("d", "t"), method="sd", gamma=(3, 1), proposer="ngram+model:1,3", policy="heuristic")
    for cfg in (ng, pol, hyb):
        assert DecodeConfig.load(cfg.save(tmp_path / "c.json")) == cfg
    assert hyb.proposer == "ngram+model:1,3,8"  # K written out (the default lookup length)
    assert (ng.proposer, ng.policy, pol.proposer, pol.policy) == ("ngram:1,3", "fixed", "model", "confidence:0.25")
    assert DecodeConfig.from_dict({"models": ["d", "t"], "method": "sd"}).proposer == "model"  # older files


@pytest.mark.parametrize("kw,needle", [
    (dict(models=("d", "t"), method="cos", proposer="ngram:1,3"), "runs with method sd"),
    (dict(models=("t",), method="sd", proposer="ngram:3,1"), "N_MIN <= N_MAX"),
    (dict(models=("d", "t"), method="sd", proposer="eagle"), "unknown proposer"),
    (dict(models=("t",), method="sd"), "at least 2 models"),
    (dict(models=("d", "c", "t"), method="sv", policy="heuristic"), "needs a drafting proposer"),
    (dict(models=("t",), method="sd", proposer="ngram:1,2", policy="heuristic"), "needs a drafting proposer"),
    (dict(models=("t",), method="sd", proposer="ngram+model:1,2"), "at least 2 models"),
    (dict(models=("d", "t"), method="cos", proposer="ngram+model:1,2"), "runs with method sd"),
    (dict(models=("d", "t"), method="sd", proposer="ngram+model:1,2,0"), "K must be >= 1"),
    (dict(models=("d", "t"), method="sd", proposer="ngram+model:1"), "expected ngram"),
    (dict(models=("d", "t"), method="sd", policy="confidence:2"), "in (0, 1)"),
])
def test_bad_proposer_or_policy_is_a_config_error(kw, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        DecodeConfig(**kw)


def test_generate_with_ngram_alone_and_a_policy(tiny_dirs):
    base = ["--prompt", "w1 w2 w3 w1 w2 w3 w1", "--json", "--ignore-eos", "--max-new-tokens", "10"]
    res = run(["generate", "--models", str(tiny_dirs["l"]), "--proposer", "ngram:1,3", "--gamma", "4", *base])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["stats"]["method"] == "sd" and out["stats"]["models"][-1]["name"] == "ngram:1,3"
    std = run(["generate", "--models", str(tiny_dirs["l"]), "--method", "standard", *base])
    assert json.loads(std.stdout)["token_ids"] == out["token_ids"]
    pol = run(["generate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--method", "sd", "--policy",
               "heuristic", *base])
    assert pol.exit_code == 0 and json.loads(pol.stdout)["token_ids"] == out["token_ids"]


@pytest.mark.parametrize("extra,needle", [
    (["--proposer", "ngram:0,2"], "N_MIN"),
    (["--proposer", "ngram:1,2", "--method", "cos"], "runs with method sd"),
    (["--policy", "sometimes"], "unknown policy"),
])
def test_bad_cli_values_are_one_line_errors(tiny_dirs, extra, needle):
    res = run(["generate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--prompt", "w1", *extra])
    assert res.exit_code == 2 and needle in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_export_carries_proposer_and_policy():
    """The export plan keeps prompt lookup and the policy (engines: tests/export)."""
    from spectune.artifacts._plan import plan_for

    plan, _ = plan_for(DecodeConfig(models=("org/t",), method="sd", gamma=(4,), proposer="ngram:1,3"))
    assert (plan.ngram, plan.gamma, plan.draft) == ((1, 3), 4, None)
    plan, _ = plan_for(DecodeConfig(models=("org/d", "org/t"), method="sd", gamma=(4, 1), policy="heuristic"))
    assert (plan.policy, plan.gamma, plan.draft) == ("heuristic", 4, "org/d")


def test_default_proposer_and_policy_are_not_written():
    d = DecodeConfig(models=("d", "t"), method="sd").to_dict()
    assert "proposer" not in d and "policy" not in d
    assert DecodeConfig(models=("d", "t"), method="sd", policy="heuristic").to_dict()["policy"] == "heuristic"
