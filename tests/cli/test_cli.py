"""The CLI: every command has help with an example; bad input is one line on stderr with exit status 2."""
import json

import pytest
from click.testing import CliRunner

from spectune.cli import cli


def run(args):
    return CliRunner().invoke(cli, args)


def test_every_command_has_help_with_an_example():
    assert run(["--help"]).exit_code == 0
    for name, cmd in cli.commands.items():
        res = run([name, "--help"])
        assert res.exit_code == 0, name
        assert "Example:" in res.output, f"'{name}' help lacks an Example"


def test_generate_json_is_deterministic_and_matches_api(tiny_dirs):
    models = f"{tiny_dirs['s']},{tiny_dirs['l']}"
    args = ["generate", "--models", models, "--method", "cos", "--combine", "we:0.5,0.5", "--gamma", "3,2",
            "--temperature", "1", "--seed", "7", "--max-new-tokens", "12", "--prompt", "w1 w2", "--json",
            "--ignore-eos"]
    a, b = run(args), run(args)
    assert a.exit_code == 0, a.output
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    assert da["token_ids"] == db["token_ids"] and len(da["token_ids"]) == 12
    assert set(da) == {"token_ids", "text", "stats", "dtypes", "runtime", "compile_seconds"}
    assert da["stats"]["method"] == "cos" and da["runtime"] == "eager"  # --runtime auto on a CPU
    assert set(da["dtypes"].values()) == {"float32"}  # the tiny models' configs declare float32


def test_generate_config_file_round_trip(tiny_dirs, tmp_path):
    from spectune.config import DecodeConfig

    cfg = DecodeConfig(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), method="sd", combine="cd:0.2",
                       gamma=(2, 1), max_new_tokens=6)
    path = cfg.save(tmp_path / "c.json")
    assert DecodeConfig.load(path) == cfg
    res = run(["generate", "--config", str(path), "--prompt", "w3", "--json", "--ignore-eos"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["stats"]["method"] == "sd" and len(json.loads(res.stdout)["token_ids"]) == 6


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--combine", "xx"], "unknown combination"),
        (["--combine", "we:0.7,0.7"], "sum to 1"),
        (["--combine", "we:-0.5,1.5"], ">= 0"),
        (["--combine", "cd:-1"], "mu must be >= 0"),
        (["--gamma", "0,1"], "gamma"),
        (["--gamma", "a"], "gamma"),
        (["--top-p", "0"], "top-p"),
        (["--temperature", "-1"], "temperature"),
    ],
)
def test_bad_settings_are_one_line_errors(tiny_dirs, extra, needle):
    res = run(["generate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--prompt", "w1", *extra])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.output


def test_unknown_method_is_rejected(tiny_dirs):
    res = run(["generate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--prompt", "w1", "--method", "x"])
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.parametrize("which", ["missing", "empty_dir", "other_vocab"])
def test_bad_models_are_one_line_errors(tiny_dirs, tmp_path, which):
    bad = {"missing": str(tmp_path / "nope"), "empty_dir": str(tmp_path), "other_vocab": str(tiny_dirs["other"])}
    res = run(["generate", "--models", f"{bad[which]},{tiny_dirs['l']}", "--prompt", "w1"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    expect = {"missing": "not found", "empty_dir": "no transformers model", "other_vocab": "differ"}[which]
    assert expect in lines[0]


def test_corrupt_config_file_is_one_line_error(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("{not json")
    res = run(["generate", "--config", str(p), "--prompt", "w1"])
    assert res.exit_code == 2 and "not valid JSON" in res.stderr


def test_api_functions_survive_their_subpackage_imports():
    """spectune.export / spectune.calibrate are the API's functions; their subpackages have names of their own
    (spectune.artifacts, spectune.calibration), so importing them shadows nothing."""
    import spectune
    import spectune.calibration.run  # noqa: F401
    import spectune.artifacts._core  # noqa: F401

    assert callable(spectune.export) and callable(spectune.calibrate)
    assert spectune.export.__module__ == "spectune.artifacts._core"
    assert spectune.calibrate.__module__ == "spectune.calibration.run"


def test_cuda_device_without_cuda_is_one_line(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = run(["generate", "--prompt", "x", "--device", "cuda", "--models", "draft-s,smollm2-135m"])
    assert res.exit_code == 2 and "needs CUDA" in res.output and "Traceback" not in res.output
    res = run(["generate", "--prompt", "x", "--device", "tpu9"])
    assert res.exit_code == 2 and "unknown device" in res.output


def test_the_cli_prints_a_warning_on_one_line(monkeypatch):
    """A profile measured on another machine warns; from the command line that is one line, with no source line."""
    import warnings

    import spectune.cli as C
    from spectune.profile import ProfileHardwareWarning

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    seen = []
    monkeypatch.setattr(C, "cli", lambda **kw: seen.append(warnings.formatwarning(
        "profile 'p' does not describe this machine", ProfileHardwareWarning, "spectune/cli.py", 349, "prof = ...")))
    C.main()
    assert seen == ["warning (ProfileHardwareWarning): profile 'p' does not describe this machine\n"]


@pytest.mark.parametrize("extra, says", [((), "the same command with --resume continues"),
                                         (("--resume",), "run the same command again to continue")])
def test_an_interrupted_calibration_says_how_to_continue(monkeypatch, tmp_path, extra, says):
    import spectune.calibration

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(spectune.calibration, "calibrate", interrupted)
    res = CliRunner().invoke(cli, ["calibrate", "--out", str(tmp_path / "p"), *extra])
    assert res.exit_code == 130 and f"interrupted; what was measured is kept: {says}" in res.output


def test_an_interrupted_generate_says_only_that(monkeypatch):
    import spectune.api

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(spectune.api, "generate_batch", interrupted)
    res = CliRunner().invoke(cli, ["generate", "--prompt", "x"])
    assert res.exit_code == 130 and res.output.strip().splitlines()[-1] == "interrupted"
