"""The scripts in benchmarks/ reproduce the tables of docs/benchmarks.md: each runs here against the current code
(the Python ones on the bundled profile; the campaign's shell script with ``python`` recorded, each spectune command
it would run parsed by the CLI), so none can rot silently."""
from __future__ import annotations

import importlib.util
import os
import shlex
import stat
import subprocess
from pathlib import Path

import click
import pytest

from spectune.profile import load_profile
from spectune.profile.lookup import BUNDLED_DIR
from spectune.tune import CostModel

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ZEN4 = BUNDLED_DIR / "draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16"


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_benchmark_is_tested():
    assert {p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")} == {
        "confirm.py", "engines.sh", "error_budget.py", "policy_oracle.py", "reprice.py", "tokens_per_forward.py",
        "vllm_spread.py"}


@pytest.mark.parametrize("extra", [{}, {"WORKLOADS": "mix", "ENGINE_ARGS": "--dtype float32 --enforce-eager"}])
def test_engine_campaign_runs_commands_the_cli_takes(tmp_path, extra):
    """engines.sh with a ``python`` that records its arguments: every spectune command parses with the current
    options (a renamed or removed option fails here), two per engine; WORKLOADS and ENGINE_ARGS reach them."""
    from spectune.cli import cli

    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$(printf "%q " "$@")" >> {shlex.quote(str(log))}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", **extra}
    out = subprocess.run(["bash", str(BENCHMARKS / "engines.sh"), str(tmp_path / "out"), str(ZEN4)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    assert [c[2:4] for c in calls] == [["calibrate", "--engine"], ["bench", "--engine"]] * 2
    (tmp_path / "out" / "ep-vllm" / "profile.json").parent.mkdir()
    (tmp_path / "out" / "ep-vllm" / "profile.json").write_text("{}")  # a kept profile: the advice only
    again = subprocess.run(["bash", str(BENCHMARKS / "engines.sh"), str(tmp_path / "out"), str(ZEN4), "vllm"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and [shlex.split(line)[2] for line in log.read_text().splitlines()][4:] == ["bench"]
    for argv in calls:
        assert argv[:2] == ["-m", "spectune"]
        group = click.Context(cli, **cli.context_settings)  # a lone make_context caches a `--help`-only option
        cmd = cli.get_command(group, argv[2])
        ctx = cmd.make_context(argv[2], argv[3:], parent=group)  # a usage error raises here
        assert ctx.params["engine"] in ("vllm", "llamacpp")
        assert ctx.params["engine_args"] == extra.get("ENGINE_ARGS", "")
        if argv[2] == "bench":
            assert ctx.params["workload"] == extra.get("WORKLOADS", "mix,code,edit")


@pytest.mark.slow
def test_policy_oracle_prices_every_policy_and_the_oracle_beats_fixed():
    oracle = script("policy_oracle")
    prof = load_profile(ZEN4, check_hardware=False)
    rows = {name: x for name, x, _ in oracle.rows(prof, None, "model")}
    assert len(rows) == 20 and rows["oracle g<=8"] >= max(x for n, x in rows.items() if n.startswith("fixed"))
    hit, auc = oracle.q_auc(CostModel(prof, None, max_new_tokens=32))
    assert 0 < hit < 1 and 0.5 < auc <= 1  # the draft's q tells accepted tokens from rejected ones


def test_tokens_per_forward_prices_each_config():
    tpf = script("tokens_per_forward")
    priced = tpf.priced(str(ZEN4))
    assert len(priced) == len(tpf.CONFIGS) and all(1.0 <= t <= 9.0 for t in priced)
