"""End to end on the real bundled family: `spectune generate` runs and every method matches standard (greedy)."""
import json

import pytest
from click.testing import CliRunner

from spectune.cli import cli

PROMPT = "def is_prime(n):"


@pytest.mark.slow
def test_generate_bundled_family_is_exact_under_greedy():
    outs = {}
    for method in ["standard", "sd", "cos"]:
        res = CliRunner().invoke(cli, ["generate", "--models", "draft-s,smollm2-135m", "--method", method,
                                       "--gamma", "3,1", "--max-new-tokens", "10", "--prompt", PROMPT, "--json"])
        assert res.exit_code == 0, res.output
        d = json.loads(res.stdout)
        assert d["text"] and d["stats"]["output_tokens"] == len(d["token_ids"]) > 0
        outs[method] = d["token_ids"]
    assert outs["sd"] == outs["standard"] == outs["cos"]


@pytest.mark.slow
def test_generate_default_family_three_models():
    res = CliRunner().invoke(cli, ["generate", "--max-new-tokens", "6", "--prompt", PROMPT, "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)["stats"]
    assert [m["name"] for m in stats["models"]] == ["draft-s", "draft-m", "smollm2-135m"]
