"""``spectune calibrate --engine vllm``: the serving engine's own latency, measured through it, into an engine
profile.

What is measured (each stage one engine start, driven over its HTTP API at concurrency b for every batch size with
the workload's calibration prompts, at least ``PROMPTS`` of them; the stages run ``passes`` times in turn, since
the host's speed drifts over minutes; with ``--engine-together N`` N stages' starts are alive at once and their
measurements interleave, one of each in turn, as ``open_together`` drives them; where a pass's stages take more than
one set of N, the target alone joins every set, ``stage_sets``):

* ``target``: the target alone. Its step time (the engine's inter-token interval: one per request per step) is
  L(b, 1) with the engine's whole per-step overhead in it.
* ``target-spec``: where a speculative start serves the target otherwise than its plain start
  (``Engine.serving_as_speculation``: llama.cpp's ``--kv-unified``), the target alone served so. Its step is then
  the L(b, 1) of speculative steps, the base below, and the plain start's, recorded as the engine's
  ``plain_step_s`` at each batch size, prices the target alone (``CostModel.standard_seconds``): on the Emerald
  Rapids guest llama.cpp b11434's lookups that never drafted ran 0.74-0.92x the target alone at b = 8, the flag's
  cost, which a base of the plain start prices at 1.0x.
* ``lookup-K``: prompt lookup proposing up to K tokens. The engine's counters give each stage's share of drafting
  row-steps p (drafts / intervals), the tokens a row fed beyond its one, f (draft tokens / intervals), and its step
  time, which per batch size is the target alone's plus J p + u f: J a drafting row's fixed cost, u a fed token's,
  fitted with J, u >= 0 together with the draft stages' F and v below (``_fit_steps``). The target's L(b, k) is
  L(b, 1) + J + u (k - 1) for k >= 2, the lookup itself costing nothing measurable. An engine that flattens a step's
  rows into one forward (``Engine.ragged``; the simulator prices its step at the mean of its rows' prices) runs the
  lookups on the workload's prompts, so the fit sees the steps it prices: llama.cpp b11434 on the Emerald Rapids
  guest ran a row drafting 2 tokens in every step of a self-repeating prompt at 53 ms (the target alone 26.5), and
  real lookups on held-out prompts at J 16.5 ms, u 2.9 ms. An engine that pads its rows to the longest (vLLM; priced
  at the longest feed) runs them on a prompt that repeats itself, where every row feeds K + 1 tokens a step, so the
  longest feed is what the counters show.
* ``draft-<model>-K``: the draft model proposing K tokens. Its step time less the target's verification at the
  stage's own p and f is what drafting costs a step: D(K) = F + v K, F, v >= 0, fitted over the K measured in one
  least squares with the lookups' J and u (the draft stages, drafting in nearly every row-step, pin J where the
  lookups, drafting in a fifth of them, leave it loose)
  (the engine's draft runs K forwards a step, the first feeding the accepted tokens, and pays a fixed cost besides:
  vLLM 0.32.0 on the Emerald Rapids guest measured D(1) = 11.8 ms and D(4) = 3.2 ms at b = 1, which one price a
  forward, 6.3 ms, put at 6.3 and 25 ms). The profile holds v as the draft's L(b, k) at every k >= 1 and F at
  k = 0, the draft's turn cost (``LatencyModel``), which the simulator charges once a step before the draft's
  first forward.

Each stage's step is the step **as the client sees it** (``steps="client"``, the default; ``client_steps``): b rows
times the tokens a row gains a step (1 + accepted / intervals, the engine's counters) over the client's decode
goodput, which is what a user of the engine gets. At b = 1 it matched the engine's own inter-token interval within
2 %; at b = 8 the client got less than the engine's steps promised, by stage: vLLM 0.32.0's target alone 0.80 of it
(0.69-0.93), its draft 0.74-0.87, its lookups 0.83-1.0, llama.cpp b11434's speculation 0.86-0.93 (its target alone
1.01), on the Emerald Rapids guest, so prices on the engine's steps came out high at b = 8 (vLLM run v2: +43 % the
target alone, +37 % the draft; priced so, +11 % and +5 %). Over five campaigns' rows the MAPE of engine-priced
advice went 16.5 -> 13.9 % (vLLM 31.4 -> 22.1 and 18.3 -> 13.8; llama.cpp 13.2 -> 12.4, 9.4 -> 8.6, but 10.3 ->
12.4 in run c1, whose grid ran speculation at b = 8 no slower than the engine's steps). ``steps="engine"`` prices
the engine's own interval; a measurement without a client goodput keeps it. A client's step holds the time its
batch waited for the rows that finished last, so the cost model prices batches on such a profile without
stragglers (``CostModel.waits_in_steps``): priced again, the b = 8 draft stages came out 6-20 % slower than they
ran (docs/benchmarks.md, "The error budget").

Each stage's step time is the fastest of its measurements (``repeats`` x ``passes`` at each batch size), not their
median: the host's interference only slows a step, and on the Emerald Rapids guest it was bimodal (vLLM 0.32.0,
b = 1, every stage: 40-47 ms a step in one state, 58-72 ms in the other, either state lasting whole starts), so
medians mixed the states stage by stage and put the target alone above drafting at every K, which priced the draft
free. The fastest measurement is the quiet host's step in every stage alike. ``stat="quartile"`` prices the lower
quartile instead (the expected fastest of three runs) and ``"fastest-start"`` the median of the fastest start: over
six campaigns' rows (llama.cpp c1, x, z; vLLM v3, v2, w) the quartile moved the MAPE 14.2 -> 13.8 % mean, better in
four, worse in two, most of the gain one campaign's; the fastest start did worse (vLLM v3 16.0 -> 18.6 %, llama.cpp
c1 12.4 -> 14.6). ``"paired"`` (``paired_steps``) is for stages measured in turn (``--engine-together``): the
target alone's fastest, the level, times the median over rounds of the stage's step over the target alone's in the
same round, so one round's stages stay together where the fastest takes each stage's fastest round on its own.

Acceptance is a property of the models, not of the engine: the profile's traces, paths and bins are those of a
runtime profile of the same models (``acceptance``: given, else the best found; this machine's first, then any in
the same dtype), and ``export --check`` / ``bench --engine`` set the engine's per-position counters beside them.

The profile records the engine (name, version, parallel configuration, arguments) beside the machine's identity;
the one matching rule (``spectune.machine.profile_mismatch``) never lets it price spectune's runtime, nor a
runtime profile an engine. Rows are checkpointed in ``OUT.partial/engine-rows.csv`` as measured; ``resume``
continues from them, and a fault keeps them. A resume may change ``passes`` (``RESUMABLE``): more measures the passes
not yet measured; fewer starts no further pass (stopping a run after its first pass keeps a one-pass calibration),
the rows measured staying in and the profile recording the passes they span.
"""
from __future__ import annotations

import copy
import itertools
import json
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from spectune import checks
from spectune.calibration.checkpoint import Checkpoint, check_out, read_rows, write_csv_atomic
from spectune.calibration.hardware import fingerprint
from spectune.calibration.run import _now, default_out_dir
from spectune.config import write_json_atomic
from spectune.decoder import encode_workload
from spectune.engines import EngineSettings, carried_sets, engine_class, open_together, set_of
from spectune.errors import ConfigError, EngineError, ProfileError
from spectune.machine import profile_dtypes
from spectune.masking import mask_args
from spectune.models import load_tokenizer
from spectune.models.bundled import files_digest
from spectune.models.loading import declared_dtype
from spectune.profile import Profile, profile_names, same_model
from spectune.profile.tables import LATENCY_COLUMNS, TABLES, cost_table

ROW_COLUMNS = ["stage", "draft", "spec_k", "batch", "repeat", "ctx", "step_s", "tokens_per_row_step", "intervals",
               "drafts", "draft_tokens", "accepted", "decode_goodput", "set"]
ROWS_FILE = "engine-rows.csv"
ENGINE_FILE = "engine.json"  # the engine's identity as the first start of the run read it
STAGE = "engine-latency"  # the one stage of an engine calibration: its seconds in the checkpoint and the profile
# repeated: the target continues the count, so a lookup of K proposes K tokens it accepts nearly every step (a word
# list's continuation drifts off it: vLLM verified 2.7-4.8 tokens a step at K = 2-8 with one); its period (about 20
# tokens) is longer than any K, as llama.cpp's ngram-simple needs (it copies from the last period only)
LOOKUP_TEXT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, "
SERVING = "target-spec"  # the stage of the target alone served as a speculative start serves it
STEPS = ("client", "engine")  # whose step prices a stage (EngineGrid.steps)
STATS = ("fastest", "quartile", "fastest-start", "paired")  # how a stage's measurements make its step (stage_step)
PRICING = ("steps", "stat")  # EngineGrid's fields that price the rows, not measure them: a resume may change them
# the grid's fields a resume may change: the passes (more measures those not measured yet, fewer starts no further
# pass, the rows measured staying in)
RESUMABLE = ("passes",)
PROMPTS = 8  # calibration prompts a measurement drives at the least (at b = 1 one prompt was one draw of acceptance)


@dataclass(frozen=True)
class EngineGrid:
    """What ``calibrate --engine`` measures (see the module docstring)."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    lookup_ks: tuple[int, ...] = (2, 4, 8)
    draft_ks: tuple[int, ...] = (1, 4, 8)
    max_new_tokens: int = 48
    repeats: int = 2
    workload: str = "mix"
    passes: int = 2  # every stage started this many times, in turn: the host's drift over minutes averages out
    steps: str = "client"  # whose step prices the stage: "client" (client_steps) or "engine" (its own interval)
    stat: str = "fastest"  # how its measurements make a stage's step (stage_step)

    def checked(self) -> "EngineGrid":
        c = checks
        return EngineGrid(c.integers(self.batch_sizes, "batch sizes", hi=c.MAX_BATCH),
                          c.integers(self.lookup_ks, "lookup K"), c.integers(self.draft_ks, "draft K"),
                          c.integer(self.max_new_tokens, "max new tokens", lo=8, hi=c.MAX_COUNT),
                          c.integer(self.repeats, "repeats", lo=1, hi=c.MAX_REPEATS), self.workload,
                          c.integer(self.passes, "passes", lo=1, hi=c.MAX_REPEATS),
                          c.choice(self.steps, STEPS, "engine steps"),
                          c.choice(self.stat, STATS, "engine step statistic"))


@dataclass(frozen=True)
class Stage:
    name: str
    draft: str | None  # the draft model of a draft stage
    k: int  # speculative tokens (0: the target alone)
    lookup: bool = False
    serving: bool = False  # the target alone as a speculative start serves it (``target-spec``)

    def speculative(self, engine: EngineSettings, draft_path: str | None) -> Any:
        """The stage's settings in the engine's own form (its module's ``speculation``)."""
        cls = engine_class(engine.name)
        if self.serving:
            return cls.serving_as_speculation(engine.args)
        return cls.speculation(self.k, draft_path if self.draft else None, self.lookup)


def stages(models: Sequence[str], grid: EngineGrid, serving: bool = False) -> list[Stage]:
    """The stages measured, in order (``serving``: the engine's speculative starts serve the target otherwise)."""
    out = [Stage("target", None, 0)] + ([Stage(SERVING, None, 0, serving=True)] if serving else [])
    out += [Stage(f"lookup-k{k}", None, k, True) for k in grid.lookup_ks]
    names = [Path(d).name or d for d in models[:-1]]  # a draft's stages by its name, by its path where two share it
    names = [n if names.count(n) == 1 else d for n, d in zip(names, models[:-1])]
    return out + [Stage(f"{n}-k{k}", d, k) for n, d in zip(names, models[:-1]) for k in grid.draft_ks]


def calibrate_engine(models: Sequence[str], engine: EngineSettings, grid: EngineGrid = EngineGrid(), *,
                     acceptance: Any = None, out: str | None = None, force: bool = False, resume: bool = False,
                     say: Callable[[str], None] = lambda s: None) -> Any:
    """Measure ``engine`` serving ``models`` (drafts first, the target last) and write an engine profile (see
    the module docstring); the ``Profile``."""
    t0 = time.time()
    models, grid = [str(m) for m in models], grid.checked()
    if len(models) < 2:
        raise ConfigError("calibrate --engine needs a draft and a target (--models DRAFT,TARGET)")
    acc = acceptance_profile(models, acceptance)
    hw = fingerprint("cpu")
    out_dir = Path(out).expanduser() if out else _default_out(models, hw, engine.name)
    check_out(out_dir, force, resume)
    part = out_dir.with_name(out_dir.name + ".partial")
    ck, rows = _open_rows(part, _fresh(models, engine, grid, hw), resume)
    before = ck.state["stages"].get(STAGE, {}).get("seconds", 0.0)  # the interrupted runs' measuring
    meta = _measure(models, engine, grid, rows, ck, say)
    grid = replace(grid, passes=max(grid.passes, 1 + max((int(r["repeat"]) for r in rows), default=0) // grid.repeats))
    measured = pd.DataFrame(rows, columns=ROW_COLUMNS)
    lat = fit_latency(measured, models, grid)
    prof = engine_profile(acc, models, lat, meta, hw, grid, before + time.time() - t0)
    prof.meta["wall_seconds_this_run"] = round(time.time() - t0, 1)
    prof.meta["engine"]["measured"] = rows
    prof.meta["engine"]["plain_step_s"] = plain_steps(measured, grid)
    prof.meta["engine"]["ratio_sd"] = ratio_spread(measured, grid)
    prof.save(out_dir, force=force)

    shutil.rmtree(part, ignore_errors=True)
    return prof


def _default_out(models: Sequence[str], hw: dict[str, Any], engine: str) -> Path:
    """``default_out_dir`` in the target's own dtype (what the engine runs with ``--dtype auto``), ``-<engine>``
    appended."""
    d = default_out_dir(models, hw, declared_dtype(models[-1]) or "float32")
    return d.with_name(f"{d.name}-{engine}")


def acceptance_profile(models: Sequence[str], given: Any) -> Any:
    """The runtime profile whose traces the engine profile carries: ``given`` (a Profile or a directory), else
    the best runtime profile holding the models (this machine's first, then another machine's: acceptance is
    the models')."""
    from spectune.profile import ProfileHardwareWarning, find_profiles, load_profile, read_meta

    if given is not None:
        return given if hasattr(given, "meta") else load_profile(given, check_hardware=False)
    dtypes = [declared_dtype(m) or "float32" for m in models]  # what the engine runs with --dtype auto
    for want in (dtypes, None):  # the models' own dtype first: acceptance moves with the weights' rounding
        found = find_profiles(models, combine="target", temperature=0.0, partial=True, other_machines=True,
                              dtypes=want)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProfileHardwareWarning)
            for d in found.paths:
                if want is None or _dtypes_of(read_meta(d) or {}, models) == set(want):
                    return load_profile(d, check_hardware=False)
    raise ProfileError(f"no runtime profile holds {','.join(models)}: the engine profile takes acceptance from "
                       f"one (spectune calibrate --models {','.join(models)}, or --acceptance PROFILE)")


def _dtypes_of(meta: dict[str, Any], models: Sequence[str]) -> set[str]:
    """The dtypes ``models`` ran in, in a profile's metadata."""
    return profile_dtypes({"models": [m for m in meta.get("models", [])
                                      if any(same_model(m.get("name"), x) for x in models)]})


def _open_rows(part: Path, fresh: dict[str, Any], resume: bool) -> tuple[Checkpoint, list[dict[str, Any]]]:
    """The checkpoint, and the measured rows of an interrupted run (``resume``: same settings and served weights),
    else none (a fresh checkpoint, ``calibration.checkpoint``); a garbled checkpoint file is a one-line
    ``ConfigError`` naming it."""
    ck = Checkpoint(part)
    ck.open(fresh, resume, free={"grid": RESUMABLE})
    f = part / ROWS_FILE
    if not (resume and f.is_file()):
        return ck, []
    return ck, read_rows(f, ROW_COLUMNS[:-1], keep_default_na=False).to_dict("records")  # an older run's: no ``set``


def _fresh(models: list[str], engine: EngineSettings, grid: EngineGrid, hw: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's state: the settings, each model with a digest of the files the engine serves for it (a
    model it fetches by name: the name), the machine."""
    def served(m: str) -> str:
        f = Path(engine_class(engine.name).model_file(m, engine.executable))
        return files_digest(f) if f.exists() else f"served by name: {m}"

    measured = {k: v for k, v in asdict(grid).items() if k not in PRICING}
    return dict(settings={"engine": engine.name, "grid": measured},
                models=[{"name": m, "hash": served(m)} for m in models], hardware=hw, created=_now(), stages={})


def _measure(models: list[str], engine: EngineSettings, grid: EngineGrid, rows: list[dict[str, Any]],
             ck: Checkpoint, say: Callable[[str], None]) -> dict[str, Any]:
    """Every stage not yet in ``rows`` (appended in place and checkpointed in ``ck``, with the seconds each set
    took, a set a fault ended too), in the sets of ``stage_sets`` (each pass's stages, ``engine.together`` starts
    alive at once and driven in turn); the engine's identity."""
    part = ck.part
    cls = engine_class(engine.name)
    serving = cls.serving_as_speculation(engine.args) is not None
    done = {_done(x["stage"], int(x["batch"]), int(x["repeat"]), set_of(x)) for x in rows}
    plan = []  # per set: (stage, pass, set, its measurements not yet in rows)
    sets = stage_sets(stages(models, grid, serving), engine.together)  # every pass's
    for p, (s, members) in itertools.product(range(grid.passes), enumerate(sets)):
        todo = [(st, p, s, [(b, r) for r in range(p * grid.repeats, (p + 1) * grid.repeats)
                            for b in grid.batch_sizes if _done(st.name, b, r, s) not in done]) for st in members]
        if any(t[3] for t in todo):
            plan.append([t for t in todo if t[3]])
    meta: dict[str, Any] = {}
    target = cls.model_file(models[-1], engine.executable)
    prompts = _prompts(models[-1], grid) if plan else None
    for chunk in plan:
        with ck.timing(STAGE):
            meta = _measure_together(engine, grid, target, prompts, chunk, rows, part, say)
    return meta or json.loads((part / ENGINE_FILE).read_text())


def stage_sets(all_stages: Sequence[Stage], together: int) -> list[list[Stage]]:
    """A pass's stages in sets of ``together`` starts alive at once. Where they take more than one set the target
    alone joins every set (``together`` >= 2), so each stage's ratio to it is measured in turn (``paired_steps``);
    its rows in a later set are that set's level only (``_carried``)."""
    return carried_sets(all_stages, together, lambda st: st.name == "target")


def _done(stage: str, b: int, r: int, s: int) -> tuple:
    """A measurement's key for resuming: the target's set is part of it (a later set's is that set's level), any
    other stage's is not (a resume with another ``--engine-together`` does not measure it again)."""
    return stage, b, r, s if stage == "target" else 0


def _measure_together(engine: EngineSettings, grid: EngineGrid, target: str, inputs: Any,
                      chunk: list[tuple[Stage, int, int, list]], rows: list[dict[str, Any]], part: Path,
                      say: Callable[[str], None]) -> dict[str, Any]:
    """The measurements of ``chunk`` ((stage, pass, set, todo) each), one start a stage serving ``target``, all alive at
    once: the i-th measurement of every start in turn, from another start each time (``open_together``); ``inputs``:
    ``_prompts``."""
    cls = engine_class(engine.name)
    prompts, lookup = inputs
    for st, p, s, todo in chunk:
        carried = f", set {s + 1} (its target alone the level)" if s and engine.together > 1 else ""
        say(f"{engine.name}: stage {st.name}, pass {p + 1}/{grid.passes}{carried} ({len(todo)} measurements)")
    specs = [(st.speculative(engine, cls.model_file(st.draft, engine.executable) if st.draft else None),
              max(grid.batch_sizes)) for st, _, _, _ in chunk]
    with open_together(engine, target, specs, say) as starts:
        eng = starts.engines[0]
        meta = {"name": engine.name, "version": eng.version(), "parallel": eng.parallel(),
                "args": mask_args(engine.args), "lookup_match": eng.lookup_match, "ragged": eng.ragged()}
        write_json_atomic(part / ENGINE_FILE, meta)  # a resumed run that measures nothing more still knows it
        for e in starts.engines:
            e.drive([prompts[0]], 1, 4)  # warm-up, not recorded
        for j in range(max(len(todo) for _, _, _, todo in chunk)):
            for i, e in starts.in_turn(j):
                st, _, s, todo = chunk[i]
                if j >= len(todo):
                    continue
                b, r = todo[j]
                ps = [lookup] * b if st.lookup and not meta["ragged"] else prompts
                try:
                    d = e.drive(ps, b, grid.max_new_tokens)
                except EngineError as err:
                    raise EngineError(f"{err} (the {len(rows)} rows measured before are kept in {part / ROWS_FILE}; "
                                      "--resume continues)", rows) from None
                rows.append(dict(zip(ROW_COLUMNS, _row(st, b, r, ps, d, grid) + [s])))
                write_csv_atomic(pd.DataFrame(rows, columns=ROW_COLUMNS), part / ROWS_FILE)
    return meta


def _row(st: Stage, b: int, r: int, ps: list[list[int]], d: Any, grid: EngineGrid) -> list[Any]:
    c = d.counters
    ctx = float(np.mean([len(p) for p in ps])) + grid.max_new_tokens / 2
    return [st.name, st.draft or "", st.k, b, r, ctx, c.step_s, c.tokens_per_row_step, c.intervals, c.drafts,
            c.draft_tokens, c.accepted, d.decode_goodput]


def _prompts(target: str, grid: EngineGrid) -> tuple[list[list[int]], list[int]]:
    """(the workload's calibration prompts as the runtime feeds them, the self-repeating lookup prompt)."""
    tok = load_tokenizer(target)
    prompts = encode_workload(tok, grid.workload, "calibration", max(PROMPTS, *grid.batch_sizes))
    return prompts, list(tok(LOOKUP_TEXT * 5, add_special_tokens=False)["input_ids"])


def fit_latency(rows: pd.DataFrame, models: Sequence[str], grid: EngineGrid) -> pd.DataFrame:
    """The latency table (``LATENCY_COLUMNS``) from the measured rows (see the module docstring)."""
    k_max = max(max(grid.lookup_ks), max(grid.draft_ks)) + 1
    ctx = float(round(rows["ctx"].median()))
    rows = priced_steps(rows, grid)
    rows = rows.assign(p=rows["drafts"] / rows["intervals"], f=rows["tokens_per_row_step"] - 1.0)
    out = []
    for b in grid.batch_sizes:
        at = rows[rows["batch"] == b]
        ver = _per_stage(at[at["draft"].fillna("") == ""], "stage", grid)
        drafts = {d: _per_stage(at[at["draft"] == d], "spec_k", grid) for d in models[:-1]}
        L1, jump, per, lines = _fit_steps(ver, drafts, b)
        L = lambda k: L1 + (jump + per * (k - 1) if k > 1 else 0.0)  # noqa: E731
        base = "as a speculative start serves it" if SERVING in ver.index else ""
        note = (f"engine: the target alone's step{base and ' ' + base} + {jump * 1e3:.2f} ms a drafting row + "
                f"{per * 1e3:.2f} ms a token it feeds, over {len(ver) - 1 - bool(base)} lookup stages and the "
                f"draft stages")
        out += [[models[-1], b, ctx, k, L(k), L(k), 0.0, L(k), L(k), len(at), True, note] for k in range(1, k_max + 1)]
        for d, dr in drafts.items():
            turn, fwd = lines[d]
            note = (f"engine: draft steps less the target's verification, over K = {list(dr.index)}: "
                    f"{turn * 1e3:.2f} ms a step + {fwd * 1e3:.2f} ms a token")
            out += [[d, b, ctx, k, fwd, fwd, 0.0, fwd, fwd, len(dr), bool(len(dr)), note] for k in range(1, k_max + 1)]
            if turn > 0:
                out.append([d, b, ctx, 0, turn, turn, 0.0, turn, turn, len(dr), True, note])
    return pd.DataFrame(out, columns=LATENCY_COLUMNS)


def _per_stage(rows: pd.DataFrame, by: str, grid: EngineGrid) -> pd.DataFrame:
    """Per ``by``: the medians of p and f (the counters' shares) and the priced step (``stage_step``)."""
    if rows.empty:
        return pd.DataFrame({"p": [], "f": [], "step_s": []})
    g = rows.groupby(by)
    return pd.DataFrame({"p": g["p"].median(), "f": g["f"].median(), "step_s": _steps_of(g, grid)})


def _steps_of(groups: Any, grid: EngineGrid) -> pd.Series:
    """Per group of measurements (a ``DataFrameGroupBy``): its priced step (``stage_step``)."""
    return groups[["step_s", "repeat"]].apply(lambda m: stage_step(m, grid))


def stage_step(m: pd.DataFrame, grid: EngineGrid) -> float:
    """One stage's priced step from its measurements at one batch size (``step_s``, ``repeat``), as ``grid.stat``
    says (the module docstring): ``fastest``, the fastest; ``quartile``, the lower quartile (Weibull's plotting
    position: the expected fastest of three runs); ``fastest-start``, the median of the start whose median is the
    fastest (a pass starts each stage once, for ``grid.repeats`` measurements); ``paired``, the median of the
    steps ``paired_steps`` made (each the target alone's fastest times the stage's ratio to it in one round)."""
    if grid.stat == "paired":
        return float(m["step_s"].median())
    if grid.stat == "quartile":
        return float(np.quantile(m["step_s"].to_numpy(float), 0.25, method="weibull"))
    if grid.stat == "fastest-start":
        return float(m.groupby(m["repeat"] // grid.repeats)["step_s"].median().min())
    return float(m["step_s"].min())


def client_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each step as the client saw it: b rows x (1 + accepted / intervals) tokens a step over its
    decode goodput (the module docstring); the engine's own step where that is not a positive finite number."""
    seen = rows["batch"] * (1.0 + rows["accepted"] / rows["intervals"]) / rows["decode_goodput"]
    return rows.assign(step_s=seen.where(np.isfinite(seen) & (seen > 0), rows["step_s"]))


def paired_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each step put as the target alone's fastest at its batch size times the step's ratio to the
    target alone's in the same round (batch size and repeat: with ``--engine-together`` the i-th measurements of
    the starts alive at once ran in turn; in a later set of starts, that set's target alone). The level is then the
    quiet host's and the ratios each one round's, so a swing of the host between rounds moves neither; a step
    without the target's in its round keeps its own."""
    own = rows[(rows["stage"] == "target") & ~_carried(rows)]
    level = rows["batch"].map(own.groupby("batch")["step_s"].min())
    paired = rows["step_s"].to_numpy(float) / _alone_in_round(rows) * level.to_numpy(float)
    return rows.assign(step_s=np.where(np.isfinite(paired), paired, rows["step_s"].to_numpy(float)))


def _sets(rows: pd.DataFrame) -> pd.Series:
    """Each row's set of starts (``stage_sets``; 0 where the rows predate sets)."""
    if "set" not in rows:
        return pd.Series(0, index=rows.index)
    return pd.to_numeric(rows["set"], errors="coerce").fillna(0).astype(int)


def _carried(rows: pd.DataFrame) -> pd.Series:
    """The target alone's rows in a later set of starts: that set's level, not measurements of the target."""
    return (rows["stage"] == "target") & (_sets(rows) > 0)


def _alone_in_round(rows: pd.DataFrame) -> np.ndarray:
    """Per row, the target alone's step in the same round (batch size and repeat) and set of starts, else in its
    own set (one start at a time: the target's set is the first); nan where it has none."""
    keys = rows[["batch", "repeat"]].assign(set=_sets(rows))
    alone = rows[rows["stage"] == "target"].assign(set=keys["set"]).set_index(["batch", "repeat", "set"])["step_s"]
    alone = alone[~alone.index.duplicated()]
    same = alone.reindex(pd.MultiIndex.from_frame(keys)).to_numpy(float)
    first = alone.reindex(pd.MultiIndex.from_frame(keys.assign(set=0))).to_numpy(float)
    return np.where(np.isfinite(same), same, first)


def priced_steps(rows: pd.DataFrame, grid: EngineGrid) -> pd.DataFrame:
    """``rows`` with the steps ``grid.steps`` prices: the client's (``client_steps``) or the engine's own; with
    ``grid.stat == "paired"``, put as ``paired_steps`` says; a later set's target alone (``_carried``) left out."""
    rows = _steps(rows, grid)
    return rows[~_carried(rows)]


def _steps(rows: pd.DataFrame, grid: EngineGrid) -> pd.DataFrame:
    rows = client_steps(rows) if grid.steps == "client" else rows
    return paired_steps(rows) if grid.stat == "paired" else rows


def plain_steps(rows: pd.DataFrame, grid: EngineGrid) -> dict[str, float]:
    """{batch size: the target alone's plain start's step} (priced as ``grid.steps`` and ``grid.stat`` say), where
    a ``target-spec`` stage priced speculative steps on another base (else {}: the latency table's L(b, 1) is the
    plain start's)."""
    if not (rows["stage"] == SERVING).any():
        return {}
    alone = priced_steps(rows[rows["stage"] == "target"], grid)
    return {str(int(b)): float(s) for b, s in _steps_of(alone.groupby("batch"), grid).items()}


def ratio_spread(rows: pd.DataFrame, grid: EngineGrid) -> dict[str, float]:
    """{batch size: the median over stages of the sd over rounds of log(the stage's step / the target alone's in the
    same round)} (steps as ``grid.steps`` says; a stage with fewer than 2 rounds paired with the target alone left
    out). How well the run pins a stage's price relative to the target alone: the median of n rounds is known to
    about 1.25 sd / sqrt(n). vLLM 0.32.0 on the Emerald Rapids guest, 7 stages in turn: 0.15-0.18 in one run, 0.24
    in the next (docs/benchmarks.md, "vLLM calibrated in turn again"). The steps are ``priced_steps``' (a later set's
    stages beside its own target alone): a paired statistic scales a round's steps alike, which leaves their ratios
    as they were."""
    rows = _steps(rows, grid)
    lr = np.log(rows["step_s"].to_numpy(float) / _alone_in_round(rows))
    logs = rows.assign(lr=lr)[rows["stage"] != "target"].dropna(subset=["lr"])
    sd = logs.groupby(["batch", "stage"])["lr"].agg(lambda x: x.std(ddof=1) if len(x) > 1 else np.nan).dropna()
    return {str(int(b)): float(v.median()) for b, v in sd.groupby(level="batch")}


def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The least squares of y = X x with x >= 0: the best feasible free fit over every subset of X's columns (the
    others held at 0; X has a few columns)."""
    best, x_best = float("inf"), np.zeros(X.shape[1])
    for r in range(1, X.shape[1] + 1):
        for cols in itertools.combinations(range(X.shape[1]), r):
            sol = np.linalg.lstsq(X[:, cols], y, rcond=None)[0]
            if (sol < 0).any():
                continue
            x = np.zeros(X.shape[1])
            x[list(cols)] = sol
            sse = float(((y - X @ x) ** 2).sum())
            if sse < best - 1e-18:
                best, x_best = sse, x
    return x_best


def _fit_steps(ver: pd.DataFrame, drafts: dict[str, pd.DataFrame], b: int
               ) -> tuple[float, float, float, dict[str, tuple[float, float]]]:
    """(L(b, 1), J, u, {draft: (F, v)}), all >= 0: the target's verification L(b, k) = L(b, 1) + J + u (k - 1) for
    k >= 2 and each draft's cost a step D(K) = F + v K (v floored at 10 us: a forward is never free; a draft not
    measured at b: (0, nan)).

    L(b, 1) is the target alone's step (the stage measured cleanest, one token a row) as speculative starts serve
    it (``target-spec`` where measured, else ``target``). Every other stage's step is L(b, 1) + J p + u f, p the
    rows' share of drafting steps and f the tokens they fed beyond one (the engine's counters), plus F + v K in a
    draft stage: one least squares over the lookup and draft stages together, in relative terms (each residual
    over its step). Lookups alone pinned J poorly (they draft in a fifth of the row-steps, so a 3 ms wobble in one
    moved J by 15 ms): llama.cpp b11434 on the Emerald Rapids guest fitted J = 37.9 ms at b = 8 from them, which
    put a step where every row drafts one token at 124 ms where the draft stage at K = 1, its draft included, took
    95.5 (the draft's cost then clamped at 0; run y, docs/benchmarks.md); fitted together, every stage is within
    10 % of its fastest step. A draft measured at one K (``--max-k 1``) is priced per token (F = 0): at one K, F and
    v are one number, and the fit took the first it tried, F, which priced the draft's forward at the floor and
    every other K at the measured one's cost."""
    if "target" not in ver.index:
        raise ProfileError(f"no step time of the target alone at batch size {b}: it anchors the engine's L(b, k)")
    L1 = float(ver.loc[SERVING if SERVING in ver.index else "target", "step_s"])
    look = ver.drop(index=["target", SERVING], errors="ignore")
    if not (look["f"] > 0).any():
        raise ProfileError(f"no lookup stage drafted at batch size {b}: the verification of more than one token is "
                           "unmeasured (calibrate on a workload whose prompts repeat themselves, such as code)")
    names = [d for d, dr in drafts.items() if len(dr)]
    x = _joint_fit([look] + [drafts[d] for d in names], L1)
    lines = {d: (0.0, float("nan")) for d in drafts}
    lines.update({d: (float(x[2 + 2 * i]), max(float(x[3 + 2 * i]), 1e-5)) for i, d in enumerate(names)})
    return L1, float(x[0]), float(x[1]), lines


def _joint_fit(stages: list[pd.DataFrame], L1: float) -> np.ndarray:
    """[J, u, F_1, v_1, F_2, v_2, ...] >= 0: each stage's step - L1 = J p + u f (+ F_i + v_i K in draft stage i,
    the stages after the first), fitted over every stage in relative terms (``_fit_steps``)."""
    X = np.zeros((sum(len(st) for st in stages), 2 * len(stages)))
    y, at = np.zeros(len(X)), 0
    for i, st in enumerate(stages):
        n = len(st)
        X[at:at + n, 0], X[at:at + n, 1] = st["p"].to_numpy(float), st["f"].to_numpy(float)
        if i:  # a draft stage: its own F and v (F = 0 where it ran at one K: there F and v are one number)
            X[at:at + n, 2 * i], X[at:at + n, 2 * i + 1] = float(n > 1), st.index.to_numpy(float)
        y[at:at + n] = st["step_s"].to_numpy(float) - L1
        at += n
    w = 1.0 / (L1 + y)  # relative residuals: a 200 ms draft step does not outweigh a 20 ms lookup
    return _nnls(X * w[:, None], y * w)


def engine_profile(acc: Any, models: Sequence[str], lat: pd.DataFrame, engine: dict[str, Any], hw: dict[str, Any],
                   grid: EngineGrid, seconds: float) -> Any:
    """The engine profile: ``lat`` (and its cost table) with the acceptance tables of ``acc`` restricted to
    ``models``, the engine and this machine recorded."""
    names = list(profile_names(acc, models))
    lat = lat.replace({"model": dict(zip(models, names))})
    tables = {name: _restrict(acc.table(name), names) for name in TABLES if name in acc.tables}
    tables["latency"], tables["cost"] = lat, cost_table(lat)
    meta = copy.deepcopy(acc.meta)
    meta.pop("tables", None)
    meta["models"] = [next(m for m in acc.meta["models"] if m["name"] == n) for n in names]
    meta["hardware"], meta["created"] = hw, _now()
    meta["engine"] = dict(engine, grid=asdict(grid))
    meta["settings"] = {**acc.meta.get("settings", {}), "runtime": engine["name"], "latency_forward": "engine",
                        "latency": {"batch_sizes": list(grid.batch_sizes), "contexts": sorted(set(lat["ctx"]))},
                        "acceptance_from": str(getattr(acc, "path", "") or "in memory")}
    meta["stages"] = {STAGE: {"seconds": round(seconds, 1), "done": True}}
    meta["total_seconds"] = round(seconds, 1)
    return Profile(meta=meta, tables=tables)


def _restrict(df: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The rows of an acceptance table over ``names`` only (a trace of a larger model set is dropped)."""
    keep = set(names)
    if df.empty:
        return df
    if "models" in df:
        df = df[df["models"].astype(str).map(lambda s: set(s.split(",")) <= keep)]
    for col in ("model", "draft", "companion", "target"):
        if col in df:
            df = df[df[col].astype(str).isin(keep)]
    return df.reset_index(drop=True)
