"""``--runtime llamacpp``: the runner contract on llama.cpp's kernels, and the methods over it.

The bundled pair (draft-s, SmolLM2-135M) runs as GGUFs of its bf16 weights. llama.cpp's kernels accumulate in
their own order, so logits of one position fed in different shapes agree to bf16 rounding, not bit for bit; the
same shape fed again agrees exactly. Without llama-cpp-python these skip with one line, except where
``SPECTUNE_REQUIRE_ENGINES`` is set (CI), where they fail.
"""
from __future__ import annotations

import os

import pytest
import torch
from click.testing import CliRunner

PAIR = ["draft-s", "smollm2-135m"]
PROMPTS = ["def fibonacci(n):", "SELECT name, count(*) FROM users"]
TOL = 0.5  # max |logit difference| of one position fed in different shapes (bf16 weights, f16 KV cache; logits 5-25)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair():
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        if os.environ.get("SPECTUNE_REQUIRE_ENGINES"):
            pytest.fail("SPECTUNE_REQUIRE_ENGINES is set but llama-cpp-python is not installed")
        pytest.skip("llama-cpp-python not installed (README, 'The llamacpp runtime')")
    from spectune.decoder import runner_models
    from spectune.models import load_models

    loaded = load_models(PAIR)
    return loaded, runner_models(loaded, "llamacpp")


def _ids(loaded, text):
    return loaded[-1].tokenizer(text, add_special_tokens=False)["input_ids"]


def _runner(gguf, rows, max_len=128):
    from spectune.decoding.llamacpp_runner import LlamaCppRunner

    return LlamaCppRunner(gguf, rows, max_len=max_len)


def test_a_feed_at_once_equals_it_token_by_token(pair):
    loaded, ggufs = pair
    ids = _ids(loaded, PROMPTS[0])
    whole = _runner(ggufs[-1], 1).forward({0: ids})[0]  # [len, V]
    step = _runner(ggufs[-1], 1)
    one = torch.cat([step.forward({0: ids[:-2]})[0][-1:]] + [step.forward({0: [t]})[0] for t in ids[-2:]])
    assert whole.shape == (len(ids), ggufs[-1].n_vocab) and whole.dtype == torch.float32
    assert (whole[-3:] - one).abs().max() < TOL
    assert torch.equal(whole[-3:].argmax(-1), one.argmax(-1))
    assert step.n == [len(ids)] and step.calls == 3 and step.tokens == len(ids)


def test_ragged_rows_in_one_call_match_each_row_alone(pair):
    loaded, ggufs = pair
    a, b = (_ids(loaded, p) for p in PROMPTS)
    run = _runner(ggufs[-1], 2)
    run.forward({0: a[:-3], 1: b[:-1]})
    got = run.forward({0: a[-3:], 1: b[-1:]})  # rows feed 3 and 1 tokens in one llama_decode
    assert run.by_k[3][0] == 1 and run.n == [len(a), len(b)]
    for row, ids, n in ((0, a, 3), (1, b, 1)):
        alone = _runner(ggufs[-1], 1).forward({0: ids})[0][-n:]
        assert got[row].shape == (n, ggufs[-1].n_vocab) and (got[row] - alone).abs().max() < TOL


def test_rollback_and_release_free_the_cells(pair):
    loaded, ggufs = pair
    ids = _ids(loaded, PROMPTS[1])
    run = _runner(ggufs[0], 2, max_len=64)
    run.forward({0: ids, 1: ids})
    first = run.forward({0: [5, 6, 7]})[0]
    run.rollback(0, len(ids))
    assert run.n[0] == len(ids)
    assert torch.equal(run.forward({0: [5, 6, 7]})[0], first)  # the same cells again: the same logits
    run.release([1])
    for _ in range(40):  # a row that keeps rolling back never runs out of cells
        run.forward({0: [1, 2, 3, 4]})
        run.rollback(0, len(ids) + 3)
    assert run.n == [len(ids) + 3, 0]


@pytest.mark.parametrize("method,proposer,policy,gamma", [
    ("sd", None, None, (3, 1)), ("sd", "ngram:1,3", None, (4,)), ("sd", "ngram+model:1,3,4", "confidence:0.5", (2, 1)),
    ("cos", None, None, (2, 1)), ("naive-cos", None, None, (2, 1))])
def test_every_method_decodes_greedy_as_the_target_alone(pair, method, proposer, policy, gamma):
    """Greedy speculation over llama.cpp returns the target alone's tokens (r = the target), except that where
    the target's two best logits lie within the kernels' shape noise (``TOL``) a verification forward over k
    tokens, rounding otherwise than a one-token one, may pick the other: the first token where the two differ
    must be such a near-tie (on these prompts the margins run from 0.02 to 10)."""
    from spectune.decoder import build_decoder

    loaded, ggufs = pair
    prompts = [_ids(loaded, p) for p in PROMPTS]
    ref = build_decoder(loaded[1:], method="standard", ignore_eos=True, runtime="llamacpp")
    want, _, _ = ref.generate_batch(prompts, 24, [0, 1])
    models = loaded[1:] if proposer and proposer.startswith("ngram:") else loaded
    dec = build_decoder(models, method=method, gamma=gamma, proposer=proposer, policy=policy, ignore_eos=True,
                        runtime="llamacpp")
    got, _, stats = dec.generate_batch(prompts, 24, [0, 1])
    for p, g, w in zip(prompts, got, want):
        first = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), None)
        assert len(g) == len(w) == 24
        assert first is None or _margin(ggufs[-1], p, w)[first] < TOL, (first, g, w)
    assert dec.runtime == "llamacpp" and stats.models[-1].forward_calls < 2 * 24


def _margin(target, prompt, out):
    """[len(out)]: the target's best logit less its second best where it chose each token of ``out``."""
    logits = _runner(target, 1).forward({0: prompt + out})[0][len(prompt) - 1 : len(prompt) - 1 + len(out)]
    top = logits.topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def test_calibration_times_llamacpps_forward(pair):
    from spectune.calibration.latency import LatencyGrid, measure_chunk

    _, ggufs = pair
    grid = LatencyGrid(batch_sizes=(2,), max_k=3, contexts=(32,), repeats=2, warmup=1)
    rows = measure_chunk(dict(zip(PAIR, ggufs)), 2, 32, grid, runtime="llamacpp")
    assert {(r["model"], r["k"]) for r in rows} == {(m, k) for m in PAIR for k in (1, 2, 3)}
    assert all(r["feasible"] and r["median_s"] > 0 and r["repeats"] >= 2 for r in rows)


def test_generate_runs_on_llamacpp_and_refuses_a_gpu(pair):
    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["generate", "--runtime", "llamacpp", "--models", ",".join(PAIR), "--method",
                                   "cos", "--prompt", PROMPTS[0], "--max-new-tokens", "8", "--json"])
    assert res.exit_code == 0, res.output
    bad = CliRunner().invoke(cli, ["generate", "--runtime", "llamacpp", "--device", "cuda", "--prompt", "x"])
    assert bad.exit_code != 0 and "the llamacpp runtime runs on the cpu" in bad.output
    assert "Traceback" not in bad.output


def test_runtime_compare_puts_llamacpp_beside_eager(pair, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import runtime_compare as rc

    res = rc.main(["--runtimes", "eager,llamacpp", "--models", "draft-s", "--batch-sizes", "1,2", "--ks", "1,2",
                   "--ctx", "8", "--repeats", "1", "--pair", ",".join(PAIR), "--gen-batch-sizes", "1",
                   "--new-tokens", "4"])
    assert {(r["runtime"], r["batch"], r["k"]) for r in res["latency"]} == {
        (rt, b, k) for rt in ("eager", "llamacpp") for b in (1, 2) for k in (1, 2)}
    assert all(r["L_ms"] > 0 for r in res["latency"])
    assert {(r["runtime"], r["method"]) for r in res["generate"]} == {
        (rt, m) for rt in ("eager", "llamacpp") for m in ("standard", "sd", "ngram:1,3", "we standard", "we cos")}
    assert "llamacpp L" in capsys.readouterr().out
