"""The compiled runtime: a static KV cache (static_cache.py) and compiled forwards behind the runner interface.

Cache logic runs uncompiled here (the same static step, eagerly: fast); a few tests compile for real with
tiny models (CPU compile is slow, so they are few and share compiled graphs through the per-model engines).
Compile-time accounting is tested with a stand-in for ``torch.compile`` and a fake clock: no wall-clock asserts.
"""
import itertools
from types import SimpleNamespace

import pytest
import torch
from fakes import TableLM
from test_distribution import T1, V, run_chi_square
from test_greedy import PROMPTS

import spectune.decoding.static_cache as SC
from spectune.api import build_decoder, encode
from spectune.decoding.batch_cache import BatchedRunner
from spectune.decoding.runtime import make_runner, resolve_runtime
from spectune.decoding.static_cache import StaticRunner, batch_bucket, capacity, k_bucket
from spectune.errors import ConfigError


NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CUDA = pytest.param("cuda", marks=NO_CUDA)


def fresh(model, toks):
    """Logits of ``toks`` from one unpadded forward of the eager reference runner."""
    return BatchedRunner(model, rows=1, device=next(model.parameters()).device).forward({0: toks})[0]


@pytest.fixture(scope="module")
def on_device(tiny_dirs, tiny_models):
    """tiny_models on a device: the session's CPU models, or a CUDA copy (CUDA graphs are only exercised there)."""
    from spectune.models import load_model

    cache = {"cpu": tiny_models}

    def get(device):
        if device not in cache:
            cache[device] = {k: load_model(str(tiny_dirs[k]), device=device, dtype="float32") for k in ("s", "m", "l")}
        return cache[device]

    return get


def test_buckets_and_capacity():
    assert [k_bucket(k) for k in (1, 2, 3, 5, 8, 9, 16)] == [1, 2, 4, 8, 8, 16, 16]
    assert k_bucket(17) is None  # longer feeds (prompts) run uncompiled
    assert [batch_bucket(r) for r in (1, 2, 3, 5, 8, 9, 32, 33)] == [1, 2, 4, 8, 8, 16, 32, 64]
    assert capacity(10) == SC.MIN_SLOTS and capacity(300) == 512 and capacity(460) == 1024


def test_resolve_runtime():
    assert resolve_runtime("auto", "cpu") == "eager" and resolve_runtime(None, "cuda:1") == "compiled"
    assert resolve_runtime(" Compiled ", "cpu") == "compiled" and resolve_runtime("eager", "cuda") == "eager"
    with pytest.raises(ConfigError, match="invalid runtime 'fast'"):
        resolve_runtime("fast", "cpu")
    with pytest.raises(ConfigError, match="cpu or cuda, not mps"):
        resolve_runtime("compiled", "mps")
    assert isinstance(make_runner("eager", TableLM(4, seed=0), 2), BatchedRunner)
    assert isinstance(make_runner("compiled", TableLM(4, seed=0), 2, max_len=8), StaticRunner)


def test_rollback_compaction_and_growth_keep_logits(monkeypatch):
    """Rollbacks, the write pointer passing the capacity (compaction) and a row outgrowing it (a larger store)
    leave every row's logits equal to a fresh unpadded forward of its tokens."""
    monkeypatch.setattr(SC, "capacity", lambda n: 16 if n <= 12 else 64)
    m = TableLM(8, seed=3)
    run = StaticRunner(m, rows=3, max_len=4, compiled=False)
    assert run.slots == 16
    run.forward({0: [1, 2, 3], 1: [4], 2: [5, 6]})
    run.forward({0: [7, 1, 1, 1], 2: [2]})
    run.rollback(0, 4)  # row 0 keeps [1, 2, 3, 7]
    for _ in range(12):
        run.forward({1: [3]})  # rows 0 and 2 get padding slots: the pointer passes the capacity
        run.forward({2: [1, 1]})
        run.rollback(2, 4)  # row 2 keeps [5, 6, 2, 1]
    assert run.compactions > 0 and run.slots == 16
    got = run.forward({0: [2, 2], 1: [6], 2: [0]})
    want = {0: [1, 2, 3, 7, 2, 2], 1: [4] + [3] * 12 + [6], 2: [5, 6, 2, 1, 0]}
    for seq, toks in want.items():
        assert torch.allclose(got[seq], fresh(m, toks)[-len(got[seq]):]), seq
    long = run.forward({1: [2] * 9})  # row 1 now holds 23 tokens: more than 16 slots
    assert run.slots == 64 and torch.allclose(long[1], fresh(m, want[1] + [2] * 9)[-9:])


def test_release_packs_rows_and_matches_the_ragged_runner(tiny_models):
    """A tiny Llama through the static path (uncompiled) vs the ragged eager runner, rows leaving midway."""
    m = tiny_models["l"].model
    ref, run = BatchedRunner(m, rows=3), StaticRunner(m, rows=3, max_len=32, compiled=False)
    script = [{0: [1, 2, 3], 1: [4], 2: [5, 6, 7, 8]}, {0: [9], 2: [3, 3]}, "release 0", {1: [2, 2, 2], 2: [1]},
              "rollback 1 2", {1: [5, 6], 2: [7]}]
    for op in script:
        if isinstance(op, str):
            what, *args = op.split()
            for r in (ref, run):
                r.release([int(args[0])]) if what == "release" else r.rollback(int(args[0]), int(args[1]))
            continue
        a, b = ref.forward(op), run.forward(op)
        for seq in op:
            assert torch.allclose(a[seq], b[seq], atol=1e-5), (op, seq)
    assert run.live == [1, 2] and run.n[1] == 4 and run.calls == ref.calls == 4


@pytest.mark.parametrize("compiled,device", [(False, "cpu"), (True, "cpu"), pytest.param(True, "cuda", marks=NO_CUDA)],
                         ids=["static-eager", "compiled", "compiled-cuda"])
def test_bucket_padding_never_changes_a_rows_logits(on_device, compiled, device):
    """Row 0's three tokens run in the k = 4 bucket, its batch of 3 in the 4-row bucket: what fills the padding
    (padding tokens, another row's real tokens, a padding row) does not change row 0's logits at all."""
    m = on_device(device)["m"].model
    outs = []
    for other in ([], [6, 6, 6, 6], [2]):
        run = StaticRunner(m, rows=3, max_len=24, compiled=compiled, device=device)
        run.forward({0: [3, 1, 4, 1, 5], 1: [9, 2, 6], 2: [5, 3]})
        if compiled:
            run.warmup(k_buckets=[4])
        feeds = {0: [5, 8, 9]} | ({1: other} if other else {})
        outs.append(run.forward(feeds)[0])
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert torch.allclose(outs[0], fresh(m, [3, 1, 4, 1, 5, 5, 8, 9])[-3:], atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_compiled_greedy_equals_standard_and_eager(on_device, device):
    """Greedy decoding through the compiled runtime: every method equals standard, and the tokens are the
    eager runtime's (a ragged batch of prompts, one of them alone)."""
    models = [on_device(device)["s"], on_device(device)["l"]]
    tok = models[-1].tokenizer
    ids = [encode(tok, p) for p in PROMPTS]
    eager = build_decoder(models, method="standard", ignore_eos=True, runtime="eager", device=device)
    refs = eager.generate_batch(ids, 10, [0] * len(ids))[0]
    for method, gamma in [("standard", None), ("sd", [3, 1]), ("cos", [2, 2])]:
        dec = build_decoder(models, method=method, gamma=gamma, ignore_eos=True, runtime="compiled", device=device)
        assert dec.generate_batch(ids, 10, [0] * len(ids))[0] == refs, method
        assert dec.generate(ids[1], 10, seed=0)[0] == refs[1], method
        assert all(isinstance(r, StaticRunner) for r in dec.runners)
        assert all(r.engine._compiled is not None for r in dec.runners if r.calls)  # the models it ran compiled
    assert SC._graphs_compiled() > 0


def test_compiled_samples_exactly_from_r():
    """One chi-square test through the compiled static path (the sampling harness of test_distribution)."""
    models = [TableLM(V, seed=11 + i) for i in range(2)]
    p, stats = run_chi_square(models, "cos", "we:0.3,0.7", [2, 1], T1, n=6000, runtime="compiled")
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    assert stats.recovered_tokens > 0 and stats.bonus_tokens > 0


def test_engines_are_reused_and_a_stale_runner_fails_loudly():
    m = TableLM(8, seed=1)
    a = StaticRunner(m, rows=2, max_len=8, compiled=False)
    b = StaticRunner(m, rows=2, max_len=8, compiled=False)
    assert a.engine is not b.engine  # a still holds its store
    a.forward({0: [1], 1: [2]})
    a.release([0, 1])  # every sequence finished: its store is free
    c = StaticRunner(m, rows=1, max_len=8, compiled=False)
    assert c.engine is a.engine and not c.engine.valid.any()
    with pytest.raises(RuntimeError, match="taken by a newer runner"):
        a.forward({0: [1]})  # a's sequences are gone and its store is c's now


class FakeCompile:
    """``torch.compile`` stand-in: the step runs eagerly; the first call of each shape "compiles" (dynamo's
    graph counter goes up and the fake clock jumps by 1000 s). Every read of the fake clock advances it 1 s."""

    def __init__(self, monkeypatch):
        self.now, self.seen = 0.0, set()
        monkeypatch.setattr(SC, "time", SimpleNamespace(perf_counter=self.tick))
        monkeypatch.setattr(SC.torch, "compile", self.compile)

    def tick(self):
        self.now += 1.0
        return self.now

    def compile(self, fn, **kw):
        from torch._dynamo.utils import counters

        def run(x):
            if x.shape not in self.seen:
                self.seen.add(x.shape)
                counters["stats"]["unique_graphs"] += 1
                self.now += 1000.0
            return fn(x)

        return run


def test_compile_time_is_kept_apart(monkeypatch):
    fake = FakeCompile(monkeypatch)
    run = StaticRunner(TableLM(8, seed=2), rows=2, max_len=8)  # a fresh model: no engine compiled before
    run.forward({0: [1, 2], 1: [3]})  # the first call allocates the store: uncompiled
    for toks in ([1], [2], [3, 4], [5]):
        run.forward({0: toks, 1: [6]})
    assert len(fake.seen) == 2  # shapes (2 rows, k 1) and (2 rows, k 2)
    assert run.seconds == 3.0 and run.calls == 5  # 1 s per warm call; the 2 compiling calls are not in it
    assert run.compile_seconds == 2 * 1001.0 and run.by_k == {2: [1, 1.0], 1: [2, 2.0]}


def test_latency_of_the_compiled_runtime_excludes_compile_time(monkeypatch, tiny_dirs):
    from spectune.calibration import latency as L
    from spectune.models import load_model

    FakeCompile(monkeypatch)
    mods = {k: load_model(str(tiny_dirs[k])).model for k in ("s", "m")}  # fresh objects: their engines use the fake
    grid = L.LatencyGrid(batch_sizes=(2,), max_k=3, contexts=(5,), repeats=2, warmup=1)
    log = {}
    rows = L.measure_chunk(mods, 2, 5, grid, runtime="compiled", compile_log=log)
    assert len(rows) == 2 * 3 and all(r["feasible"] and r["repeats"] == 2 for r in rows)
    assert {r["median_s"] for r in rows} == {1.0}  # the fake clock: one tick per timed forward
    assert log["seconds"] >= 2 * 1000  # every model compiled its k buckets (1, 2, 4) in its warm-up


def test_calibrate_records_the_runtime_and_its_compile_stage(monkeypatch, tiny_dirs, tmp_path):
    from spectune.calibration import calibrate
    from spectune.calibration.views import summary
    from spectune.machine import here, profile_mismatch

    monkeypatch.setattr(SC.torch, "compile", lambda fn, **kw: fn)  # the path, without CPU compile time
    wl = tmp_path / "prompts.txt"
    wl.write_text("w1 w2 w3\nw4 w5\nw6 w7 w8\nw9 w1\n")
    prof = calibrate([str(tiny_dirs[k]) for k in ("s", "l")], workload=str(wl), batch_sizes=(1, 2), contexts=(4,),
                     max_k=2, repeats=1, quiet_attempts=1, prompts_per_workload=2, states_per_prompt=1, progress=False,
                     runtime="compiled", out=tmp_path / "prof")
    meta = prof.meta
    assert meta["settings"]["runtime"] == "compiled" and meta["stages"]["compile"]["finished"]
    assert profile_mismatch(meta, here("cpu"), runtime="compiled") is None
    assert "compiled runtime, this run uses eager" in profile_mismatch(meta, here("cpu"), runtime="eager")
    assert "runtime compiled (compiling" in summary(prof)


def test_cli_rejects_a_bad_runtime_in_one_line():
    from click.testing import CliRunner

    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["generate", "--runtime", "fast", "--prompt", "x"])
    assert res.exit_code == 2 and "Invalid value for '--runtime'" in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_bundled_family_compiled_greedy_is_token_identical_to_eager(device):
    """The bundled draft and SmolLM2 (in --dtype auto's dtype): compiled and eager give the same greedy tokens,
    sd equals standard, at batch 2."""
    from spectune.models import load_models

    models = load_models(["draft-s", "smollm2-135m"], device=device)
    tok = models[-1].tokenizer
    ids = [encode(tok, p) for p in ("def is_prime(n):", "The capital of France is")]
    outs = {}
    for runtime, method in itertools.product(["eager", "compiled"], ["standard", "sd"]):
        dec = build_decoder(models, method=method, gamma=[3, 1], ignore_eos=True, runtime=runtime, device=device)
        outs[runtime, method] = dec.generate_batch(ids, 12, [0, 0])[0]
    assert len({str(v) for v in outs.values()}) == 1, outs
