"""The ngram (prompt lookup) proposer: the matcher on hand-made contexts, greedy equality with ``standard``
(lookups that hit and miss), ragged batches, and exact sampling from r (chi-square, as test_distribution.py)."""
import pytest
from fakes import TableLM
from test_distribution import T1, V, WARPED, run_chi_square

from spectune.api import build_decoder, encode
from spectune.decoding.ngram import find_continuation
from spectune.decoding.proposers import NgramProposer
from spectune.decoding.sampling import point_mass
from spectune.errors import ConfigError


@pytest.mark.parametrize("context,n_min,n_max,k,want", [
    ([1, 2, 3, 4, 1, 2], 1, 3, 3, [3, 4, 1]),  # suffix (1, 2) occurred at 0; 3 tokens follow it
    ([1, 2, 3, 4, 1, 2], 1, 3, 10, [3, 4, 1, 2]),  # k larger than what follows: up to the context's end
    ([9, 2, 5, 7, 2, 6, 1, 2], 1, 2, 2, [6, 1]),  # only (2,) matches: its most recent occurrence (index 4) wins
    ([1, 2, 8, 7, 2, 9, 1, 2], 1, 2, 2, [8, 7]),  # the longer suffix (1, 2) beats the more recent (2,)
    ([1, 2, 8, 7, 2, 9, 1, 2], 1, 1, 2, [9, 1]),  # n_max = 1: only (2,), most recent at index 4
    ([5, 6, 7], 1, 2, 2, []),  # nothing repeats: a miss
    ([1, 2, 3, 2], 2, 3, 4, []),  # (2,) would match, but n_min = 2 forbids it
    ([4, 4, 4], 1, 1, 3, [4]),  # the match at index 1 is followed by the last token only
    ([3, 1, 3, 1, 3], 2, 2, 4, [1, 3]),  # overlapping match (1, 3) at index 1 runs into the suffix
    ([7], 1, 3, 2, []),  # one token: nothing precedes it
    ([1, 2, 1], 1, 2, 0, []),  # k = 0 proposes nothing
])
def test_matcher_on_hand_made_contexts(context, n_min, n_max, k, want):
    assert find_continuation(context, n_min, n_max, k) == want


@pytest.mark.parametrize("context,n_min,n_max,k,want", [
    ([9, 2, 5, 7, 2, 6, 1, 2], 1, 2, 2, [5, 7]),  # only (2,) matches: its earliest occurrence (index 1) wins
    ([1, 2, 8, 2, 9, 1, 2, 3, 1, 2], 1, 2, 2, [8, 2]),  # (1, 2) at 0 and 5: the earliest
    ([2, 5, 1, 2, 8, 7, 1, 2], 1, 2, 2, [8, 7]),  # the longer suffix (1, 2) still beats an earlier (2,)
    ([4, 4, 4], 1, 1, 3, [4, 4]),  # the earliest match (index 0) runs into the suffix
])
def test_earliest_match_on_hand_made_contexts(context, n_min, n_max, k, want):
    assert find_continuation(context, n_min, n_max, k, match="earliest") == want


def _vllm_ngram(tokens, min_ngram, max_ngram, k):
    """vLLM 0.32.0's ``_find_longest_matched_ngram_and_propose_tokens`` (v1/spec_decode/ngram_proposer.py, KMP
    over the reversed context; max_model_len unbounded), transcribed line by line as the oracle."""
    total = len(tokens)
    if total < min_ngram:
        return []
    rev, lps = tokens[::-1], [0] * max_ngram
    longest = position = prev = 0
    i = 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:
                longest, position = prev, i
            if i < max_ngram:
                lps[i] = prev
            if prev == max_ngram:
                prev = lps[max_ngram - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_ngram:
        return []
    start = total - 1 - position + longest
    return tokens[start:start + min(k, total - start)]


def test_earliest_match_is_vllms_rule():
    import random

    rng = random.Random(0)
    for _ in range(3000):
        ctx = [rng.randrange(rng.choice([2, 3, 5])) for _ in range(rng.randrange(1, 30))]
        n_min = rng.randrange(1, 4)
        n_max, k = rng.randrange(n_min, 6), rng.randrange(1, 8)
        assert find_continuation(ctx, n_min, n_max, k, match="earliest") == _vllm_ngram(ctx, n_min, n_max, k), (
            ctx, n_min, n_max, k)
    with pytest.raises(ConfigError, match="unknown lookup match"):
        NgramProposer(1, 3, match="first")


def _llamacpp_ngram_simple(tokens, sampled, size_n, size_m):
    """llama.cpp b11434's ``common_ngram_simple_draft`` (common/ngram-map.cpp), transcribed as the oracle."""
    cur_len = len(tokens)
    if cur_len <= size_n + size_m + 1:
        return []
    pattern = [tokens[j] for j in range(cur_len - size_n + 1, cur_len)] + [sampled]
    match_pos = 0
    for j in range(cur_len - size_n - 1, 0, -1):
        if all(tokens[j + k] == pattern[k] for k in range(len(pattern))):
            match_pos = j
            break
    if match_pos == 0:
        return []
    copy_max = min(size_m, cur_len - (match_pos + size_n))
    if copy_max < size_n:
        return []
    return [tokens[match_pos + size_n + j] for j in range(copy_max)]


def test_llamacpp_match_is_ngram_simples_rule():
    import random

    rng = random.Random(1)
    for _ in range(3000):
        ctx = [rng.randrange(rng.choice([2, 3, 5])) for _ in range(rng.randrange(2, 30))]
        n, k = rng.randrange(1, 4), rng.randrange(1, 8)
        got = find_continuation(ctx, 1, n, k, match="llamacpp")  # ngram-simple looks up N_MAX only
        assert got == _llamacpp_ngram_simple(ctx[:-1], ctx[-1], n, k), (ctx, n, k)
    assert find_continuation([1, 2, 3, 4, 5, 6, 1, 2], 1, 2, 3) == [3, 4, 5]
    assert find_continuation([1, 2, 3, 4, 5, 6, 1, 2], 1, 2, 3, match="llamacpp") == []  # a match at 0 is none
    assert find_continuation([9, 1, 2, 3, 4, 5, 6, 1, 2], 1, 2, 3, match="llamacpp") == [3, 4, 5]
    assert find_continuation([1, 2, 3, 1, 2], 1, 2, 3, match="llamacpp") == []  # too short a context


def test_point_mass_and_parse():
    assert point_mass(2, 4).tolist() == [0.0, 0.0, 1.0, 0.0]
    assert NgramProposer.parse("1,3") == NgramProposer(1, 3) and NgramProposer(1, 3).spec == "ngram:1,3"
    for bad in ["", "2", "3,1", "0,2", "a,b", "1,2,3"]:
        with pytest.raises(ConfigError):
            NgramProposer.parse(bad)


PROMPTS = ["w3 w7 w1 w3 w7 w1 w3 w7", "w12 w4 w12", "w20 w21 w22 w5 w9 w0 w2", "w8"]


@pytest.mark.parametrize("members,combine", [("l", "target"), ("sl", "target"), ("sl", "we:0.4,0.6"),
                                             ("sl", "cd:0.3")])
def test_ngram_equals_standard_under_greedy(tiny_models, members, combine):
    models = [tiny_models[m] for m in members]
    tok = models[-1].tokenizer
    base = build_decoder(models, method="standard", combine=combine, ignore_eos=True)
    hits = misses = 0
    for gamma in (1, 4):
        dec = build_decoder(models, method="sd", combine=combine, gamma=gamma, ignore_eos=True,
                            proposer="ngram:1,3")
        for p in PROMPTS:
            ids = encode(tok, p)
            out, st = dec.generate(ids, 24, seed=0)
            assert out == base.generate(ids, 24, seed=0)[0], f"{combine} gamma={gamma} prompt={p!r}"
            assert st.output_tokens == 24 and st.models[-1].name == "ngram:1,3"
            steps = st.models[len(models) - 1].forward_calls  # the last model of r runs once per step
            hits += st.blocks
            misses += steps - st.blocks
    assert hits > 0 and misses > 0  # both a lookup that proposes and a plain verification step happened


def test_ngram_ragged_batch_equals_single(tiny_models):
    models = [tiny_models["s"], tiny_models["l"]]
    dec = build_decoder(models, method="sd", combine="we:0.5,0.5", gamma=3, ignore_eos=True, proposer="ngram:1,2")
    ids = [encode(models[0].tokenizer, p) for p in PROMPTS]
    outs, per_seq, _ = dec.generate_batch(ids, 16, [0] * len(ids))
    assert outs == [dec.generate(p, 16, 0)[0] for p in ids]
    assert sum(s.models[-1].proposed for s in per_seq) > 0


# a prompt whose bigrams repeat, so the lookup hits at the start and misses once a new token is sampled
LOOKUP_PROMPT = [3, 5, 3, 5, 3]


@pytest.mark.parametrize("members,combine,gamma,sp", [
    (1, "target", [3], T1),
    (2, "cd:0.5", [2, 1], WARPED),
], ids=["target", "cd-warped"])
def test_ngram_samples_exactly_from_r(members, combine, gamma, sp):
    models = [TableLM(V, seed=11 + i) for i in range(members)]
    p, st = run_chi_square(models, "sd", combine, gamma, sp, prompt=LOOKUP_PROMPT, proposer=NgramProposer(1, 2))
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    look = st.models[-1]
    assert look.proposed > look.accepted > 0 and st.recovered_tokens > 0  # hits, accepts and rejections


def test_point_mass_rule_is_r_with_x_removed():
    """Against q = onehot(x): accept with probability r(x); the residual is r without x, renormalised."""
    import torch

    import spectune.decoding.sampling as S

    r = torch.tensor([0.1, 0.6, 0.3])
    q = point_mass(1, 3)
    assert torch.allclose(S.accept_prob(r, q, torch.tensor(1)), torch.tensor(0.6))
    assert torch.allclose(S.residual(r, q), torch.tensor([0.25, 0.0, 0.75]))
    assert S.residual(torch.tensor([0.0, 1.0, 0.0]), q).tolist() == [0.0, 1.0, 0.0]  # r(x) = 1: never rejected


# ---- ngram+model: the lookup where it matches, model 0's draft where it misses

def test_ngram_model_parse():
    p = NgramProposer.parse_fallback("1,3")
    assert p == NgramProposer(1, 3, True, 8) and p.spec == "ngram+model:1,3,8" and p.kind == "ngram+model"
    assert NgramProposer.parse_fallback("2,4,5").spec == "ngram+model:2,4,5" and p.lookup_spec == "ngram:1,3"
    for bad in ["", "2", "3,1", "1,2,0", "1,2,x", "1,2,3,4"]:
        with pytest.raises(ConfigError):
            NgramProposer.parse_fallback(bad)


@pytest.mark.parametrize("members,combine,policy", [("sl", "target", "fixed"), ("sl", "we:0.4,0.6", "heuristic"),
                                                    ("sl", "cd:0.3", "confidence:0.5")])
def test_ngram_model_equals_standard_under_greedy(tiny_models, members, combine, policy):
    models = [tiny_models[m] for m in members]
    tok = models[-1].tokenizer
    base = build_decoder(models, method="standard", combine=combine, ignore_eos=True)
    looked = drafted = 0
    for gamma, spec in ((1, "ngram+model:1,3,2"), (3, "ngram+model:1,2,5")):
        dec = build_decoder(models, method="sd", combine=combine, gamma=[gamma, 1], ignore_eos=True, proposer=spec,
                            policy=policy)
        for p in PROMPTS:
            ids = encode(tok, p)
            out, st = dec.generate(ids, 24, seed=0)
            assert out == base.generate(ids, 24, seed=0)[0], f"{combine} {spec} prompt={p!r}"
            assert st.output_tokens == 24 and st.models[-1].name == spec
            looked += st.models[-1].proposed
            drafted += st.models[0].proposed
    assert looked > 0 and drafted > 0  # both proposers proposed


def test_ngram_model_ragged_batch_equals_single(tiny_models):
    models = [tiny_models["s"], tiny_models["l"]]
    dec = build_decoder(models, method="sd", gamma=[2, 1], ignore_eos=True, proposer="ngram+model:1,2,4")
    ids = [encode(models[0].tokenizer, p) for p in PROMPTS]
    outs, per_seq, _ = dec.generate_batch(ids, 16, [0] * len(ids))
    assert outs == [dec.generate(p, 16, 0)[0] for p in ids]
    assert sum(s.models[-1].proposed for s in per_seq) > 0 and sum(s.models[0].proposed for s in per_seq) > 0


@pytest.mark.parametrize("combine,gamma,sp,policy", [
    ("target", [2, 1], T1, "fixed"),
    ("we:0.5,0.5", [3, 1], WARPED, "heuristic"),
], ids=["target", "we-warped-heuristic"])
def test_ngram_model_samples_exactly_from_r(combine, gamma, sp, policy):
    from spectune.decoding.policy import parse_policy

    models = [TableLM(V, seed=21 + i) for i in range(2)]
    p, st = run_chi_square(models, "sd", combine, gamma, sp, prompt=LOOKUP_PROMPT,
                           proposer=NgramProposer(1, 2, True, 3), policy=parse_policy(policy))
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    look, draft = st.models[-1], st.models[0]
    assert look.proposed > look.accepted > 0 and draft.proposed > draft.accepted > 0  # both proposers, both rules
    assert st.recovered_tokens > 0
