"""Bundled prompt sets and loading a user's prompt file."""
import json
from pathlib import Path

import pytest

from spectune.errors import ConfigError
from spectune.workloads import (
    BASE_WORKLOADS,
    DEFAULT_WORKLOAD,
    Workload,
    load_workload,
    read_prompt_file,
    workload_names,
)

DATA = Path(__file__).resolve().parents[2] / "spectune" / "workloads" / "data"


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_names_and_default():
    assert workload_names() == ["code", "math", "chat", "summarize", "edit", "mix"]
    assert DEFAULT_WORKLOAD == "mix"
    assert load_workload() == load_workload("mix")


@pytest.mark.parametrize("name", ["code", "math", "chat", "summarize", "edit"])
def test_bundled_set_sizes_and_splits(name):
    w = load_workload(name)
    assert w.name == name
    assert len(w.all) >= 24
    assert w.calibration and w.heldout
    assert len(w.calibration) > len(w.heldout)  # most prompts calibrate, a fixed third is held out
    assert len(set(w.all)) == len(w.all), "duplicate prompt"
    assert not set(w.calibration) & set(w.heldout)
    assert all(p.strip() for p in w.all)
    assert all(len(p) < 600 for p in w.all), "prompts should stay short for a 135M model"


@pytest.mark.parametrize("name", ["code", "math", "chat", "summarize", "edit"])
def test_bundled_files_state_every_split_explicitly(name):
    """The split is fixed in the data file itself, not derived at load time."""
    rows = [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(set(r) == {"prompt", "split"} for r in rows)
    w = load_workload(name)
    assert list(w.calibration) == [r["prompt"] for r in rows if r["split"] == "calibration"]
    assert list(w.heldout) == [r["prompt"] for r in rows if r["split"] == "heldout"]


def test_no_prompt_shared_between_sets():
    seen = {}
    for name in BASE_WORKLOADS:
        for p in load_workload(name).all:
            assert p not in seen, f"{name} repeats a prompt of {seen.get(p)}"
            seen[p] = name


def test_split_is_stable_across_loads():
    from spectune.workloads import catalog as registry

    first = load_workload("code")
    registry._bundled.cache_clear()
    again = load_workload("code")
    assert first == again and first is not again


def test_mix_interleaves_every_set_split_by_split():
    mix = load_workload("mix")
    parts = [load_workload(n) for n in BASE_WORKLOADS]
    assert mix.name == "mix"
    assert sorted(mix.calibration) == sorted(p for w in parts for p in w.calibration)
    assert sorted(mix.heldout) == sorted(p for w in parts for p in w.heldout)
    # Round-robin: the first calibration prompts come one from each set, in set order.
    n = len(parts)
    assert list(mix.calibration[:n]) == [w.calibration[0] for w in parts]
    assert list(mix.heldout[n:2 * n]) == [w.heldout[1] for w in parts]


def test_workload_is_immutable_and_all_orders_calibration_first():
    w = Workload(name="x", calibration=["a", "b"], heldout=["c"])
    assert w.calibration == ("a", "b") and w.all == ("a", "b", "c") and len(w) == 3
    assert w.split("heldout") == ("c",)
    with pytest.raises(AttributeError):
        w.name = "y"


def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError) as err:
        load_workload("poetry")
    msg = str(err.value)
    assert "poetry" in msg and "\n" not in msg
    for name in workload_names():
        assert name in msg


def test_user_jsonl_explicit_and_default_splits(tmp_path):
    path = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"prompt": "p1"},
            {"prompt": "p2", "id": 7},  # extra keys are ignored
            "",  # blank lines are skipped
            {"prompt": "p3"},
            {"prompt": "fixed-held", "split": "heldout"},
            {"prompt": "fixed-cal", "split": "calibration"},
            {"prompt": "p4"},
            {"prompt": "p5"},
            {"prompt": "p6"},
        ],
    )
    w = load_workload(str(path))
    assert w.name == str(path)
    # Of the prompts without a split, every third (p3, p6) is held out.
    assert w.calibration == ("p1", "p2", "fixed-cal", "p4", "p5")
    assert w.heldout == ("p3", "fixed-held", "p6")
    assert load_workload(path) == w  # a Path works too
    assert load_workload(str(path)) == w  # deterministic


def test_user_txt_one_prompt_per_line(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("first\n\nsecond\nthird\nfourth\n", encoding="utf-8")
    w = load_workload(str(path))
    assert w.calibration == ("first", "second", "fourth") and w.heldout == ("third",)


def test_bundled_name_wins_over_file_of_same_name(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "code", [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}])
    monkeypatch.chdir(tmp_path)
    bundled = load_workload("code")
    assert bundled.name == "code" and len(bundled) == 30
    assert load_workload("./code").all == ("a", "b", "c")


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ConfigError, match="not found") as err:
        load_workload(str(missing))
    assert str(missing) in str(err.value)


def test_directory_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="not a file"):
        load_workload(str(tmp_path))


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match="no prompts") as err:
        load_workload(str(path))
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "bad_line, fragment",
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', '"prompt"'),
        ('{"text": "no prompt key"}', '"prompt"'),
        ('{"prompt": 5}', "non-empty string"),
        ('{"prompt": "   "}', "non-empty string"),
        ('{"prompt": "x", "split": "train"}', '"split"'),
    ],
)
def test_bad_line_names_file_and_line(tmp_path, bad_line, fragment):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "ok1"}, "", bad_line, {"prompt": "ok2"}])
    with pytest.raises(ConfigError) as err:
        load_workload(str(path))
    msg = str(err.value)
    assert f"{path}:3:" in msg and fragment in msg and "\n" not in msg


def test_duplicate_prompt_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "a"}])
    with pytest.raises(ConfigError, match=r"dup\.jsonl:3: duplicate prompt \(first on line 1\)"):
        load_workload(str(path))


def test_file_with_an_empty_split_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "two.jsonl", [{"prompt": "a"}, {"prompt": "b"}])
    with pytest.raises(ConfigError, match="at least one calibration and one held-out"):
        load_workload(str(path))


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_prompt_file(path)


def test_edit_prompts_hold_what_their_answer_copies():
    """Every edit prompt carries the text to transform after a blank line, so prompt lookup has something to copy,
    and ``mix`` holds them with the four other sets."""
    w = load_workload("edit")
    assert all("\n\n" in p and len(p.split("\n\n", 1)[1]) >= 40 for p in w.all)
    assert set(w.all) <= set(load_workload("mix").all) and "edit" in BASE_WORKLOADS
