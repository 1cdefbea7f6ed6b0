"""Batched decoding: ragged sequences in one loop give each sequence its B = 1 result."""
import pytest
import torch
from fakes import TableLM

from spectune.api import build_decoder, encode
from spectune.decoding import DecodePlan, Decoder, SamplingParams, parse_combination
from spectune.decoding.batch_cache import BatchedRunner

PROMPTS = ["w3 w7 w1", "w12", "w20 w21 w22 w5 w9 w0 w2 w4 w6", "w8 w8"]  # different lengths


@pytest.mark.parametrize("method", ["standard", "sd", "naive-cos", "cos"])
@pytest.mark.parametrize("combine", ["target", "we:0.2,0.3,0.5"])
def test_greedy_batch_equals_single(tiny_models, method, combine):
    models = [tiny_models["s"], tiny_models["m"], tiny_models["l"]]
    tok = models[0].tokenizer
    ids = [encode(tok, p) for p in PROMPTS]
    dec = build_decoder(models, method=method, combine=combine, gamma=[3, 2, 1], ignore_eos=True)
    singles = [dec.generate(p, 12, seed=0)[0] for p in ids]
    outs, per_seq, total = dec.generate_batch(ids, 12, [0] * len(ids))
    assert outs == singles
    assert total.output_tokens == sum(len(o) for o in outs) == 48
    assert [s.output_tokens for s in per_seq] == [12] * 4


def test_sampled_batch_row_equals_its_single_run():
    """Each row has its own generator: a sampled sequence does not depend on its batch neighbours."""
    models = [TableLM(8, seed=1), TableLM(8, seed=2)]
    dec = Decoder(models, ["a", "b"], DecodePlan("cos", parse_combination("we:0.5,0.5", 2), [2, 2],
                                                 SamplingParams(1.0, 0, 1.0)))
    prompts = [[1, 2], [3], [4, 5, 6, 7], [0]]
    outs, _, _ = dec.generate_batch(prompts, 10, [5, 6, 7, 8])
    assert outs == [dec.generate(p, 10, s)[0] for p, s in zip(prompts, [5, 6, 7, 8])]


def test_finished_sequences_leave_the_batch(tiny_models):
    """With EOS allowed, rows that finish early are dropped from every cache (no compute on them)."""
    models = [tiny_models["s"], tiny_models["l"]]
    tok = models[0].tokenizer
    dec = build_decoder(models, method="sd", combine="target", gamma=[2, 1])
    ids = [encode(tok, p) for p in PROMPTS]
    outs, _, _ = dec.generate_batch(ids, 64, [0] * 4)
    assert all(run.rows == 0 for run in dec.runners)
    assert outs == [dec.generate(p, 64, 0)[0] for p in ids]


def test_ragged_runner_rollback_and_compaction_keep_logits():
    """Logits after rollbacks and compaction equal a fresh unpadded forward of the same tokens."""
    m = TableLM(8, seed=3)
    run = BatchedRunner(m, rows=3)
    seqs = [[1, 2, 3], [4], [5, 6]]
    run.forward({i: s for i, s in enumerate(seqs)})
    run.forward({0: [7, 1, 1, 1], 2: [2]})
    run.rollback(0, 4)  # row 0 keeps [1, 2, 3, 7]
    for _ in range(12):
        run.forward({1: [3]})  # grow garbage on rows 0 and 2
    run.rollback(1, 2)
    run.maybe_compact()
    assert run.physical <= 2 * max(run.n) + 16
    got = run.forward({0: [2, 2], 1: [6], 2: [0]})
    for seq, toks in {0: [1, 2, 3, 7, 2, 2], 1: [4, 3, 6], 2: [5, 6, 2, 0]}.items():
        fresh = BatchedRunner(m, rows=1).forward({0: toks})[0]
        want = fresh[-len(got[seq]):]
        assert torch.allclose(got[seq], want), seq


def test_generate_many_seeds_each_prompt_by_its_index_whatever_its_batch(tiny_models):
    """``Decoder.generate_many``: prompt i is decoded with seed + i in every batching, outputs in prompt order, the
    stats merged over the batches (the one loop api.generate_batch, the tuner's measurement and bench share)."""
    from spectune.api import build_decoder, encode

    models = [tiny_models["s"], tiny_models["l"]]
    dec = build_decoder(models, method="sd", gamma=3, temperature=1.0, ignore_eos=True)
    ids = [encode(models[-1].tokenizer, p) for p in ("w1 w2 w3", "w4", "w5 w6", "w7 w8 w9 w1", "w2")]
    outs, per, total = dec.generate_many(ids, 6, batch_size=1, seed=11)
    assert outs == [dec.generate(p, 6, seed=11 + i)[0] for i, p in enumerate(ids)]
    assert len(per) == 5 and total.output_tokens == sum(map(len, outs)) == 30
    chunks = list(dec.batches(ids, 6, batch_size=2, seed=11))
    assert [len(o) for o, _, _ in chunks] == [2, 2, 1]
    assert chunks[2][0][0] == dec.generate_batch([ids[4]], 6, [15])[0][0]  # the last prompt keeps seed + 4
