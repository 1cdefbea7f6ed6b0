"""The engine layer against a stand-in vLLM server (``fake_vllm_server.py``): start, attach, drive, counters, the
proof of ``export --check``, and every fault as one line with the rows measured before it kept."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from spectune.checks import MAX_TOGETHER
from spectune.engines import EngineSettings, Launch, VllmEngine, open_engine, prometheus
from spectune.engines.vllm_server import resolved_speculation, scheduled_k
from spectune.errors import EngineError

DATA = Path(__file__).parent / "data"


def _settings(exe, tmp_path, **kw):
    return EngineSettings("vllm", exe, log_dir=tmp_path / "logs", ready_timeout_s=60, **kw)


def test_prometheus_reads_a_real_vllm_exposition():
    """A /metrics page of vLLM 0.32.0 running draft-s -> SmolLM2 with K = 3 (recorded on this project's CPU)."""
    samples = prometheus.parse((DATA / "vllm-0.32.0-metrics-draft.txt").read_text())
    c = VllmEngine("http://x").counters_from(samples)
    assert (c.drafts, c.draft_tokens, c.accepted) == (74.0, 222.0, 54.0)
    assert c.accepted_per_pos == (30.0, 15.0, 9.0)
    assert c.tokens_per_draft == 3.0 and c.generated == 128.0 and c.steps > 0 and c.requests == 4.0
    assert prometheus.total(samples, "vllm:spec_decode_num_drafts_total") == 74.0  # either spelling


def test_prometheus_rejects_a_page_that_is_not_metrics():
    with pytest.raises(ValueError, match="not a Prometheus sample"):
        prometheus.parse("<html>hello</html>")
    assert prometheus.parse('# HELP x y\nx{a="q\\"r"} 1\n') == {("x", (("a", 'q"r'),)): 1.0}


def test_start_log_says_what_vllm_runs():
    line = ("(EngineCore pid=9) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/m', "
            "speculative_config=SpeculativeConfig(method='draft_model', model='/d', num_spec_tokens=3), tokenizer='/m'")
    assert resolved_speculation(line) == {"method": "draft_model", "model": "/d", "num_spec_tokens": 3}
    assert resolved_speculation(line.replace("SpeculativeConfig(method='draft_model', model='/d', "
                                             "num_spec_tokens=3)", "None")) == {}
    assert resolved_speculation("nothing here") is None


def test_scheduled_k_is_vllms_rule():
    spec = {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 3, 2], [6, 8, 0]]}
    assert [scheduled_k(spec, b) for b in (1, 2, 3, 4, 6, 9)] == [4, 2, 2, 2, 0, 0]  # a gap keeps the K before
    assert scheduled_k({"num_speculative_tokens": 3}, 16) == 3 and scheduled_k({}, 1) == 0


def test_a_schedule_vllm_would_refuse_is_refused_before_starting(fake_vllm, tmp_path):
    from spectune.errors import ConfigError

    bad = {"method": "draft_model", "model": "/d", "num_speculative_tokens": 2,
           "num_speculative_tokens_per_batch_size": [[2, 8, 2]]}
    with pytest.raises(ConfigError, match="the first batch-size range must start at 1"):
        open_engine(_settings(fake_vllm, tmp_path), "/m", bad)
    with pytest.raises(ConfigError, match="not sorted"):
        open_engine(_settings(fake_vllm, tmp_path), "/m", {**bad, "num_speculative_tokens_per_batch_size":
                                                            [[1, 4, 2], [3, 8, 1]]})
    assert not (tmp_path / "logs").exists()  # nothing was started


def test_start_drive_and_read_counters(fake_vllm, tmp_path):
    with open_engine(_settings(fake_vllm, tmp_path), "/models/t", {"method": "draft_model", "model": "/d",
                                                                    "num_speculative_tokens": 3}) as eng:
        assert eng.version() == "0.32.0" and eng.served_model() == "/models/t"
        d = eng.drive([[1, 2, 3]] * 4, concurrency=2, max_tokens=8)
        assert d.tokens == 32 and d.counters.generated == 32 and d.counters.drafts == 16
        assert d.counters.tokens_per_draft == 3 and all(c.drafted == (3,) * 4 for c in d.completions)
        d2 = eng.drive([[1]], 1, 4)  # counters are the difference over this drive only
        assert d2.counters.generated == 4
        argv = eng.server.argv
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert "--gpu-memory-utilization" in argv and not eng.server.alive()


def test_user_engine_args_win(fake_vllm, tmp_path):
    launch = Launch("/m", None, ("--gpu-memory-utilization", "0.5", "--tensor-parallel-size", "2"), fake_vllm)
    eng = VllmEngine("http://x", launch=launch)
    argv = eng.argv(fake_vllm, launch, 1234)
    assert argv.count("--gpu-memory-utilization") == 1 and argv[-4:] == list(launch.args)
    assert eng.parallel()["tensor_parallel_size"] == 2 and "--speculative-config" not in argv


def test_starts_alive_at_once_share_the_kv_cache_memory(fake_vllm):
    from spectune.errors import ConfigError

    from spectune.engines.vllm_server import kv_share

    def memory(launch):
        argv = VllmEngine("http://x", launch=launch).argv(fake_vllm, launch, 1234)
        kv = argv[argv.index("--kv-cache-memory-bytes") + 1] if "--kv-cache-memory-bytes" in argv else None
        return argv[argv.index("--gpu-memory-utilization") + 1], kv

    assert memory(Launch("/m")) == ("0.3", None)  # one start: vLLM sizes its cache from the 0.3 budget
    assert memory(Launch("/m", together=3)) == ("0.3", str(kv_share(3)))  # three: an equal cache each
    assert 0 < kv_share(3) < kv_share(2) and kv_share(3) % 2**20 == 0
    assert memory(Launch("/m", args=("--gpu-memory-utilization", "0.2"), together=3)) == ("0.2", None)  # theirs
    with pytest.raises(ConfigError, match="an attached engine"):
        EngineSettings("vllm", url="http://x:1", together=2)
    with pytest.raises(ConfigError, match=rf"must be in \[1, {MAX_TOGETHER}\], got 0"):
        EngineSettings("vllm", together=0)


def test_wait_quiet_reads_the_servers_cpu_from_proc(tmp_path, monkeypatch):
    """A start's process group that spins is seen using CPU; one that sleeps is quiet at once."""
    import subprocess
    import sys
    import time

    from spectune.engines import process
    from spectune.engines.process import Server, groups_cpu_s, wait_quiet

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    rest = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while groups_cpu_s({spin.pid}) < 0.05 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert groups_cpu_s({spin.pid}) >= 0.05
        started = groups_cpu_s({rest.pid})
        quiet = Server(["sleep"], tmp_path / "log", "http://x", proc=rest)
        reads = []
        monkeypatch.setattr(process, "groups_cpu_s", lambda pgids: reads.append(pgids) or groups_cpu_s(pgids))
        assert wait_quiet([quiet], window_s=0.1, timeout_s=30) is None  # quiet
        assert reads == [{rest.pid}] * 2  # quiet: read before and after the first window, which ends the wait
        assert groups_cpu_s({rest.pid}) - started < 0.05
        busy = wait_quiet([Server(["spin"], tmp_path / "log", "http://x", proc=spin)], busy=0.01, window_s=0.2,
                          timeout_s=0.5)
        assert busy is not None and busy > 0.01  # never quiet: the cores it used over the last window
    finally:
        for p in (spin, rest):
            p.kill()
            p.wait()


def test_a_turn_on_a_host_that_never_goes_quiet_is_driven_and_said(monkeypatch):
    import spectune.engines as engines

    class Fake:
        name, server = "vllm", object()

    said = []
    monkeypatch.setattr(engines, "wait_quiet", lambda servers: 0.83 if len(said) < 1 else None)
    order = [i for i, _ in engines.Together([Fake(), Fake(), Fake()], said.append).in_turn(2)]
    assert order == [2, 0, 1]
    assert said == ["  vllm: the starts alive at once still used 0.83 cores after 20 s of waiting for them to go "
                    "quiet; driving this turn anyway (it may run slow)"]


def test_engine_not_found(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECTUNE_VLLM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineError, match="vllm not found on PATH: set SPECTUNE_VLLM"):
        open_engine(EngineSettings("vllm", log_dir=tmp_path), "/m")
    with pytest.raises(EngineError, match="not found at '/nowhere/vllm'"):
        open_engine(EngineSettings("vllm", "/nowhere/vllm", log_dir=tmp_path), "/m")


def test_engine_fails_to_start_shows_its_log(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    with pytest.raises(EngineError) as e:
        open_engine(_settings(fake_vllm, tmp_path), "/m")
    msg = str(e.value)
    assert "failed to start (exit status 1)" in msg and "the fake engine was told to fail" in msg
    assert str(tmp_path / "logs") in msg and "\n" not in msg


def test_port_taken(fake_vllm, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(EngineError, match=f"port {port} on 127.0.0.1 is taken"):
            VllmEngine.start(Launch("/m", executable=fake_vllm, port=port, log_dir=tmp_path))


@pytest.mark.parametrize("token", ["s3cret-token", "s3cr3t/x@yz"])
def test_unreachable_endpoint_masks_its_token(tmp_path, token):
    """The userinfo ends at the last "@": a token holding "/" or "@" is neither sent as the host nor printed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(EngineError) as e:
        open_engine(EngineSettings("vllm", url=f"http://user:{token}@127.0.0.1:{port}"))
    msg = str(e.value)
    assert f"cannot reach the engine at http://user:***@127.0.0.1:{port}" in msg and "s3cr" not in msg
    assert "Connection refused" in msg  # the request went to the engine's host and port, not to the token


def test_attach_sends_the_token_and_reads_counters(fake_vllm, tmp_path):
    token = "tok/3n@x"
    with open_engine(_settings(fake_vllm, tmp_path, args=("--api-key", token)), "/m") as started:
        with pytest.raises(EngineError, match="answered HTTP 401"):
            open_engine(EngineSettings("vllm", url=started.url)).drive([[1, 2]], 1, 4)
        eng = open_engine(EngineSettings("vllm", url=started.url.replace("http://", f"http://:{token}@")))
        assert eng.drive([[1, 2]], 1, 4).tokens == 4 and "tok" not in eng.shown()
        assert eng.resolved() is None  # attached: no start-up log to read


def test_engine_dies_mid_run(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "2")
    with open_engine(_settings(fake_vllm, tmp_path), "/m") as eng:
        eng.drive([[1]], 1, 4)
        with pytest.raises(EngineError, match=r"vllm died during a request \(exit status 3\); its log"):
            eng.drive([[1]] * 3, 1, 4)


# --- export --check through the CLI --------------------------------------------------------------------------------

def _config(tmp_path, **kw):
    from spectune.config import DecodeConfig

    cfg = DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(3, 1), max_new_tokens=8, **kw)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg.to_dict()))
    return path


def _check(tmp_path, fake_vllm, *extra):
    from spectune.cli import cli

    return CliRunner().invoke(cli, ["export", str(_config(tmp_path)), "--engine", "vllm", "--check", "--json",
                                    "--engine-bin", fake_vllm, "--engine-log-dir", str(tmp_path / "logs"),
                                    "--repeats", "1", "--prompts", "2", *extra])


@pytest.mark.slow
def test_check_proves_k_and_fails_on_a_silent_fallback(fake_vllm, tmp_path, monkeypatch):
    res = _check(tmp_path, fake_vllm)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["check"]
    assert out["honoured"] and out["batches"][0]["steps_by_draft_length"] == {"3": 8}
    monkeypatch.setenv("FAKE_VLLM_NO_SPEC", "1")
    res = _check(tmp_path, fake_vllm)
    assert res.exit_code == 2 and "did not run the artifact as exported" in res.stderr
    assert "drafted nothing" in res.stderr


@pytest.mark.slow
def test_check_keeps_rows_measured_before_a_fault(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "3")  # the warm-up and two prompts of repeat 1
    res = _check(tmp_path, fake_vllm, "--repeats", "3")
    assert res.exit_code == 2 and res.stderr.splitlines()[-1].startswith("error: vllm died during a request")
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 1 and rows[0]["batch_size"] == 1 and rows[0]["k"] == 3


@pytest.mark.slow
def test_sigterm_stops_the_engine_spectune_started(fake_vllm, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = _config(tmp_path)
    logs = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-m", "spectune", "export", str(cfg), "--engine", "vllm", "--check",
                             "--engine-bin", fake_vllm, "--engine-log-dir", str(logs), "--repeats", "1000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (logs.is_dir() and any(logs.iterdir())):
        time.sleep(0.2)
    time.sleep(3)  # the engine answers and the check is measuring
    port = int(next(logs.iterdir()).stem.rsplit("-", 1)[1])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130 and b"interrupted" in proc.stderr.read()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # the engine is gone with it


def test_sigterm_while_the_engine_loads_stops_it_too(fake_vllm, tmp_path, monkeypatch):
    """vLLM loads for minutes: a SIGTERM (or Ctrl-C) before it answers must not leave it running."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    monkeypatch.setenv("FAKE_VLLM_LOAD_S", "120")
    logs = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-m", "spectune", "export", str(_config(tmp_path)), "--engine", "vllm",
                             "--check", "--engine-bin", fake_vllm, "--engine-log-dir", str(logs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    pid, deadline = None, time.monotonic() + 60
    while pid is None and time.monotonic() < deadline:
        time.sleep(0.2)
        found = [re.search(r"loading, pid (\d+)", f.read_text()) for f in logs.glob("*.log")] if logs.is_dir() else []
        pid = next((int(m.group(1)) for m in found if m), None)
    assert pid is not None, "the stand-in engine never started loading"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130 and b"interrupted" in proc.stderr.read()
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.2)  # the engine's group is stopped before spectune exits; /proc may lag its reaping
    assert not os.path.exists(f"/proc/{pid}"), "the loading engine outlived spectune"


def test_engine_args_a_shell_cannot_split_are_one_line(tmp_path):
    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["export", str(_config(tmp_path)), "--engine", "vllm", "--check",
                                   "--engine-args", '--max-model-len "1024'])
    assert res.exit_code == 2 and res.stderr.startswith("error: --engine-args") and "quote" in res.stderr
    assert "Traceback" not in res.output


def test_a_failed_start_stops_what_the_engine_left_in_its_group(tmp_path):
    """An engine whose first process exits leaves its children (vLLM's engine core) running unless the whole group
    is stopped: here a child sleeps on after its parent fails."""
    from spectune.engines.process import Server

    pidfile = tmp_path / "child.pid"
    srv = Server(["bash", "-c", f"sleep 300 & echo $! > {pidfile}; exit 3"], tmp_path / "log",
                 "http://127.0.0.1:1/health")
    with pytest.raises(EngineError, match=r"failed to start \(exit status 3\)"):
        srv.start(30)
    status = Path(f"/proc/{int(pidfile.read_text())}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_engine_args_cannot_move_the_port_spectune_talks_to(fake_vllm, tmp_path):
    from spectune.errors import ConfigError

    for args in (("--port", "9000"), ("--host=0.0.0.0",)):
        with pytest.raises(ConfigError, match="cannot set --host or --port.*--engine-url"):
            open_engine(_settings(fake_vllm, tmp_path, args=args), "/m")


def test_a_failed_request_ends_the_drive_without_running_the_rest(fake_vllm, tmp_path):
    """One bad request (HTTP 400) surfaces after the requests already in flight, not after the whole queue."""
    with open_engine(_settings(fake_vllm, tmp_path), "/m") as eng:
        before = eng.counters().requests
        with pytest.raises(EngineError, match="answered HTTP 400"):
            eng.drive([[-1]] + [[1, 2]] * 30, 2, 4)
        assert eng.counters().requests - before <= 2  # the other client's request in flight, at most one more


@pytest.mark.parametrize("drafted, refused", [((0,) * 6, False), ((3,) * 6, True), ((0,) * 5 + (3,), False)])
def test_check_of_a_no_speculation_range_counts_drafts_a_row_makes(drafted, refused):
    """Where the schedule says K = 0 the engine may still report a step length per row (0 when it drafted nothing);
    only real drafts count, against the tokens the rows got (both one per row a step), at any batch size."""
    from spectune.bench.engine_check import BatchProof
    from spectune.engines import Completion, Counters, Drive

    b = 8
    done = [Completion(6, 1.0, drafted=drafted) for _ in range(b)]
    proof = BatchProof(b, 0, frozenset({0}), [Drive(b, done, 1.0, Counters(generated=6.0 * b))], lookup=False)
    assert bool(proof.failures()) == refused


def test_a_failed_start_shows_its_log_without_the_key_it_echoes(fake_vllm, tmp_path, monkeypatch):
    """vLLM logs its non-default arguments, an --api-key among them; the one-line error quotes the log's end."""
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    with pytest.raises(EngineError) as e:
        open_engine(_settings(fake_vllm, tmp_path, args=("--api-key", "sekr1t-key")), "/m")
    assert "failed to start" in str(e.value) and "--api-key" in str(e.value) and "sekr1t" not in str(e.value)


def test_an_attached_url_keeps_its_query_after_every_path(fake_vllm, tmp_path):
    """``http://host:port/?token=...``: /health, /metrics and /v1/* go before the query, the token masked."""
    with open_engine(_settings(fake_vllm, tmp_path), "/m") as started:
        eng = open_engine(EngineSettings("vllm", url=started.url + "/?token=s3cr3tq"))
        assert eng.at("/metrics") == started.url + "/metrics?token=s3cr3tq"
        assert eng.drive([[1, 2]], 1, 4).tokens == 4 and eng.counters().generated > 0
        assert eng.shown() == started.url + "?token=***"
        odd = open_engine(EngineSettings("vllm", url=started.url.replace("http://", "http://:to?k/en@")))
        assert odd.at("/health") == started.url.replace("http://", "http://:to?k/en@") + "/health"
        assert odd.drive([[1, 2]], 1, 4).tokens == 4 and "to?k" not in odd.shown()


def test_ctrl_c_during_a_drive_ends_it_after_the_requests_in_flight(fake_vllm, tmp_path):
    """Ctrl-C (or SIGTERM, which the CLI turns into it) while clients drive: the queue is not drained first."""
    import signal
    import threading

    main = threading.main_thread().ident
    with open_engine(_settings(fake_vllm, tmp_path), "/m") as eng:
        before = eng.counters().requests
        threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            eng.drive([[1, 2]] * 200, 2, 8)
        assert eng.counters().requests - before < 200


@pytest.mark.parametrize("bf16_cpu, args, dtype, said", [
    (False, (), "bfloat16", True),  # the Zen 3 case: vLLM's default dtype, no bf16 arithmetic
    (True, (), "bfloat16", False),  # a CPU with avx512_bf16 / amx_bf16
    (False, ("--dtype", "float32"), "bfloat16", False),  # the user chose a dtype
    (False, ("--dtype=auto",), "bfloat16", False),
    (False, (), "float32", False),  # a float32 model
])
def test_vllm_says_when_it_would_serve_bf16_on_a_cpu_without_it(tmp_path, monkeypatch, bf16_cpu, args, dtype, said):
    """Said once a process, before a start (open_together, and export --check's open_engine); the engine itself
    never started here."""
    from contextlib import nullcontext

    import spectune.engines as engines
    from spectune import machine

    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": dtype}))
    real = machine.here

    def here(device="cpu"):
        ident = real(device)
        isa = {**ident["cpu"]["isa"], "avx512_bf16": bf16_cpu, "amx_bf16": bf16_cpu}
        return {**ident, "cpu": {**ident["cpu"], "isa": isa}}

    monkeypatch.setattr(machine, "here", here)
    monkeypatch.setattr(engines, "_SAID", set())
    monkeypatch.setattr(VllmEngine, "start", classmethod(lambda cls, launch: nullcontext(object())))
    monkeypatch.setattr(VllmEngine, "attach", classmethod(lambda cls, url: nullcontext(object())))
    notes = VllmEngine.start_notes(args, str(tmp_path))
    assert bool(notes) == said and all("--dtype float32" in n and "\n" not in n for n in notes)
    lines: list[str] = []
    for _ in range(2):
        with engines.open_together(EngineSettings("vllm", args=args), str(tmp_path), [(None, 1)] * 2, lines.append):
            pass
    assert lines == notes  # once
    monkeypatch.setattr(engines, "_SAID", set())
    with engines.open_engine(EngineSettings("vllm", args=args), str(tmp_path), say=lines.append):  # export --check
        pass
    assert lines == notes * 2
    with engines.open_engine(EngineSettings("vllm", args=args, url="http://x:1"), str(tmp_path), say=lines.append):
        pass
    assert lines == notes * 2  # attached: nothing to say
    assert VllmEngine.start_notes(args, str(tmp_path / "no-such-model")) == []


@pytest.mark.parametrize("proposer", ["model", "ngram:1,3"])
def test_check_prints_the_profiles_acceptance_on_mix_too(proposer):
    """``export --check``'s profile acceptance by position is the cost model's prediction of the engine's counter,
    on the traces it prices on: the default workload ``mix`` (no trace workload of its own) pools every workload's,
    as the prediction does, and a workload the profile measured reads its own (before, ``mix`` found no traces and
    the column printed '-'). It counts as the engines do: over rounds, not the calibration's draft states, and over
    the rounds that proposed a token (every round of a draft model, a lookup's rounds that found a match only;
    before, a lookup's misses counted as rejected drafts, 0.07-0.48 too low)."""
    from spectune.bench.engine_check import _profile_acceptance
    from spectune.bench.engine_runs import engine_config
    from spectune.profile import load_profile
    from spectune.profile.lookup import BUNDLED_DIR
    from spectune.tune import CostModel

    prof = load_profile(BUNDLED_DIR / "draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16", check_hardware=False)
    cfg = engine_config(["draft-s", "smollm2-135m"], 1, 8, 3, proposer)
    for workload in ("mix", "code"):
        cm = CostModel(prof, workload, max_new_tokens=8)
        got = _profile_acceptance(cm, cfg)
        sim = cm.simulate(cfg, rows=1, max_new_tokens=cm.sim_tokens)  # the rounds the prediction prices
        accepted = [sum(m.accepted_by_pos[i] for m in sim.stats.models if m.accepted_by_pos) for i in range(3)]
        every = [a / sim.rounds for a in accepted]  # over all rounds, a lookup's misses too
        assert len(got) == 3 and 1 >= got[0] >= got[1] >= got[2] > 0
        past = engine_config(["draft-s", "smollm2-135m"], 1, 8, cm.gamma_max + 1, proposer)
        assert _profile_acceptance(cm, past) == []  # past the calibrated drafts: none, as no prediction
        if proposer == "model":  # a draft model proposes every round: the same as over all rounds
            assert got == pytest.approx(every, rel=0.01)
        else:  # some rounds' lookups find no match: over those that did, acceptance is higher than over all
            assert all(g > e + 0.02 for g, e in zip(got, every))
