"""``bench(spec)``: measure every run of a grid on the runtime decoder (and the HF baselines), repeats
interleaved, results written after every run so an interrupted bench resumes (``resume=True``).

Steps: 1. load the models once and encode the workload's held-out prompts (a batch size B uses the first
max(B, prompts) of them, cycled); 2. warm up; 3. for each repeat, each temperature and batch size, run every
grid entry in an order rotated by the repeat (machine noise spreads over all entries instead of biasing one);
4. summarise (``analysis.py``): medians, spread, speedups measured side by side, decoder efficiency.
Bench runs ignore EOS, so every run decodes the same number of tokens.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from spectune import checks
from spectune.bench.analysis import summarize
from spectune.bench.grid import BenchSpec, Run
from spectune.config import write_text_atomic
from spectune.decoding.proposers import proposer_kind
from spectune.errors import ConfigError
from spectune.models.loading import dtype_line
from spectune.outputs import claim, target_dir
from spectune.profile import pick_runtime
from spectune.workloads import load_workload

NAN = float("nan")
ROW_COLUMNS = ["key", "label", "kind", "method", "models", "combine", "gamma", "batch_size", "temperature", "repeat",
               "is_standard", "is_target", "tokens", "seconds", "goodput", "decode_seconds", "decode_goodput",
               "mean_accepted_length", "calls_per_token", "alpha", "alpha_p", "calls_by_k", "draft_lengths",
               "dtype", "runtime", "proposer", "policy"]
# columns a rows.csv of an older spectune lacks: their value then
OPTIONAL_COLUMNS = {"runtime": "eager", "proposer": "model", "policy": "fixed"}
BENCH_HEADER = "key,label,kind,"  # rows.csv, summary.csv and predicted_vs_measured.csv start so
CSV_HEADERS = {"advice.csv": "batch_size,recommended,", "engine-rows.csv": "backend,label,method,",
               "engine-validation.csv": "backend,label,method,",
               "engine-summary.csv": "label,batch_size,"}


@dataclass
class BenchResult:
    spec: BenchSpec
    rows: pd.DataFrame  # one per (run, repeat): ROW_COLUMNS
    summary: pd.DataFrame  # one per run: see analysis.summarize
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)


def _write_csv(df: pd.DataFrame, path: Path) -> Path:
    return write_text_atomic(path, df.to_csv(index=False))


def _row(spec: BenchSpec, run: Run, rep: int, tokens: int, seconds: float, **kw: Any) -> dict[str, Any]:
    c = run.config
    return dict(key=run.key, label=run.label, kind=run.kind, method=c.method if run.kind == "spectune" else run.kind,
                models=",".join(c.models), combine=c.combine, gamma=",".join(map(str, c.gamma)), proposer=c.proposer,
                policy=c.policy, batch_size=c.batch_size, temperature=c.temperature, repeat=rep,
                is_standard=spec.is_standard(run),
                is_target=spec.is_target(run), tokens=tokens, seconds=seconds,
                goodput=tokens / seconds if seconds > 0 else 0.0,
                decode_goodput=tokens / kw["decode_seconds"] if kw.get("decode_seconds") else NAN,
                **{k: kw.get(k, d) for k, d in (("decode_seconds", NAN), ("mean_accepted_length", NAN),
                                                ("calls_per_token", NAN),
                                                ("alpha", NAN), ("alpha_p", NAN),
                                                ("calls_by_k", "{}"), ("draft_lengths", "{}"), ("dtype", ""),
                                                ("runtime", ""))})


def _measure_spectune(dec: Any, run: Run, prompts: Sequence[Sequence[int]], seed: int) -> dict[str, Any]:
    c = run.config
    _, _, total = dec.generate_many(prompts, c.max_new_tokens, c.batch_size, seed)
    m = total.models
    rate = lambda ms: ms.accepted / ms.proposed if ms.proposed else float("nan")  # noqa: E731
    lookup_only = proposer_kind(c.proposer) == "ngram"  # no model proposes
    return dict(tokens=total.output_tokens, seconds=total.wall_seconds, decode_seconds=total.decode_seconds,
                mean_accepted_length=total.mean_accepted_length, calls_per_token=total.calls_per_token,
                alpha=rate(m[-1] if lookup_only else m[0]),  # an ngram proposer's row is the last
                alpha_p=rate(m[1]) if len(m) > 1 and not lookup_only else float("nan"),
                calls_by_k=json.dumps({name: {str(k): v for k, v in sorted(x.calls_by_k.items())}
                                       for name, x in zip(c.models, m)}),
                acceptance_per_pos=_by_position(m[-1] if lookup_only else m[0]))


def _by_position(ms: Any) -> list[float]:
    """Accepted proposals at each block position per block (an engine's per-position counter over its drafts)."""
    blocks = ms.proposed_by_pos[0] if ms.proposed_by_pos else 0
    return [a / blocks for a in ms.accepted_by_pos] if blocks else []


def claim_outputs(out_dir: Path | None, force: bool, names: Sequence[str] = ("rows.csv", "summary.csv")) -> None:
    """Before any work: ``out_dir`` can be written and its bench files (``names``) are absent or spectune's."""
    if out_dir is not None:
        target_dir(out_dir, "--out")
        for name in names:
            claim(out_dir / name, force, "bench result", csv_header=CSV_HEADERS.get(name, BENCH_HEADER))


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The measured rows of an interrupted bench (``rows.csv``); a garbled file is a one-line ``ConfigError``."""
    try:
        df = pd.read_csv(path, keep_default_na=True)
        for col, value in OPTIONAL_COLUMNS.items():
            if col not in df.columns:
                df[col] = value
        lacking = [c for c in ROW_COLUMNS if c not in df.columns]
        if lacking:
            raise ValueError(f"missing columns {', '.join(lacking)}")
        rep = pd.to_numeric(df["repeat"], errors="coerce")
        if rep.isna().any() or (rep % 1 != 0).any() or (rep < 0).any():
            raise ValueError("column 'repeat' must hold integers >= 0")
        if df["key"].isna().any():
            raise ValueError("column 'key' has empty cells")
        for col in ("batch_size", "temperature", "tokens", "seconds", "goodput"):
            v = pd.to_numeric(df[col], errors="coerce")
            if v.isna().any() or not np.isfinite(v).all() or (v < 0).any():
                raise ValueError(f"column '{col}' must hold finite numbers >= 0")
            df[col] = v
        df["repeat"] = rep.astype(int)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"cannot resume: '{path}' is corrupt ({why}); delete it to measure again") from None
    return df.to_dict("records")


def _resumed(rows_path: Path | None, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The rows an earlier run of this bench measured (``rows.csv`` in ``--out``), or none."""
    if rows_path is None or not rows_path.is_file():
        return []
    rows = read_rows(rows_path)
    say(f"resuming: {len(rows)} measured run(s) in {rows_path}")
    return rows


def _check_dtypes(rows: list[dict[str, Any]], dtypes: set[str], rows_path: Path | None) -> None:
    """Resumed rows must have run in the dtypes this run's models load in (else a ``ConfigError``)."""
    stale = {r["dtype"] for r in rows if isinstance(r.get("dtype"), str) and r["dtype"]} - dtypes
    if stale:
        raise ConfigError(f"cannot resume '{rows_path}': its rows ran in {','.join(sorted(stale))}, this run in "
                          f"{','.join(sorted(dtypes))}; use --dtype or another --out")


def _check_runtime(rows: list[dict[str, Any]], runtime: str, rows_path: Path | None) -> None:
    """Resumed spectune rows must have run with this run's runtime (else a ``ConfigError``)."""
    other = {r["runtime"] for r in rows if r.get("kind") == "spectune" and r.get("runtime") not in (runtime, "")}
    if other:
        raise ConfigError(f"cannot resume '{rows_path}': its rows ran with the {','.join(sorted(map(str, other)))} "
                          f"runtime, this run with {runtime}; use --runtime or another --out")


def interleaved(runs: list[Run], repeats: int, done: set[tuple[str, int]]) -> list[tuple[int, Run]]:
    """(repeat, run) in measuring order: repeat by repeat, each (temperature, batch size) group of runs in turn,
    its runs rotated by one per repeat (a slow phase of a shared machine spreads over every run); the pairs in
    ``done`` (measured before a resume) are left out."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((r.config.temperature, r.config.batch_size), []).append(r)
    order = []
    for rep in range(repeats):
        for group in groups.values():
            k = rep % len(group)
            order += [(rep, r) for r in group[k:] + group[:k] if (r.key, rep) not in done]
    return order


def _decoders(by_spec: dict[str, Any], device: str, runtime: str, profile: Any) -> Callable[[Any], Any]:
    """config -> its runtime decoder over the loaded models, built once per distinct decoding setting."""
    from spectune.decoder import build_decoder

    decoders: dict[tuple, Any] = {}

    def decoder(c: Any) -> Any:
        key = (c.method, c.models, c.combine, c.gamma, c.temperature, c.top_k, c.top_p, c.proposer, c.policy)
        if key not in decoders:
            decoders[key] = build_decoder([by_spec[m] for m in c.models], c, ignore_eos=True, device=device,
                                          runtime=runtime, profile=profile if c.method == "sv" else None)
        return decoders[key]

    return decoder


@dataclass(frozen=True)
class RunSettings:
    """How ``bench`` measures a grid: held-out prompts of ``workload`` (at least ``prompts`` a run, through the
    chat template unless ``chat_template`` is off), ``repeats`` interleaved, seeds from ``seed``; the models in
    ``dtype`` on ``device``, spectune's runs on ``runtime``."""

    workload: str = "mix"
    prompts: int = 2
    repeats: int = 3
    seed: int = 0
    chat_template: bool = True
    dtype: str = "auto"
    runtime: str = "auto"
    device: str = "cpu"

    @classmethod
    def given(cls, run: "RunSettings | None", fields: dict[str, Any]) -> "RunSettings":
        """``run`` (default: the defaults) with ``fields`` over it; an unknown field is one ``ConfigError`` line."""
        try:
            return replace(run or cls(), **fields)
        except TypeError as e:
            raise ConfigError(f"bench: {e}") from None


def bench(spec: BenchSpec, run: RunSettings | None = None, *, out: str | os.PathLike | None = None,
          resume: bool = False, profile: Any = None, force: bool = False, say: Callable[[str], None] = lambda s: None,
          **fields: Any) -> BenchResult:
    """Measure ``spec`` as ``run`` says (:class:`RunSettings`, any of its fields given by keyword over it; see the
    module docstring); with ``out``, rows.csv / summary.csv are written there (files of those names that spectune
    did not write are an ``OutputError`` unless ``force``).
    Prompts are encoded as calibration encodes them (``spectune.decoder.encode_prompt``). Models load in ``dtype``
    (HF baselines run the same loaded models, so the same dtype); each row records its models' dtypes and the
    ``runtime`` of spectune's runs (``compiled``: every run is decoded once, untimed, before the repeats, so no
    compile time lands in a measurement)."""
    from spectune.decoder import encode_prompt
    from spectune.machine import describe, here
    from spectune.models import load_models

    rs = RunSettings.given(run, fields)
    workload, prompts, repeats, seed, dtype, device = rs.workload, rs.prompts, rs.repeats, rs.seed, rs.dtype, rs.device
    checks.integer(repeats, "repeats", lo=1, hi=checks.MAX_REPEATS)
    checks.integer(prompts, "prompts", lo=1, hi=checks.MAX_COUNT)
    checks.seed(seed)
    runtime = pick_runtime(rs.runtime, device, list(spec.models), min(spec.batch_sizes))
    runs = spec.runs()
    out_dir = Path(out).expanduser() if out else None
    claim_outputs(out_dir, force)
    rows_path = out_dir / "rows.csv" if out_dir else None
    rows = _resumed(rows_path, say) if resume else []
    done = {(r["key"], int(r["repeat"])) for r in rows}

    # 1. models and prompts
    wl = load_workload(workload)
    if not wl.heldout:
        raise ConfigError(f"workload '{workload}' has no held-out prompts")
    loaded = load_models(list(spec.models), device=device, dtype=dtype)
    by_spec = dict(zip(spec.models, loaded))
    dtype_of = lambda c: ",".join(dict.fromkeys(by_spec[m].dtype for m in c.models))  # noqa: E731
    _check_dtypes(rows, {dtype_of(r.config) for r in runs}, rows_path)
    _check_runtime(rows, runtime, rows_path)
    tok = by_spec[spec.models[-1]].tokenizer
    pool = [encode_prompt(tok, p, rs.chat_template) for p in wl.heldout]
    prompts_for = lambda b: [pool[i % len(pool)] for i in range(max(b, prompts))]  # noqa: E731
    decoder = _decoders(by_spec, device, runtime, profile)
    for r in runs:  # build every decoder first: a bad setting fails before anything is measured
        if r.kind == "spectune":
            decoder(r.config)
    say(f"machine: {describe(here(device))}; {dtype_line(loaded)}; {runtime} runtime")  # after every check
    # 2. warm-up (allocator, first-call overheads; compiled: every run's shapes compiled and captured), not recorded
    _warm_up(runs, decoder, prompts_for, pool, seed, runtime, say)
    # 3. interleaved repeats
    for rep, r, m in _interleaved_runs(runs, repeats, done, decoder, by_spec, prompts_for, seed, say):
        rows.append(_row(spec, r, rep, dtype=dtype_of(r.config), runtime=runtime if r.kind == "spectune" else "",
                         **m))
        if rows_path is not None:
            _write_csv(pd.DataFrame(rows, columns=ROW_COLUMNS), rows_path)
    df = pd.DataFrame(rows, columns=ROW_COLUMNS)
    res = BenchResult(spec, df, summarize(df), out_dir)
    if out_dir is not None:
        res.files = [rows_path, _write_csv(res.summary, out_dir / "summary.csv")]
    return res


def _interleaved_runs(runs: Sequence[Run], repeats: int, done: set, decoder: Callable[[Any], Any],
                      by_spec: dict[str, Any], prompts_for: Callable[[int], list], seed: int,
                      say: Callable[[str], None]) -> Iterator[tuple[int, Run, dict[str, Any]]]:
    """(repeat, run, its measurement) of every run not ``done``, repeats interleaved (``interleaved``), each as it
    is measured: spectune's runs on their decoder, the HF baselines on the loaded models."""
    from spectune.bench.hf_baseline import run_hf

    order = interleaved(runs, repeats, done)
    for n, (rep, r) in enumerate(order, 1):
        say(f"[{n}/{len(order)}] repeat {rep + 1}/{repeats} b={r.config.batch_size}: {r.label}")
        ps = prompts_for(r.config.batch_size)
        if r.kind == "spectune":
            yield rep, r, _measure_spectune(decoder(r.config), r, ps, seed)
        else:
            yield rep, r, run_hf(r, by_spec[r.config.models[-1]], by_spec[r.config.models[0]], ps, seed)


def _warm_up(runs: Sequence[Run], decoder: Callable[[Any], Any], prompts_for: Callable[[int], list],
             pool: Sequence[Sequence[int]], seed: int, runtime: str, say: Callable[[str], None]) -> None:
    """Untimed: one short decode (allocator, first calls); with the compiled runtime every spectune run once
    in full, so each forward shape it uses is compiled (and captured) before anything is timed."""
    import time

    first = next((r for r in runs if r.kind == "spectune"), None)
    if first is not None:
        decoder(first.config).generate(pool[0], 4, seed)
    if runtime != "compiled":
        return
    t0 = time.perf_counter()
    # largest batch first: smaller batches then reuse its KV store, and the graphs compiled for it
    for r in sorted((r for r in runs if r.kind == "spectune"), key=lambda r: -r.config.batch_size):
        _measure_spectune(decoder(r.config), r, prompts_for(r.config.batch_size), seed)
    say(f"compiled runtime: {time.perf_counter() - t0:.0f} s compiling and warming up every run (not measured)")
