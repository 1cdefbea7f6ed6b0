"""Every option of every command, fed bad values by class: exit 2, one stderr line naming the problem, no
traceback, and no file of the user's changed or deleted.

``SPEC`` lists, per command and option, the classes of values it must reject (``fuzz_helpers.VALUES`` for
typed text; ``path:*`` for the user's paths; ``file:*`` for files with bad content; a few option-specific
classes in ``SPECIAL``). ``test_every_option_is_fuzzed`` fails when a command gains an option the table does
not cover, and ``test_base_invocation_succeeds`` proves each command's base arguments are valid, so the bad
value is what every case's failure comes from.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fuzz_helpers import CLI, VALUES, assert_one_line_error, assert_untouched, snapshot, unlock, user_area
from spectune.cli import cli

FLAG = object()  # an option given without a value


@dataclass(frozen=True)
class Opt:
    classes: tuple[str, ...]
    needles: tuple[str, ...]  # the error line names one of these (or the bad path)
    extra: tuple[str, ...] = ()  # more arguments this option's cases need (e.g. --method sv for --profile)
    drop: tuple[str, ...] = ()  # base options to leave out (e.g. --prompt when fuzzing --prompts)


INT = ("text", "fraction", "nan")  # click's INT type rejects these
REAL_BAD = ("text", "nan", "inf")
IN_PATHS = ("path:dir", "path:missing", "path:under-file")
OUT_PATHS = ("path:file", "path:under-file", "path:unwritable")
JSON_FILES = ("file:not-json", "file:json-list", "file:binary", "path:file")

SPECIAL: dict[str, st.SearchStrategy[str]] = {
    "models:empty": st.sampled_from(["", ",", " , "]),
    "models:one": st.sampled_from(["{s}"]),
    "models:missing": st.sampled_from(["{s},/nonexistent/model", "no-such-model,{l}"]),
    "models:not-model": st.sampled_from(["{user},{l}", "{file},{l}"]),
    "models:other-vocab": st.just("{other},{l}"),
    "models:same": st.just("{s},{s}"),
    "combine:bad": st.sampled_from(["xx", "target:1", "we:nan,nan", "we:inf,-inf", "we:0.7,0.7", "we:-0.5,1.5",
                                    "we:1", "we:a,b", "cd:nan", "cd:inf", "cd:-1", "cd:1,2", "we:1e999,0",
                                    "cd:", "we:0.5,0.5,0"]),
    "choice": st.sampled_from(["nope", "", "STANDARD", "cos,sd"]),
    "device:bad": st.sampled_from(["meta", "tpu9", "cuda:99", "cpu:3", "", "hpu", "lazy", "cuda:-1", "CPU"]),
    "dtype:bad": st.sampled_from(["float99", "nan", "tensor", ""]),
    "gamma:too-many": st.just("1,1,1,1"),
    "workload:bad": st.sampled_from(["nope", "mix,nope", ""]),
    "storage:bad": st.sampled_from(["", "nonsense", "postgresql://u:hunter2@127.0.0.1:1/db",
                                    "mysql://u:hunter2@127.0.0.1:1/db", "sqlite:////nonexistent/dir/x.db"]),
    "study:empty": st.just(""),
    "batch:uncalibrated": st.just("3"),
    "temperature:uncalibrated": st.just("0.5"),
    "methods:bad": st.sampled_from(["nope", "sd,nope", "sv"]),
    "engine-version:bad": st.sampled_from(["0.0.1", "nope", ""]),
    "prompt:empty": st.sampled_from(["", " "]),
    "resume:garbled": st.just("garbled"),
    "proposer:bad": st.sampled_from(["nope", "ngram:3,1", "ngram:x", "ngram:0,2", "model:2"]),
    "policy:bad": st.sampled_from(["nope", "confidence:2", "confidence:nan", "confidence:x", "heuristic:3"]),
    "lookup:bad": st.sampled_from(["nope", "model", "ngram:3,1", "ngram:x", "ngram:0,2", ""]),
}

SPEC: dict[str, dict[str, Opt]] = {
    "generate": {
        "--models": Opt(("models:empty", "models:one", "models:missing", "models:not-model", "models:other-vocab"),
                        ("model", "needs at least", "differ")),
        "--method": Opt(("choice",), ("--method",)),
        "--combine": Opt(("combine:bad",), ("combination", "weights", "mu", "target", "cd", "we")),
        "--dtype": Opt(("choice",), ("--dtype",)),
        "--proposer": Opt(("proposer:bad",), ("proposer",)),
        "--policy": Opt(("policy:bad",), ("policy",)),
        "--gamma": Opt(("text", "zero", "negative", "fraction", "huge", "nan", "gamma:too-many"), ("gamma",)),
        "--temperature": Opt(REAL_BAD + ("negative",), ("temperature",)),
        "--top-k": Opt(INT + ("negative-int",), ("top-k",)),
        "--top-p": Opt(REAL_BAD + ("negative", "zero", "above-one"), ("top-p",)),
        "--seed": Opt(INT + ("negative-int", "huge-seed"), ("seed",)),
        "--max-new-tokens": Opt(INT + ("zero-int", "negative-int", "huge"), ("max-new-tokens",)),
        "--prompt": Opt(("prompt:empty",), ("prompt",)),
        "--prompts": Opt(IN_PATHS + ("file:empty", "file:not-jsonl", "file:binary"), ("prompt", "workload"),
                         drop=("--prompt",)),
        "--batch-size": Opt(INT + ("zero-int", "negative-int", "huge"), ("batch",)),
        "--config": Opt(IN_PATHS + JSON_FILES + ("file:bad-config",), ("config",)),
        "--profile": Opt(IN_PATHS + ("path:file",), ("profile",), extra=("--method", "sv", "--models", "{s},{m},{l}")),
        "--device": Opt(("device:bad",), ("device",)),
        "--runtime": Opt(("choice",), ("--runtime",)),
    },
    "calibrate": {
        "--models": Opt(("models:empty", "models:one", "models:missing", "models:not-model", "models:other-vocab",
                         "models:same"), ("model", "distinct", "differ")),
        "--combine": Opt(("combine:bad",), ("combination", "weights", "mu", "target", "cd", "we")),
        "--workload": Opt(("workload:bad",) + IN_PATHS + ("file:empty", "file:not-jsonl"), ("workload",)),
        "--batch-sizes": Opt(("int-list-bad", "int-list-huge", "empty"), ("batch",)),
        "--max-k": Opt(INT + ("zero-int", "negative-int", "huge"), ("max-k",)),
        "--contexts": Opt(("int-list-bad", "int-list-huge", "empty"), ("context",)),
        "--repeats": Opt(INT + ("zero-int", "negative-int", "huge"), ("repeats",)),
        "--quiet-attempts": Opt(INT + ("zero-int", "negative-int", "huge"), ("quiet attempts",)),
        "--prompts-per-workload": Opt(INT + ("zero-int", "negative-int", "huge"), ("prompts per workload",)),
        "--states-per-prompt": Opt(INT + ("zero-int", "negative-int", "huge"), ("states per prompt",)),
        "--state-stride": Opt(INT + ("zero-int", "negative-int", "huge"), ("state stride",)),
        "--temperature": Opt(REAL_BAD + ("negative",), ("temperature",)),
        "--lookup": Opt(("lookup:bad",), ("lookup", "proposer")),
        "--engine": Opt(("choice",), ("--engine",)),
        "--engine-together": Opt(INT + ("zero-int", "negative-int", "huge"), ("engine-together",)),
        "--engine-steps": Opt(("choice",), ("--engine-steps",)),
        "--engine-step-stat": Opt(("choice",), ("--engine-step-stat",)),
        "--engine-passes": Opt(INT + ("zero-int", "negative-int", "huge"), ("engine-passes",)),
        "--device": Opt(("device:bad",), ("device",)),
        "--dtype": Opt(("dtype:bad",), ("dtype",)),
        "--runtime": Opt(("choice",), ("--runtime",)),
        "--out": Opt(("path:dir",) + OUT_PATHS, ("--out", "profile", "directory", "writable")),
        "--resume": Opt(("resume:garbled",), ("resume", "checkpoint")),
    },
    "profile show": {
        "PATH": Opt(IN_PATHS + ("path:file",), ("profile",)),
        "--plot": Opt(OUT_PATHS + ("plot:foreign-png",), ("--plot", "plot", "writable")),
    },
    "recommend": {
        "--dtype": Opt(("choice",), ("--dtype",)),
        "--engine": Opt(("choice",), ("--engine",)),
        "--engine-together": Opt(INT + ("zero-int", "negative-int", "huge"), ("engine-together",)),
        "--models": Opt(("models:empty", "models:one", "models:missing"), ("model", "profile")),
        "--combine": Opt(("combine:bad",), ("combination", "weights", "mu", "target", "cd", "we", "profile")),
        "--workload": Opt(("workload:bad",) + IN_PATHS, ("workload",)),
        "--batch-size": Opt(INT + ("zero-int", "negative-int", "batch:uncalibrated"), ("batch",)),
        "--max-latency": Opt(REAL_BAD + ("negative", "zero"), ("latency",)),
        "--trials": Opt(INT + ("zero-int", "negative-int", "huge"), ("trials",)),
        "--storage": Opt(("storage:bad",), ("storage",)),
        "--study-name": Opt(("study:empty",), ("study",)),
        "--validate": Opt(INT + ("negative-int",), ("validate",)),
        "--validate-prompts": Opt(INT + ("zero-int", "negative-int"), ("validat",)),
        "--resamples": Opt(INT + ("negative-int",), ("resamples",)),
        "--max-new-tokens": Opt(INT + ("zero-int", "negative-int"), ("max-new-tokens",)),
        "--temperature": Opt(REAL_BAD + ("negative", "temperature:uncalibrated"), ("temperature",)),
        "--profile": Opt(IN_PATHS + ("path:file",), ("profile",)),
        "--out": Opt(OUT_PATHS + ("out:foreign-config", "out:foreign-schedule", "out:foreign-db"),
                     ("--out", "config", "schedule", "study", "writable")),
        "--plot": Opt(OUT_PATHS + ("plot:foreign-png",), ("--plot", "plot", "writable")),
        "--seed": Opt(INT + ("negative-int", "huge-seed"), ("seed",)),
        "--device": Opt(("device:bad",), ("device",)),
        "--runtime": Opt(("choice",), ("--runtime",)),
    },
    "export": {
        "CONFIG": Opt(IN_PATHS + JSON_FILES + ("file:bad-config",), ("config",)),
        "--engine": Opt(("choice",), ("--engine",)),
        "--engine-version": Opt(("engine-version:bad",), ("version",)),
        "--schedule": Opt(IN_PATHS + JSON_FILES, ("schedule",)),
        "--profile": Opt(IN_PATHS + ("path:file",), ("profile",)),
    },
    "bench": {
        "--dtype": Opt(("choice",), ("--dtype",)),
        "--engine": Opt(("choice",), ("--engine",)),
        "--engine-together": Opt(INT + ("zero-int", "negative-int", "huge"), ("engine-together",)),
        "--runtime": Opt(("choice",), ("--runtime",)),
        "--device": Opt(("device:bad",), ("device",)),
        "--proposer": Opt(("proposer:bad",), ("proposer",)),
        "--policy": Opt(("policy:bad",), ("policy",)),
        "--models": Opt(("models:empty", "models:one", "models:missing", "models:not-model"), ("model",)),
        "--combine": Opt(("combine:bad",), ("combination", "weights", "mu", "target", "cd", "we")),
        "--methods": Opt(("methods:bad",), ("method", "sv")),
        "--gammas": Opt(("int-list-bad", "int-list-huge", "empty"), ("gamma",)),
        "--gamma-rest": Opt(("int-list-bad", "int-list-huge", "empty"), ("gamma",)),
        "--batch-sizes": Opt(("int-list-bad", "int-list-huge", "empty"), ("batch",)),
        "--temperatures": Opt(("text", "nan", "inf", "negative", "empty"), ("temperature",)),
        "--workload": Opt(("workload:bad",) + IN_PATHS, ("workload",)),
        "--prompts": Opt(INT + ("zero-int", "negative-int", "huge"), ("prompts",)),
        "--max-new-tokens": Opt(INT + ("zero-int", "negative-int"), ("max-new-tokens",)),
        "--repeats": Opt(INT + ("zero-int", "negative-int", "huge"), ("repeats",)),
        "--trials": Opt(INT + ("zero-int", "negative-int", "huge"), ("trials",), extra=("--validate-advice",)),
        "--advice-validate": Opt(INT + ("negative-int",), ("advice-validate",)),
        "--advice-confirm": Opt(INT + ("negative-int",), ("advice-confirm",)),
        "--profile": Opt(IN_PATHS + ("path:file",), ("profile",), extra=("--methods", "sv", "--models",
                                                                          "{s},{m},{l}")),
        "--out": Opt(OUT_PATHS + ("out:foreign-rows",), ("--out", "bench", "writable")),
        "--resume": Opt(("resume:garbled",), ("resume", "rows.csv")),
        "--plot": Opt(OUT_PATHS, ("--plot", "writable")),
    },
}
# Options that take no value from the user that could be bad (flags), or whose errors another change owns.
# the engine options reach an engine only: their faults (not found, unreachable, a failed start, a port taken) are
# one-line errors tested against a stand-in vLLM in tests/engines/test_engines.py; --engine-args is free text
ENGINE_OPTIONS = {"--engine-bin", "--engine-url", "--engine-args", "--engine-log-dir"}
NOT_FUZZED = {
    "generate": {"--ignore-eos", "--json", "--allow-pickle-weights"},
    "calibrate": {"--all-k", "--force", "--allow-pickle-weights", "--acceptance"} | ENGINE_OPTIONS,
    "profile show": {"--force"},
    "recommend": {"--pareto", "--no-calibrate", "--force", "--allow-pickle-weights"} | ENGINE_OPTIONS,
    "export": {"--json", "--out", "--model-path", "--force", "--check", "--workload", "--prompts", "--repeats"}
    | ENGINE_OPTIONS,
    "bench": {"--space", "--hf", "--validate-advice", "--force", "--allow-pickle-weights", "--pick",
              "--engine-only"} | ENGINE_OPTIONS,
    "models": set(),
}


def base_args(cmd: str, env: dict) -> dict[str, object]:
    """Arguments under which ``cmd`` succeeds quickly (``test_base_invocation_succeeds``)."""
    tiny = f"{env['s']},{env['l']}"
    work = env["root"] / "work"
    return {
        "generate": {"--models": tiny, "--prompt": "w1 w2", "--max-new-tokens": "2", "--ignore-eos": FLAG},
        "calibrate": {"--models": tiny, "--workload": str(env["prompts"]), "--batch-sizes": "1", "--max-k": "2",
                      "--contexts": "8", "--repeats": "1", "--prompts-per-workload": "1", "--states-per-prompt": "1",
                      "--out": str(work / "prof")},
        "profile show": {"PATH": str(env["profile"])},
        "recommend": {"--models": "a,b", "--profile": str(env["profile"]), "--trials": "3", "--no-calibrate": FLAG,
                      "--out": str(work / "rec")},
        "export": {"CONFIG": str(env["config"]), "--engine": "vllm", "--profile": str(env["profile"])},
        "bench": {"--models": tiny, "--methods": "sd", "--gammas": "1", "--prompts": "1", "--max-new-tokens": "2",
                  "--repeats": "1", "--no-hf": FLAG, "--workload": str(env["prompts"]), "--out": str(work / "bench")},
    }[cmd]


def command_line(cmd: str, args: dict[str, object]) -> list[str]:
    out = cmd.split()
    positional = [v for k, v in args.items() if k.isupper()]
    for k, v in args.items():
        if not k.isupper():
            out += [k] if v is FLAG else [k, str(v)]
    return out + [str(v) for v in positional]


@pytest.fixture(scope="session")
def env(tiny_dirs, valid_profile, prompt_file, tmp_path_factory):
    from spectune.config import DecodeConfig

    root = tmp_path_factory.mktemp("fuzzenv")
    cfg = DecodeConfig(models=("a", "b"), method="sd", gamma=(2, 1)).save(root / "config.json")
    return {"s": tiny_dirs["s"], "m": tiny_dirs["m"], "l": tiny_dirs["l"], "other": tiny_dirs["other"],
            "profile": valid_profile, "prompts": prompt_file, "config": cfg}


def _files(root: Path) -> dict[str, Path]:
    """Files with bad content (``file:*`` classes), in the user's area."""
    d = root / "user" / "bad"
    d.mkdir(parents=True)
    specs = {"not-json": "{not json", "json-list": "[1, 2]", "empty": "", "not-jsonl": '{"prompt": 1}\n',
             "bad-config": '{"models": ["a", "b"], "temperature": "hot"}'}
    out = {}
    for name, text in specs.items():
        (d / f"{name}.json").write_text(text)
        out[name] = d / f"{name}.json"
    (d / "binary.json").write_bytes(b"\xff\xfe\x00\x81garbage")
    out["binary"] = d / "binary.json"
    return out


def _prepare(cls: str, cmd: str, area: dict, files: dict) -> object | None:
    """The value of a path / file / output class; None when this machine cannot make the class (unwritable)."""
    kind, _, what = cls.partition(":")
    if kind == "path":
        return area[what]
    if kind == "file":
        return files[what]
    target = area["dir"].parent / "outdir"
    target.mkdir()
    name = {"foreign-config": "config.json", "foreign-schedule": "schedule.json", "foreign-db": "study.db",
            "foreign-png": "speedup_vs_gamma.png" if cmd == "recommend" else "latency_a.png",
            "foreign-rows": "rows.csv"}[what]
    (target / name).write_bytes(b"\x89PNG user's own picture" if name.endswith(".png") else b"users own data\n")
    return target


def _resume_garbled(cmd: str, args: dict) -> None:
    """A checkpoint of ``cmd`` whose content is garbage (written where --resume looks)."""
    out = Path(str(args["--out"]))
    if cmd == "calibrate":
        part = out.with_name(out.name + ".partial")
        part.mkdir(parents=True)
        (part / "state.json").write_text('{"settings": [], "models": 3}')
    else:
        out.mkdir(parents=True)
        (out / "rows.csv").write_text("key,label,kind\nx,y\n\x00\x01")


def check_case(cmd: str, opt: str, cls: str, raw: str | None, env: dict) -> None:
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        area = user_area(root)
        files = _files(root)
        e = {**env, "root": root, "user": area["dir"], "file": area["file"]}
        args = {k: v for k, v in base_args(cmd, e).items() if k not in SPEC[cmd][opt].drop}
        spec = SPEC[cmd][opt]
        for k, v in zip(spec.extra[::2], spec.extra[1::2]):
            args[k] = v.format(**e)
        if spec.extra and len(spec.extra) % 2:
            args[spec.extra[-1]] = FLAG
        if cls == "resume:garbled":
            _resume_garbled(cmd, args)
            args["--resume"] = FLAG
            value = None
        else:
            value = raw.format(**e) if raw is not None else _prepare(cls, cmd, area, files)
            if value is None:
                pytest.skip("this process can write everywhere (no unwritable directory to test with)")
            args[opt] = value
        before = snapshot(root / "user")
        res = CliRunner().invoke(cli, command_line(cmd, args))
        needles = spec.needles + (opt,) + ((str(value), Path(str(value)).name) if isinstance(value, Path) else ())
        assert_one_line_error(res, *needles)
        assert "hunter2" not in res.output  # storage passwords are never printed
        assert_untouched(root / "user", before)
    finally:
        unlock(root)
        shutil.rmtree(root, ignore_errors=True)


CASES = [(cmd, opt, cls) for cmd, opts in SPEC.items() for opt, o in opts.items() for cls in o.classes]


@pytest.mark.parametrize("cmd,opt,cls", CASES, ids=[f"{c}|{o}|{k}" for c, o, k in CASES])
def test_bad_value_class_is_one_line_error(cmd, opt, cls, env):
    strategy = VALUES[cls] if cls in VALUES else SPECIAL.get(cls)
    if strategy is None:
        check_case(cmd, opt, cls, None, env)
        return

    @CLI
    @given(raw=strategy)
    def run(raw):
        check_case(cmd, opt, cls, raw, env)

    run()


def _options(cmd: click.Command) -> set[str]:
    out = set()
    for p in cmd.params:
        if isinstance(p, click.Argument):
            out.add(p.name.upper())
        elif "--help" not in p.opts:
            out.add(next(o for o in p.opts if o.startswith("--")))
    return out


def test_every_option_is_fuzzed():
    """A new option must get bad-value classes here (or a reason in NOT_FUZZED)."""
    commands = {name: c for name, c in cli.commands.items() if not isinstance(c, click.Group)}
    commands |= {f"{g} {n}": c for g, grp in cli.commands.items() if isinstance(grp, click.Group)
                 for n, c in grp.commands.items()}
    for name, c in commands.items():
        missing = _options(c) - set(SPEC.get(name, {})) - NOT_FUZZED.get(name, set())
        assert not missing, f"spectune {name}: no bad-value classes for {sorted(missing)}"


@pytest.mark.parametrize("cmd", list(SPEC))
def test_base_invocation_succeeds(cmd, env, tmp_path):
    """The base arguments are valid: each case above fails because of its bad value alone."""
    args = base_args(cmd, {**env, "root": tmp_path})
    res = CliRunner().invoke(cli, command_line(cmd, args))
    assert res.exit_code == 0, res.output
