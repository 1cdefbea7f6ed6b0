"""spectune export: golden files per engine, the engine schemas, HF validation, native round trip, the plan."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from spectune.config import DecodeConfig
from spectune.artifacts import ENGINES, SCHEMAS, export, plan_for
from spectune.artifacts._render import off_above, ranges

GOLDEN = Path(__file__).parent / "golden"
sys.path.insert(0, str(Path(__file__).parents[1] / "tune"))

# hub ids: no profile holds them and no local path is involved, so the exports are the same on every machine
SD = DecodeConfig(models=("org/draft-160m", "org/target-7b"), method="sd", combine="target", gamma=(4, 1),
                  temperature=0.7, top_k=20, top_p=0.9, batch_size=1)
WE = DecodeConfig(models=("org/draft-160m", "org/target-7b"), method="cos", combine="we:0.5,0.5", gamma=(3, 2),
                  batch_size=4)
SV3 = DecodeConfig(models=("org/draft-160m", "org/companion-1b", "org/target-7b"), method="sv",
                   combine="target", gamma=(5, 1, 1), batch_size=8)
STD = DecodeConfig(models=("org/draft-160m", "org/target-7b"), method="standard", combine="target")
SCHEDULE = {"schema": "spectune.schedule/1", "profile": "", "workload": "mix", "combine": "target", "entries": [
    {"batch_size": b, "method": m, "models": ["org/draft-160m", "org/target-7b"], "combine": "target",
     "gamma": [g, 1]} for b, m, g in [(1, "sd", 4), (2, "cos", 4), (4, "sd", 3), (8, "sd", 2), (16, "standard", 4),
                                      (32, "standard", 4)]]}
# issue 19: prompt lookup over the target (N_MIN 2: not expressible where an engine has no minimum), and the two
# draft-length policies on the SD pair
NGRAM = DecodeConfig(models=("org/target-7b",), method="sd", gamma=(4,), proposer="ngram:2,4", temperature=0.7,
                     top_k=20, top_p=0.9)
HEUR = DecodeConfig(models=SD.models, method="sd", gamma=(3, 1), policy="heuristic")
CONF = DecodeConfig(models=SD.models, method="sd", gamma=(5, 1), policy="confidence:0.4", temperature=0.7)
# the lookup first, the draft model where it misses, with a confidence stop on the draft
LOOKFIRST = DecodeConfig(models=SD.models, method="sd", gamma=(3, 1), proposer="ngram+model:1,3,6",
                         policy="confidence:0.4")
CASES = {"sd": (SD, None), "sd-schedule": (SD, SCHEDULE), "we": (WE, None), "sv3": (SV3, None), "standard": (STD, None),
         "ngram": (NGRAM, None), "heuristic": (HEUR, None), "confidence": (CONF, None),
         "ngram-model": (LOOKFIRST, None)}  # HF: the draft alone


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))


def _versions():
    return [(e, v) for e in ENGINES for v in SCHEMAS[e]]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine,version", _versions())
def test_golden(engine, version, case):
    """Every engine x version x config matches its golden file (SPECTUNE_UPDATE_GOLDEN=1 rewrites them)."""
    cfg, sched = CASES[case]
    got = export(cfg, engine, engine_version=version, schedule=sched).report() + "\n"
    path = GOLDEN / f"{engine}-{version.replace('/', '-')}-{case}.txt"
    if os.environ.get("SPECTUNE_UPDATE_GOLDEN"):
        path.write_text(got)
    assert path.is_file(), f"missing golden file {path.name} (run with SPECTUNE_UPDATE_GOLDEN=1)"
    assert got == path.read_text()


def _parse(e) -> tuple[dict[str, set[str]], list[tuple[str, object]]]:
    """Keys (per section) and (key, value) pairs read back from the artifact's *text*, as the engine reads it:
    JSON, YAML, or a shell command line -- independent of the renderer's own bookkeeping."""
    import shlex

    import yaml

    text = e.text()
    if e.rendered.fmt == "sh":
        lines = [ln.rstrip("\\") for ln in text.splitlines() if not ln.startswith("#")]
        argv = shlex.split(" ".join(lines))[e.rendered.program:]
        flags = [(a, argv[i + 1] if i + 1 < len(argv) else None) for i, a in enumerate(argv) if a.startswith("-")]
        return {"": {f for f, _ in flags}}, flags
    doc = json.loads(text) if e.rendered.fmt == "json" else (yaml.safe_load(text) or {})
    pairs: list[tuple[str, object]] = []

    def keys(d: dict) -> set[str]:
        out = set()
        for k, v in d.items():
            if isinstance(k, str):  # int keys: a schedule's batch sizes
                out.add(k)
                if not isinstance(v, dict):
                    pairs.append((k, v))
            if isinstance(v, dict):
                out |= keys(v)
        return out

    by_section = {sec: keys(d) for sec, d in doc.items()} if e.schema.sections else {"": keys(doc)}
    return by_section, pairs


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine,version", _versions())
def test_written_keys_belong_to_engine_schema(engine, version, case, monkeypatch):
    """Every key / flag in the written artifact is one that engine version reads, in the place it reads it,
    with a value it takes, and none it removed. The export's own check is switched off, so this reads what a
    renderer writes, not what that check lets through."""
    from spectune.artifacts import _core

    monkeypatch.setattr(_core, "_checked", lambda e: e)
    cfg, sched = CASES[case]
    e = export(cfg, engine, engine_version=version, schedule=sched)
    assert e.engine_version == version and e.schema.source and e.schema.release
    by_section, pairs = _parse(e)
    s = e.schema
    for section, keys in by_section.items():
        allowed = s.sections[section] if s.sections else s.keys
        assert keys <= allowed, (section, keys - allowed)
        assert not keys & s.removed
    for k, v in pairs:
        if k in s.values:
            assert v in s.values[k], (k, v)
    if e.plan.draft is not None and engine != "native":
        assert any(by_section.values()), "an export without a single key checks nothing"


@pytest.mark.parametrize("engine,version,bad,msg", [
    ("vllm", "0.25.0", lambda r: r.artifact.update(speculative_disable_everything=True), "speculative_disable"),
    ("trtllm", "main-2026.03", lambda r: r.artifact["speculative_config"].update(decoding_type="DraftTarget"),
     "'decoding_type' = 'DraftTarget'"),
    ("trtllm", "main-2026.03", lambda r: r.artifact["speculative_config"].update(acceptance_window=8),
     "'acceptance_window'"),
    ("llamacpp", "b9596", lambda r: r.artifact.extend(["--draft-max", "4"]), "'--draft-max'"),
    ("hf", "5.23.0", lambda r: r.artifact["target_generation_config"].update(num_assistant_tokens=4),
     "'num_assistant_tokens' is not a key of target_generation_config"),
    ("hf", "5.23.0", lambda r: r.artifact["assistant_generation_config"].update(prompt_lookup_num_tokens=4),
     "'prompt_lookup_num_tokens' is not a key of assistant_generation_config"),
    ("llamacpp", "b9596", lambda r: r.artifact.extend(["--spec-ngram-size-n", "4"]), "'--spec-ngram-size-n'"),
    ("sglang", "main-2026.03", lambda r: r.artifact.extend(["--speculative-ngram-branch-length", "4"]),
     "'--speculative-ngram-branch-length'"),
    ("sglang", "main-2025.09", lambda r: r.artifact.extend(["--speculative-algorithm", "NGRAM"]), "'NGRAM'"),
    ("trtllm", "main-2026.03", lambda r: r.artifact["speculative_config"].update(decoding_type="Ngram"), "'Ngram'"),
])
def test_schema_check_rejects_what_the_version_does_not_read(monkeypatch, engine, version, bad, msg):
    """The export's own check catches an unknown key, an old spelling, a removed flag, and a key in the wrong
    place (transformers reads the draft length from the assistant's config only)."""
    import re

    from spectune.artifacts import _core

    real = _core.RENDERERS[engine]

    def broken(*a, **kw):
        r = real(*a, **kw)
        bad(r)
        return r

    monkeypatch.setitem(_core.RENDERERS, engine, broken)
    with pytest.raises(AssertionError, match=re.escape(msg)):
        export(SD, engine, engine_version=version)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_generation_configs_validate(case):
    """The target's config holds sampling and lengths (and prompt lookup, read from the config passed to
    generate()); the assistant's the draft length, the schedule (constant, or heuristic_transient for spectune's
    per-sequence heuristic) and the confidence stop (0.0 = none: None would become HF's adaptive 0.4)."""
    from transformers import GenerationConfig

    from spectune.artifacts.hf import ASSISTANT, TARGET

    cfg, sched = CASES[case]
    d = export(cfg, "hf", schedule=sched).rendered.artifact
    gc = GenerationConfig(**d[TARGET])
    gc.validate(strict=True)
    assert gc.num_assistant_tokens is None and gc.do_sample == (cfg.temperature > 0)
    if cfg.proposer.startswith("ngram:"):  # prompt lookup: on the config passed to generate(), no assistant
        assert (gc.prompt_lookup_num_tokens, gc.max_matching_ngram_size) == (4, 4) and ASSISTANT not in d
    elif cfg.method != "standard" or cfg.combine != "target":
        ga = GenerationConfig(**d[ASSISTANT])
        ga.validate(strict=True)
        assert gc.prompt_lookup_num_tokens is None and ga.num_assistant_tokens == cfg.gamma[0]
        schedule = {"heuristic": "heuristic_transient"}.get(cfg.policy, "constant")
        threshold = float(cfg.policy.split(":")[1]) if cfg.policy.startswith("confidence") else 0.0
        assert ga.num_assistant_tokens_schedule == schedule and ga.assistant_confidence_threshold == threshold
    else:
        assert ASSISTANT not in d


def test_hf_runs_the_schedules_batch_one_k():
    """Assisted generation runs one sequence at a time: K is the schedule's K at batch size 1, and a schedule
    that does not speculate there exports plain generate()."""
    from spectune.artifacts.hf import ASSISTANT

    two = dict(SCHEDULE, entries=[dict(e, gamma=[2, 1]) if e["batch_size"] == 1 else e for e in SCHEDULE["entries"]])
    assert export(SD, "hf", schedule=two).rendered.artifact[ASSISTANT]["num_assistant_tokens"] == 2
    off = dict(SCHEDULE, entries=[dict(e, method="standard") if e["batch_size"] <= 2 else e
                                  for e in SCHEDULE["entries"]])
    e = export(SD, "hf", schedule=off)
    assert ASSISTANT not in e.rendered.artifact and any("batch size 1" in n for n in e.notes)


@pytest.mark.parametrize("case", sorted(CASES))
def test_native_round_trip(case, tmp_path):
    cfg, _ = CASES[case]
    e = export(cfg, "native")
    p = tmp_path / "c.json"
    p.write_text(e.text())
    assert DecodeConfig.load(p) == cfg and e.exact and not e.lost


def test_vllm_schedule_ranges():
    a = export(SD, "vllm", schedule=SCHEDULE).rendered.artifact
    # b=1: 4, b=2: 4, b=4: 3, b=8: 2, b=16/32: off -> [1-2: 4], [3-4: 3], [5-8: 2], [9-32: 0]
    assert a["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 4, 3], [5, 8, 2], [9, 32, 0]]
    assert a["num_speculative_tokens"] == 4 and a["method"] == "draft_model"
    flat = export(SD, "vllm", engine_version="0.6.4", schedule=SCHEDULE).rendered.artifact
    assert flat == {"speculative_model": "org/draft-160m", "num_speculative_tokens": 4,
                    "speculative_disable_by_batch_size": 8}


def test_vllm_num_speculative_tokens_is_the_schedules_largest_k():
    """vLLM clamps every scheduled K to num_speculative_tokens: it must be the schedule's largest K, which may
    be below the config's gamma (5 here), never the gamma itself."""
    g5 = DecodeConfig(models=SD.models, method="sd", gamma=(5, 1), temperature=0.7, top_k=20, top_p=0.9)
    e = export(g5, "vllm", schedule=SCHEDULE)
    assert e.rendered.artifact["num_speculative_tokens"] == 4 and any("largest K" in n for n in e.notes)
    assert export(g5, "vllm").rendered.artifact["num_speculative_tokens"] == 5  # no schedule: gamma
    never = dict(SCHEDULE, entries=[dict(e, method="standard") for e in SCHEDULE["entries"]])
    assert export(g5, "vllm", schedule=never).rendered.artifact == {}


def test_trtllm_schedule_forms():
    a = export(SD, "trtllm", schedule=SCHEDULE).rendered.artifact["speculative_config"]
    assert a["decoding_type"] == "Draft_Target"
    assert a["draft_len_schedule"] == {2: 4, 4: 3, 8: 2} and a["max_draft_len"] == 4 and "max_concurrency" not in a
    on_off = dict(SCHEDULE, entries=[dict(e, gamma=[4, 1]) for e in SCHEDULE["entries"]])
    b = export(SD, "trtllm", schedule=on_off).rendered.artifact["speculative_config"]
    assert b["max_concurrency"] == 8 and b["max_draft_len"] == 4 and "draft_len_schedule" not in b
    never = dict(SCHEDULE, entries=[dict(e, method="standard") for e in SCHEDULE["entries"]])
    c = export(SD, "trtllm", schedule=never).rendered
    assert c.artifact == {} and "the schedule never speculates: serve the target alone" in c.notes  # as predicted
    late = dict(SCHEDULE, entries=[dict(e, method="standard" if e["batch_size"] == 1 else e["method"])
                                   for e in SCHEDULE["entries"]])
    d = export(SD, "trtllm", schedule=late).rendered
    assert d.artifact["speculative_config"]["max_draft_len"] == 4 and any("fixed K = 4" in n for n in d.notes)


def test_trtllm_older_version_lower_bound_keys():
    """The same schedule means different dicts: the older version reads keys as lower bounds (key 1 required,
    explicit 0 to switch off), and spells the decoding type DraftTarget."""
    old = export(SD, "trtllm", engine_version="main-2025.10", schedule=SCHEDULE).rendered.artifact
    spec = old["speculative_config"]
    assert spec["decoding_type"] == "DraftTarget" and spec["max_draft_len"] == 4
    assert spec["draft_len_schedule"] == {1: 4, 3: 3, 5: 2, 9: 0}
    on_off = dict(SCHEDULE, entries=[dict(e, gamma=[4, 1]) for e in SCHEDULE["entries"]])
    b = export(SD, "trtllm", engine_version="main-2025.10", schedule=on_off).rendered.artifact["speculative_config"]
    assert b["max_concurrency"] == 8 and "draft_len_schedule" not in b
    on = dict(SCHEDULE, entries=[e for e in SCHEDULE["entries"] if e["method"] != "standard"])
    kept = export(SD, "trtllm", engine_version="main-2025.10", schedule=on)
    assert kept.rendered.artifact["speculative_config"]["draft_len_schedule"] == {1: 4, 3: 3, 5: 2}
    assert any("above 8" in n and "keep K = 2" in n for n in kept.notes)


def test_llamacpp_flags_per_version():
    argv = export(SD, "llamacpp").rendered.artifact
    assert argv[argv.index("--spec-type") + 1] == "draft-simple" and argv[argv.index("--spec-draft-n-max") + 1] == "4"
    assert not {"--draft-max", "--draft-min", "--draft"} & set(argv)
    old = export(SD, "llamacpp", engine_version="b4000").rendered.artifact
    assert old[old.index("--draft-max") + 1] == "4" and "--spec-type" not in old


def test_ranges_helpers():
    assert ranges([(1, 5), (2, 5), (4, 3), (8, 0), (16, 0)]) == [[1, 2, 5], [3, 4, 3], [5, 16, 0]]
    assert off_above([(1, 5), (4, 3), (8, 0)]) == 4
    assert off_above([(1, 5), (4, 3)]) is None


def test_plan_says_what_is_lost():
    plan, _ = plan_for(WE)
    assert not plan.exact and "we:0.5,0.5" in plan.lost[0] and "target's distribution" in plan.lost[0]
    assert any("alternate proposals" in x for x in plan.lost)  # gamma_p = 2 > 1
    plan3, _ = plan_for(SV3)
    assert not plan3.exact and plan3.draft == "org/draft-160m" and plan3.target == "org/target-7b"
    assert any("companion" in x for x in plan3.lost) and any("org/companion-1b is dropped" in x for x in plan3.lost)
    assert plan_for(SD)[0].exact and plan_for(STD)[0].draft is None
    naive = DecodeConfig(models=SD.models, method="naive-cos", gamma=(3, 1))
    p, notes = plan_for(naive)
    assert p.exact and any("bonus" in n for n in notes)


def test_nearest_config_priced_from_profile():
    """Not expressible -> the nearest (target-only SD, same draft and gamma) with its predicted speedup, and the
    config's own prediction beside it when the profile priced the combination."""
    from tune_synth import make_profile

    prof = make_profile(models=("a", "b"), combine="we:0.5,0.5", temperature=0.0)
    cfg = DecodeConfig(models=("a", "b"), method="cos", combine="we:0.5,0.5", gamma=(3, 1), batch_size=2)
    e = export(cfg, "vllm", profile=prof, model_paths={"a": "/srv/a", "b": "/srv/b"})
    assert not e.exact and e.predicted["plan"]["speedup_vs_target"] > 0
    from spectune.tune.cost import CostModel

    want = CostModel(prof).predict(DecodeConfig(models=("a", "b"), method="sd", combine="target", gamma=(3, 1),
                                                batch_size=2))
    assert e.predicted["plan"]["goodput"] == pytest.approx(want.goodput)
    assert e.predicted["config"]["goodput"] == pytest.approx(CostModel(prof).predict(cfg).goodput)
    assert "nearest expressible" in e.report() and e.rendered.artifact["model"] == "/srv/a"
    # with a schedule for the combination, a target-only schedule is derived from the profile
    sched = {"schema": "spectune.schedule/1", "entries": []}
    d = export(cfg, "vllm", profile=prof, schedule=sched, model_paths={"a": "/srv/a", "b": "/srv/b"})
    assert [b for b, _ in d.plan.schedule] == [1, 2, 4]


def test_bundled_names_map_and_warn():
    e = export(DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(3, 1)), "sglang")
    argv = e.rendered.artifact
    assert argv[argv.index("--model-path") + 1] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert any("draft-s" in w and "serving machine" in w for w in e.warnings)
    e2 = export(DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(3, 1)), "sglang",
                model_paths={"draft-s": "/srv/draft-s"})
    assert "/srv/draft-s" in e2.rendered.artifact and not e2.warnings


def test_cli_export(tmp_path):
    from click.testing import CliRunner

    from spectune.cli import cli

    cfg = tmp_path / "config.json"
    SD.save(cfg)
    (tmp_path / "schedule.json").write_text(json.dumps(SCHEDULE))  # found beside the config
    out = tmp_path / "spec.yaml"
    r = CliRunner().invoke(cli, ["export", str(cfg), "--engine", "trtllm", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "draft_len_schedule" in out.read_text() and out.read_text().startswith("# spectune export")
    r = CliRunner().invoke(cli, ["export", str(cfg), "--engine", "vllm", "--json"])
    assert json.loads(r.output)["artifact"]["num_speculative_tokens_per_batch_size"][0] == [1, 2, 4]
    for args, msg in [(["--engine", "vllm", "--engine-version", "9.9"], "unknown vllm version"),
                      (["--engine", "vllm", "--schedule", str(cfg)], "is not a spectune schedule"),
                      (["--engine", "vllm", "--model-path", "nope"], "invalid --model-path"),
                      (["--engine", "vllm", "--profile", str(tmp_path / "missing")], "does not exist")]:
        r = CliRunner().invoke(cli, ["export", str(cfg), *args])
        assert r.exit_code == 2 and "Traceback" not in r.output and msg in r.output, r.output
    r = CliRunner().invoke(cli, ["export", str(tmp_path / "nope.json"), "--engine", "hf"])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_cli_export_bad_out_and_model_paths_are_one_line(tmp_path):
    """A directory, a path through a file, an existing file without --force, a --model-path name that is not a
    model of the config: one line each, exit 2, and no file touched."""
    from click.testing import CliRunner

    from spectune.cli import cli

    cfg = tmp_path / "config.json"
    SD.save(cfg)
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes")
    base = ["export", str(cfg), "--engine", "vllm"]
    for args, msg in [(["--out", str(tmp_path)], "is a directory"),
                      (["--out", str(mine / "x.json")], "is a file, not a directory"),
                      (["--out", str(mine)], "exists: pass --force"),
                      (["--model-path", "org/draft-16m=/srv/d"], "--model-path org/draft-16m: no such model"),
                      (["--model-path", "org/draft-160m=/srv/d", "--model-path", "target=/srv/t"], "target: no such")]:
        r = CliRunner().invoke(cli, [*base, *args])
        assert r.exit_code == 2 and "Traceback" not in r.output and msg in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1
    assert mine.read_text() == "my notes"
    r = CliRunner().invoke(cli, [*base, "--out", str(mine), "--force", "--model-path", "org/draft-160m=/srv/d"])
    assert r.exit_code == 0 and json.loads(mine.read_text())["model"] == "/srv/d"


def test_predictions_say_when_the_cost_model_cannot_price_an_adaptive_export():
    """Prompt lookup and policies are priced by the cost model (it simulates them) where the profile recorded what
    they need; where it did not (no lookup traces here), the export still works and says so in one line."""
    from tune_synth import make_profile

    from spectune.tune.cost import CostModel

    prof = make_profile(models=("a", "b"), combine="target", temperature=0.0)
    paths = {"a": "/srv/a", "b": "/srv/b"}
    ng = export(DecodeConfig(models=("b",), method="sd", gamma=(3,), proposer="ngram:1,3"), "vllm", profile=prof,
                model_paths={"b": "/srv/b"})
    assert ng.rendered.artifact["method"] == "ngram" and ng.predicted is None
    assert sum("predicted speedups unavailable" in n for n in ng.notes) == 1
    heur = DecodeConfig(models=("a", "b"), method="sd", gamma=(3, 1), policy="heuristic")
    v = export(heur, "vllm", profile=prof, model_paths=paths)  # vLLM runs a fixed K: the plan is priced
    fixed = CostModel(prof).predict(DecodeConfig(models=("a", "b"), method="sd", gamma=(3, 1))).goodput
    adaptive = CostModel(prof).predict(heur).goodput
    assert v.predicted["config"]["goodput"] == pytest.approx(adaptive) and adaptive != pytest.approx(fixed)
    assert v.predicted["plan"]["goodput"] == pytest.approx(fixed)
    h = export(heur, "hf", profile=prof, model_paths=paths)  # HF runs the heuristic: it is priced as such
    assert h.predicted["plan"]["goodput"] == pytest.approx(adaptive) and "plan_unpriced" not in h.predicted


@pytest.mark.parametrize("engine,version", _versions())
def test_each_version_keeps_or_says_it_lacks_lookup_and_policies(engine, version):
    """A version that has prompt lookup / a policy keeps it (the artifact says so); one that lacks it loses it in
    one plain line and exports the nearest: the target alone, or a fixed K."""
    s = SCHEMAS[engine][version]
    for cfg, feature in ((NGRAM, "ngram"), (HEUR, "heuristic"), (CONF, "confidence")):
        e = export(cfg, engine, engine_version=version)
        has = feature in s.features
        assert has != (feature in s.lacks) or engine == "native"
        assert e.exact == has and len(e.lost) == (0 if has else 1)
        if feature == "ngram":
            assert (e.plan.ngram is not None) == has and e.plan.draft is None
        else:
            assert e.plan.policy == (cfg.policy if has else "fixed") and e.plan.gamma == cfg.gamma[0]
        if not has:
            assert s.lacks[feature] in e.lost[0] and "exported: " in e.lost[0]
    e = export(DecodeConfig(models=SD.models, method="sd", gamma=(3, 1), proposer="ngram+model:1,3,6"), engine,
               engine_version=version)
    has = "ngram+model" in s.features
    assert has != ("ngram+model" in s.lacks) or engine == "native"
    assert e.exact == has and (e.plan.ngram is not None) == has and e.plan.draft is not None and e.plan.gamma == 3
    if not has:  # the draft model alone, and one line saying why
        assert len(e.lost) == 1 and s.lacks["ngram+model"] in e.lost[0] and "the draft model alone" in e.lost[0]


def test_a_schedule_switching_proposer_keeps_the_plans_k_and_says_so(tmp_path):
    """recommend's schedule may switch to prompt lookup at one batch size and a draft model at another; an engine's
    per-batch-size K cannot switch proposer, so that entry keeps the plan's K and the export names it."""
    sched = {"schema": "spectune.schedule/1", "entries": [
        {"batch_size": 1, "method": "sd", "models": ["t"], "gamma": [4], "proposer": "ngram:1,3", "policy": "fixed"},
        {"batch_size": 4, "method": "sd", "models": ["d", "t"], "gamma": [2, 1], "proposer": "model",
         "policy": "fixed"}]}
    (tmp_path / "s.json").write_text(json.dumps(sched))
    cfg = DecodeConfig(models=("d", "t"), method="sd", gamma=(3, 1))
    e = export(cfg, "vllm", schedule=str(tmp_path / "s.json"), model_paths={"d": "/srv/d", "t": "/srv/t"})
    assert e.plan.schedule == [(1, 3), (4, 2)]
    assert any("keep gamma 3" in n and "b=1 (sd, t, ngram:1,3)" in n for n in e.notes)


def test_lookup_first_with_a_schedule_where_the_engine_runs_the_draft_alone():
    """A schedule tuned with the lookup in front is not the draft alone's: an engine that drops the lookup does
    not take its K (without a profile: a fixed K and a note), and with a profile the schedule is derived for what
    the engine runs -- also for a combination (the baselines use the target alone and the draft, never the
    config's proposer or policy, which 'standard' cannot take)."""
    from tune_synth import make_profile

    sched = {"schema": "spectune.schedule/1", "profile": "", "workload": "mix", "combine": "target", "entries": [
        {"batch_size": 1, "method": "sd", "models": list(SD.models), "combine": "target", "gamma": [6, 1],
         "proposer": "ngram+model:1,3,8"},
        {"batch_size": 4, "method": "sd", "models": list(SD.models), "combine": "target", "gamma": [2, 1]}]}
    cfg = DecodeConfig(models=SD.models, method="sd", gamma=(6, 1), proposer="ngram+model:1,3,8")
    e = export(cfg, "vllm", schedule=sched)
    assert e.plan.ngram is None and e.plan.schedule == [] and any("not used" in n for n in e.notes)
    kept = export(cfg, "llamacpp", schedule=sched)  # llama.cpp runs the chain (and has no schedule)
    assert kept.plan.ngram == (1, 3) and kept.plan.proposer == cfg.proposer
    prof = make_profile(models=("a", "b"), combine="we:0.5,0.5", temperature=0.0)
    we = DecodeConfig(models=("a", "b"), method="sd", combine="we:0.5,0.5", gamma=(3, 1), policy="heuristic",
                      proposer="ngram+model:1,3,8")
    paths = {"a": "/srv/a", "b": "/srv/b"}
    for engine in ("vllm", "llamacpp"):
        out = export(we, engine, profile=prof, schedule=dict(sched, combine="we:0.5,0.5"), model_paths=paths)
        assert out.plan.draft is not None and not out.exact
