"""Every field of a decode config, given bad values by class (in the library and through ``generate --config``):
a one-line ``ConfigError`` naming the field, before any model loads."""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fuzz_helpers import CHEAP, CLI, assert_one_line_error
from spectune.cli import cli
from spectune.config import DecodeConfig
from spectune.errors import ConfigError

VALID = {"models": ["a", "b"], "method": "sd", "combine": "target", "gamma": [2, 1], "temperature": 0.5,
         "top_k": 0, "top_p": 0.9, "seed": 1, "max_new_tokens": 8, "batch_size": 1, "extra": {}}

NON_NUMBER = st.one_of(st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2),
                       st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
BOOL = st.booleans()
NEGATIVE = st.one_of(st.integers(-10**30, -1), st.floats(-1e300, -1e-9))
FRACTION = st.floats(0.01, 1e6).filter(lambda x: not x.is_integer())
CLASSES: dict[str, dict[str, st.SearchStrategy]] = {
    "models": {"type": st.one_of(st.none(), st.integers(), st.text(min_size=1, max_size=5),
                                 st.lists(st.one_of(st.integers(), st.none(), st.just("")), min_size=1, max_size=2))},
    "method": {"type": st.one_of(st.none(), st.integers(), st.lists(st.just("cos"), min_size=1, max_size=1)),
               "unknown": st.text(max_size=6).filter(lambda m: m not in ("standard", "sd", "naive-cos", "cos", "sv"))},
    "combine": {"nonsense": st.sampled_from(["xx", "we:nan,nan", "we:inf,0", "cd:-1", "cd:nan", "we:0.5",
                                             "we:-1,2", "target:3"]),
                "type": st.one_of(st.none(), st.integers(), st.lists(st.floats(0, 1), min_size=2, max_size=2))},
    "gamma": {"type": st.one_of(st.text(min_size=1, max_size=3).filter(lambda t: not t.replace(",", "").isdigit()),
                                st.lists(st.one_of(st.text(max_size=2), st.none(), BOOL, FRACTION), min_size=1,
                                         max_size=2), BOOL),
              "range": st.one_of(st.lists(st.integers(-10**6, 0), min_size=1, max_size=2),
                                 st.lists(st.integers(10**6, 10**30), min_size=1, max_size=2), st.just([1, 1, 1]))},
    "temperature": {"type": st.one_of(NON_NUMBER, BOOL), "nonfinite": NON_FINITE, "negative": NEGATIVE},
    "top_k": {"type": st.one_of(NON_NUMBER, BOOL, FRACTION), "negative": st.integers(-10**30, -1)},
    "top_p": {"type": st.one_of(NON_NUMBER, BOOL), "nonfinite": NON_FINITE,
              "range": st.one_of(NEGATIVE, st.just(0), st.floats(1.0001, 1e300))},
    "seed": {"type": st.one_of(NON_NUMBER, BOOL, FRACTION), "range": st.one_of(st.integers(-10**30, -1),
                                                                                st.integers(2**32, 10**30))},
    "max_new_tokens": {"type": st.one_of(NON_NUMBER, BOOL, FRACTION), "range": st.integers(-10**30, 0)},
    "batch_size": {"type": st.one_of(NON_NUMBER, BOOL, FRACTION), "range": st.integers(-10**30, 0)},
    "extra": {"type": st.one_of(st.none(), st.text(max_size=3), st.integers(), st.lists(st.integers(), max_size=2))},
    "dtype": {"type": st.one_of(st.none(), st.integers(), st.lists(st.just("auto"), max_size=1)),
              "unknown": st.text(max_size=8).filter(lambda d: d not in ("auto", "float32", "bfloat16", "float16"))},
    "proposer": {"type": st.one_of(st.integers(), st.lists(st.just("model"), max_size=1)),  # null = the default
                 "unknown": st.sampled_from(["nope", "ngram", "ngram:2,1", "ngram:0,3", "ngram:a,b", "model:1"])},
    "policy": {"type": st.one_of(st.integers(), st.lists(st.just("fixed"), max_size=1)),  # null = the default
               "unknown": st.sampled_from(["nope", "confidence:7", "confidence:nan", "confidence:", "fixed:2"])},
}
CASES = [(f, c) for f, classes in CLASSES.items() for c in classes]
NEEDLES = {"max_new_tokens": ("max-new-tokens",), "top_k": ("top-k",), "top_p": ("top-p",),
           "batch_size": ("batch size",), "models": ("model",),
           "combine": ("combination", "weights", "mu", "cd ", "we ", "target")}


def _needles(field: str) -> tuple[str, ...]:
    return NEEDLES.get(field, (field,))


def test_every_field_is_fuzzed():
    from dataclasses import fields

    assert {f.name for f in fields(DecodeConfig)} == set(CLASSES)


@pytest.mark.parametrize("field,cls", CASES, ids=[f"{f}|{c}" for f, c in CASES])
def test_bad_config_field_is_a_config_error(field, cls):
    @CHEAP
    @given(v=CLASSES[field][cls])
    def run(v):
        with pytest.raises(ConfigError) as e:
            DecodeConfig.from_dict({**VALID, field: v})
        msg = str(e.value)
        assert "\n" not in msg and any(n in msg.lower() for n in _needles(field)), msg

    run()


@pytest.mark.parametrize("field,cls", CASES, ids=[f"{f}|{c}" for f, c in CASES])
def test_bad_config_file_is_one_line_on_the_cli(field, cls, tmp_path):
    @CLI
    @given(v=CLASSES[field][cls])
    def run(v):
        p = tmp_path / "config.json"
        p.write_text(json.dumps({**VALID, field: v}))  # NaN / Infinity as Python writes them
        res = CliRunner().invoke(cli, ["generate", "--config", str(p), "--prompt", "w1"])
        assert_one_line_error(res, *_needles(field))
        assert json.loads(p.read_text()) == json.loads(json.dumps({**VALID, field: v}))  # never rewritten

    run()


@pytest.mark.parametrize("extra", [{"schema": "spectune.decode_config/9"}, {"schema": None}, {"temprature": 0.5}])
def test_unknown_schema_or_key_is_rejected(extra):
    with pytest.raises(ConfigError, match="schema|unknown config keys"):
        DecodeConfig.from_dict({**VALID, **extra})


@CHEAP
@given(t=st.floats(allow_nan=True, allow_infinity=True), p=st.floats(allow_nan=True, allow_infinity=True))
def test_sampling_numbers_accept_exactly_their_ranges(t, p):
    """temperature in [0, inf) and top-p in (0, 1], finite: accepted exactly there."""
    ok = math.isfinite(t) and t >= 0 and math.isfinite(p) and 0 < p <= 1
    try:
        DecodeConfig.from_dict({**VALID, "temperature": t, "top_p": p})
        assert ok
    except ConfigError:
        assert not ok
