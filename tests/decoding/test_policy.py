"""Draft-length policies: the rules by hand, greedy equality with ``standard``, and exact sampling (chi-square)."""
import itertools

import pytest
from fakes import TableLM
from test_distribution import T1, V, run_chi_square

from spectune.api import build_decoder, encode
from spectune.decoding.policy import ConfidencePolicy, DraftPolicy, HeuristicPolicy, parse_policy
from spectune.errors import ConfigError


def test_policy_rules_and_registry():
    h = HeuristicPolicy()
    assert [h.update(5, 5, 5), h.update(5, 5, 4), h.update(1, 1, 0), h.update(2, 3, 3)] == [7, 4, 1, 4]
    assert DraftPolicy().update(5, 5, 5) == 5 and not DraftPolicy().stop(0.0)
    c = parse_policy("confidence:0.4")
    assert c == ConfidencePolicy(0.4) and c.stop(0.39) and not c.stop(0.4) and c.spec == "confidence:0.4"
    assert parse_policy(None).spec == "fixed" and parse_policy("heuristic").spec == "heuristic"
    for bad in ["sv", "confidence", "confidence:1.5", "confidence:x", "heuristic:2", "fixed:1", 3]:
        with pytest.raises(ConfigError):
            parse_policy(bad)


PROMPTS = ["w3 w7 w1", "w12 w4", "w20 w21 w22 w5 w9 w0 w2"]


@pytest.mark.parametrize("policy", ["heuristic", "confidence:0.5"])
def test_policies_equal_standard_under_greedy(tiny_models, policy):
    models = [tiny_models["s"], tiny_models["l"]]
    tok = models[-1].tokenizer
    for combine in ["target", "we:0.4,0.6"]:
        base = build_decoder(models, method="standard", combine=combine, ignore_eos=True)
        for method, g in itertools.product(["sd", "naive-cos", "cos"], [1, 3]):
            dec = build_decoder(models, method=method, combine=combine, gamma=[g, 2], ignore_eos=True, policy=policy)
            for p in PROMPTS:
                ids = encode(tok, p)
                assert dec.generate(ids, 16, 0)[0] == base.generate(ids, 16, 0)[0], f"{policy} {method} {combine}"


def test_heuristic_grows_blocks_when_everything_is_accepted(tiny_models):
    """Draft = target: every block is accepted, so blocks grow 1, 3, 5, ... (fixed would stay at 1)."""
    models = [tiny_models["l"], tiny_models["l"]]
    ids = encode(models[0].tokenizer, PROMPTS[0])
    grown = build_decoder(models, method="sd", gamma=1, ignore_eos=True, policy="heuristic").generate(ids, 30, 0)[1]
    fixed = build_decoder(models, method="sd", gamma=1, ignore_eos=True).generate(ids, 30, 0)[1]
    assert len(fixed.models[0].proposed_by_pos) == 1
    # blocks of 1, 3, 5, 7, 9 drafts, each + a bonus token: 2 + 4 + 6 + 8 + 10 = 30 tokens
    assert grown.models[0].proposed_by_pos == [5, 4, 4, 3, 3, 2, 2, 1, 1]


def test_confidence_cuts_blocks_after_an_unsure_token(tiny_models):
    """Draft = target (all accepted): a threshold above every draft probability leaves blocks of one token;
    fixed drafts gamma."""
    models = [tiny_models["l"], tiny_models["l"]]
    ids = encode(models[0].tokenizer, PROMPTS[1])
    cut = build_decoder(models, method="sd", gamma=4, ignore_eos=True, policy="confidence:0.999999")
    fixed = build_decoder(models, method="sd", gamma=4, ignore_eos=True)
    assert len(cut.generate(ids, 20, 0)[1].models[0].proposed_by_pos) == 1
    assert len(fixed.generate(ids, 20, 0)[1].models[0].proposed_by_pos) > 1


@pytest.mark.parametrize("method,combine,gamma,policy", [
    ("naive-cos", "target", [1, 1], "heuristic"),  # no bonus: a first block of 1 accepted -> the next drafts 2
    ("cos", "we:0.5,0.5", [3, 1], "confidence:0.3"),
], ids=["naive-cos-heuristic", "cos-confidence"])
def test_policies_sample_exactly_from_r(method, combine, gamma, policy):
    models = [TableLM(V, seed=11 + i) for i in range(2)]
    p, st = run_chi_square(models, method, combine, gamma, T1, policy=parse_policy(policy))
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    assert st.recovered_tokens > 0
    if policy == "heuristic":  # with fixed gamma 1 no second position would ever be verified
        assert len(st.models[0].proposed_by_pos) >= 2


def test_acceptance_by_position_counts_the_blocks_that_proposed_as_the_engines_count_drafts():
    """P(the first i proposals accepted) over the blocks that verified a proposal (an engine's per-position counter
    over its drafts): a lookup's miss, which verifies nothing, is no draft; a block proposing fewer than K tokens
    counts as not accepted past them."""
    from spectune.decoding.stats import DecodeStats

    st = DecodeStats.for_models("sd", ["target", "lookup"])
    for verified, accepted in [(3, 1), (3, 3), (0, 0), (2, 2)]:
        st.record_block(1, verified, accepted)
    assert st.acceptance_by_position(4) == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])  # 3 drafts, not 4
    assert all(x != x for x in DecodeStats.for_models("sd", ["t"]).acceptance_by_position(2))  # none: NaN
