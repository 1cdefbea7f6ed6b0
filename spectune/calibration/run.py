"""``calibrate``: measure hardware, latency, acceptance and SV statistics, and write a profile.

Stages and checkpoints (``checkpoint.py``). Work happens in ``<out>.partial/`` beside the final directory:
``state.json`` (settings, model hashes, hardware, seconds spent per stage), one CSV per finished latency chunk
(``latency/b<B>_ctx<C>.csv``) and per finished batch of prompts of the acceptance stage
(``acceptance/batch<NNN>.traces.csv`` and ``.sv.csv``), each written atomically. An interrupted run
continues with ``resume=True`` (CLI ``--resume``) from the first unfinished chunk; a chunk in progress is
measured again, nothing finished is lost. The settings and the models' content hashes must match to resume.
The last stage derives cost coefficients, the latency fit, acceptance means and the SV bins, writes the
profile atomically to ``out`` and removes the partial directory.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch
import transformers
from tqdm import tqdm

from spectune import checks
from spectune.calibration import acceptance, dtype_probe, hardware, latency
from spectune.calibration.acceptance import AcceptanceSettings
from spectune.calibration.bins import A_BINS, S_BINS, sv_tables
from spectune.calibration.checkpoint import Checkpoint, check_out, read_chunks, write_csv_atomic
from spectune.calibration.latency import LatencyGrid
from spectune.config import validate_settings
from spectune.decoder import encode_prompt, runner_models
from spectune.decoding.combine import parse_combination
from spectune.decoding.proposers import parse_proposer
from spectune.decoding.runtime import resolve_runtime
from spectune.errors import ConfigError
from spectune.machine import slug
from spectune.models.bundled import DEFAULT_FAMILY, cache_root
from spectune.models.loading import dtype_line, max_positions
from spectune.outputs import name_slug
from spectune.profile import (
    LATENCY_COLUMNS,
    PATH_COLUMNS,
    PATH_DRAFT_COLUMNS,
    SCHEMA,
    SV_COLUMNS,
    TRACE_COLUMNS,
    LatencyModel,
    Profile,
    acceptance_summary,
    cost_table,
)
from spectune.workloads import BASE_WORKLOADS, load_workload

DEFAULT_BATCH_SIZES = {"cpu": (1, 2, 4, 8, 16), "cuda": (1, 2, 4, 8, 16, 32)}  # per device type (see calibrate)
DEFAULT_CONTEXTS = (64, 256)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def model_hash(module: Any) -> str:
    """blake2b of every tensor in the state dict (names, dtypes, shapes and bytes): same weights, same hash."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def default_out_dir(model_names: Sequence[str], hw: dict[str, Any], dtype: str | None = None,
                    runtime: str = "eager") -> Path:
    """``<spectune cache>/profiles/<models>--<machine>-<dtype>``, e.g. ``...--cpu-amd-zen4-x2-bf16`` (cache:
    ``$SPECTUNE_CACHE`` or ``~/.cache/spectune``); ``-compiled`` / ``-llamacpp`` appended for those runtimes, so
    the runtimes' profiles of one machine live side by side."""
    models = "+".join(name_slug(Path(m).name or m) for m in model_names)
    suffix = f"-{runtime}" if runtime in ("compiled", "llamacpp") else ""
    return cache_root() / "profiles" / f"{models}--{slug(hw['identity'], dtype)}{suffix}"


def _expand_workloads(workload: str | Sequence[str]) -> list[str]:
    items = [workload] if isinstance(workload, (str, os.PathLike)) else list(workload)
    out: list[str] = []
    for w in items:
        for part in (str(w).split(",") if isinstance(w, str) and "," in str(w) else [str(w)]):
            part = part.strip()
            out += list(BASE_WORKLOADS) if part == "mix" else [part]
    return list(dict.fromkeys(out))


def _bar(total: float, desc: str, enabled: bool):
    return tqdm(total=total, desc=desc, disable=not enabled, file=sys.stderr, leave=True, dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining} {postfix}")


@dataclass(frozen=True)
class CalibrationSettings:
    """What ``calibrate`` measures and how; every field is checked by :meth:`checked` before anything loads.

    ``combine``: the combination (as ``generate --combine``) acceptance is measured against, plus ``target`` for
    every pair. ``workload``: a bundled name (``mix`` = its five sets, each recorded separately), a prompt file, or
    a comma-separated list. ``gamma_max`` defaults to ``max_k``.

    ``batch_sizes`` default per device type: up to 32 on CUDA, up to 16 on CPU (a CPU's throughput stops growing
    there: the bundled 2-core profile has the target at 45 tok/s at b=16 and 48 at b=32, and the b=32 cell alone
    cost as much as all smaller ones). ``all_k``: time every k at every batch size (default: every k up to batch
    2, powers of two above; see ``LatencyGrid.k_values``). ``quiet_attempts``: how many times at most a latency
    chunk is timed while the machine is disturbed (``latency.measure_quiet``; 1: once, whatever happens).
    ``prompts_per_workload``: calibration prompts of each workload (default: 15 in all, at least 3 per workload;
    see ``acceptance.default_prompts_per_workload``). ``prompt_batch``: prompts traced side by side in the
    acceptance stage. ``state_stride``: tokens of r's trajectory between recorded states (the states spread over
    the first ``states_per_prompt * state_stride`` tokens of each answer). ``lookups``: the lookup proposers
    (``ngram:N_MIN,N_MAX``) traced beside the models (default: ``AcceptanceSettings.lookups``; ``()`` none).
    """

    combine: str = "target"
    workload: str | Sequence[str] = "mix"
    batch_sizes: Any = None
    max_k: int = 8
    all_k: bool = False
    contexts: Any = DEFAULT_CONTEXTS
    repeats: int = 3
    quiet_attempts: int = 3
    seed: int = 0
    temperature: float = 0.0  # the sampling acceptance is measured at
    top_k: int = 0
    top_p: float = 1.0
    gamma_max: int | None = None
    prompts_per_workload: int | None = None
    states_per_prompt: int = 8
    state_stride: int = 8
    prompt_batch: int = 16
    s_bins: int = 20
    a_bins: int = 10
    lookups: Sequence[str] | None = None

    def checked(self, n_models: int, device: str) -> tuple[LatencyGrid, AcceptanceSettings, str]:
        """(the latency grid, the acceptance settings, the canonical combination) of ``n_models`` models on
        ``device``; a one-line ``ConfigError`` naming the first bad setting."""
        if n_models < 2:
            raise ConfigError(f"calibration needs at least 2 models (a proposer and a verifier), got {n_models}")
        sizes = (DEFAULT_BATCH_SIZES["cuda" if str(device).startswith("cuda") else "cpu"] if self.batch_sizes is None
                 else self.batch_sizes)
        bsz = checks.integers(sizes, "batch sizes", hi=checks.MAX_BATCH)
        grid = LatencyGrid(batch_sizes=bsz, max_k=checks.integer(self.max_k, "max-k", lo=1, hi=checks.MAX_COUNT),
                           contexts=checks.integers(self.contexts, "context lengths"), seed=checks.seed(self.seed),
                           repeats=checks.integer(self.repeats, "repeats", lo=1, hi=checks.MAX_REPEATS),
                           quiet_attempts=checks.integer(self.quiet_attempts, "quiet attempts", lo=1,
                                                         hi=checks.MAX_REPEATS),
                           dense_k_max_batch=max(bsz) if self.all_k else 2)
        comb_spec = parse_combination(self.combine, n_models).spec
        validate_settings(n_models, "sd", self.combine, None, self.temperature, self.top_k, self.top_p, 1)
        per_workload = self.prompts_per_workload  # default: a fixed budget of prompts, spread over the workloads
        if per_workload is None:
            per_workload = acceptance.default_prompts_per_workload(len(_expand_workloads(self.workload)))
        for v, what in ((per_workload, "prompts per workload"), (self.states_per_prompt, "states per prompt"),
                        (self.prompt_batch, "prompt batch"), (self.gamma_max or grid.max_k, "gamma-max"),
                        (self.state_stride, "state stride")):
            checks.integer(v, what, lo=1, hi=checks.MAX_COUNT)
        acc = AcceptanceSettings(gamma_max=self.gamma_max or grid.max_k, prompts_per_workload=per_workload,
                                 states_per_prompt=self.states_per_prompt, temperature=self.temperature,
                                 top_k=self.top_k, top_p=self.top_p, seed=self.seed, prompt_batch=self.prompt_batch,
                                 state_stride=self.state_stride,
                                 **({} if self.lookups is None else {"lookups": _lookups(self.lookups)}))
        checks.integer(self.s_bins, "s bins", lo=S_BINS[0], hi=S_BINS[1])
        checks.integer(self.a_bins, "a bins", lo=A_BINS[0], hi=A_BINS[1])
        return grid, acc, comb_spec


def calibrate(models: Sequence[Any] | None = None, settings: CalibrationSettings | None = None, *,
              device: str = "cpu", dtype: str = "auto", runtime: str = "auto", out: str | os.PathLike | None = None,
              resume: bool = False, force: bool = False, progress: bool = True, nvml: Any = None,
              **fields: Any) -> Profile:
    """Measure a profile for ``models`` (default: the bundled family) and write it to ``out``; returns it.

    ``settings`` (:class:`CalibrationSettings`), with any of its fields given by keyword over it, say what is
    measured; see the module docstring for resume. ``dtype``: ``auto`` (each model's config dtype where the
    device computes it natively, else float32: ``spectune.machine.resolve_dtype``) or an explicit dtype; the
    profile records each model's dtype, the rule that chose it and the machine's exact identity
    (``hardware.identity``).

    ``runtime``: ``auto`` (compiled on CUDA, eager on a CPU), ``eager``, ``compiled`` or ``llamacpp``: the runtime
    whose forwards the latency stage times (``settings.runtime``; the compiled one's compile time is the stage
    ``compile``, never inside a latency). Acceptance is a property of the models' distributions: it is traced
    with the eager reference runner whatever the runtime.

    ``out``: a new directory, an empty one or a spectune profile (replaced atomically at the end); anything
    else, or a file, is an ``OutputError`` before anything is measured unless ``force``.
    """
    t_start = time.time()
    try:
        cs = replace(settings or CalibrationSettings(), **fields)
    except TypeError as e:
        raise ConfigError(f"calibrate: {e}") from None
    specs = list(models) if models else list(DEFAULT_FAMILY)
    runtime = resolve_runtime(runtime, device)
    grid, acc, comb_spec = cs.checked(len(specs), device)
    if out is not None:  # before anything is measured: never into a user's directory or file
        check_out(Path(out).expanduser(), force, resume)
    wl_names, prompts = _calibration_prompts(cs.workload, acc)
    loaded, choice = _load(specs, dtype, device, grid.max_k)
    _check_positions(loaded, grid, acc)
    hw = hardware.fingerprint(device, nvml=nvml)
    meta = _start_meta(loaded, hw, dict(combine=comb_spec, workloads=wl_names, device=str(device), dtype=dtype,
                                        runtime=runtime, latency=asdict(grid), acceptance=asdict(acc),
                                        s_bins=cs.s_bins, a_bins=cs.a_bins,
                                        prompts={w: len(p) for w, p in prompts.items()}, dtype_choice=choice))
    out_dir = Path(out).expanduser() if out else default_out_dir([m.name for m in loaded], hw, loaded[-1].dtype,
                                                                 runtime)
    if out is None:
        check_out(out_dir, force, resume)
    ck = Checkpoint(out_dir.with_name(out_dir.name + ".partial"))
    ck.open(meta, resume)
    if progress:  # once every check has passed: an error stays the only line
        print(dtype_line(loaded), file=sys.stderr)
    lat_df = _latency_stage(ck, {m.name: m.model for m in loaded}, grid, acc, device,
                            sum(len(p) for p in prompts.values()), progress, runtime,
                            dict(zip([m.name for m in loaded], runner_models(loaded, runtime))))
    traces, svt, paths, prompt_tokens = _acceptance_stage(ck, loaded, comb_spec, prompts, acc, lat_df, device,
                                                          progress)
    prof = _derive(ck, lat_df, traces, svt, paths, cs.s_bins, cs.a_bins, nvml, t_start, prompt_tokens)
    prof.save(out_dir, force=force)
    shutil.rmtree(ck.part, ignore_errors=True)
    return prof


def _start_meta(loaded: Sequence[Any], hw: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's first meta: the settings (with how latency is timed), the models, the machine."""
    names = [m.name for m in loaded]
    if len(set(names)) != len(names):
        raise ConfigError(f"models must be distinct, got {names}")
    settings["latency_forward"] = "runtime"  # the runtime's own forward is timed (Profile.latency_forward)
    settings["latency"]["batch_sizes"] = list(settings["latency"]["batch_sizes"])
    settings["latency"]["contexts"] = list(settings["latency"]["contexts"])
    models = [dict(name=m.name, parameters=m.num_parameters, dtype=m.dtype, dtype_reason=m.dtype_reason,
                   hash=model_hash(m.model), vocab_size=m.vocab_size) for m in loaded]
    return dict(settings=settings, models=models, hardware=hw, created=_now(), stages={})


def _lookups(specs: Sequence[str]) -> tuple[str, ...]:
    """Canonical lookup proposer specs (``ngram:N_MIN,N_MAX``, each once); a ``ConfigError`` naming a bad one."""
    if isinstance(specs, str):
        specs = [specs]
    out = []
    for s in specs:
        p = parse_proposer(s)
        if not p.looks_up:
            raise ConfigError(f"lookup '{s}' is not a lookup proposer: use ngram:N_MIN,N_MAX")
        out.append(p.spec)
    return tuple(dict.fromkeys(out))


def _calibration_prompts(workload: Any, acc: AcceptanceSettings) -> tuple[list[str], dict[str, list[str]]]:
    """(workload names, their first calibration prompts); a workload typo or no prompt is a ``ConfigError``."""
    wl_names = _expand_workloads(workload)
    wls = {w: load_workload(w) for w in wl_names}
    prompts = {w: list(wl.calibration[:acc.prompts_per_workload]) for w, wl in wls.items()}
    if not any(prompts.values()):
        raise ConfigError(f"workload {workload!r} has no calibration prompts")
    return wl_names, prompts


def _load(specs: Sequence[Any], dtype: str, device: str, max_k: int) -> tuple[list[Any], dict[str, Any] | None]:
    """(the models loaded in ``dtype``; the measured bf16-vs-fp32 choice of ``--dtype auto`` where the flags
    rule cannot decide, else None)."""
    from spectune.models import load_models

    loaded = load_models(specs, dtype=dtype, device=device)
    choice = None
    if dtype_probe.needs_probe(dtype, device, [m.dtype for m in loaded]):
        choice = dtype_probe.probe(loaded, specs, device, int(max_k),
                                   lambda s, d: load_models(s, dtype=d, device=device))
        if choice and choice["dtype"] != loaded[-1].dtype:
            loaded = load_models(specs, dtype=choice["dtype"], device=device)
        for m in loaded if choice else []:
            m.dtype_reason = f"{m.dtype_reason}; {choice['why']}" if m.dtype == choice["dtype"] else m.dtype_reason
    return loaded, choice


def _timing_left(elapsed: float, compiling: float, done_w: float, todo_w: float) -> float:
    """Seconds of timing left in the latency stage, extrapolated from the chunks done so far without their compile
    time: the compiled runtime compiles mostly in its first chunks (measured on an H100: 161 s before the first
    cell, which extrapolated over every chunk made the estimate 87 minutes)."""
    return max(elapsed - compiling, 0.0) / done_w * (todo_w - done_w)


def _time_left(done: pd.DataFrame, elapsed: float, compiling: float, done_w: float, todo_w: float,
               names: list[str], acc: AcceptanceSettings, n_prompts: int) -> str | None:
    """The progress bar's estimate: the rest of the latency stage, plus the acceptance stage once the latency
    table has two batch sizes (the acceptance stage runs prompt groups of up to ``prompt_batch``, which a table of
    one batch size cannot be extrapolated to: from the first chunk alone it read ~4e11 s on a Zen 4). None when
    nothing can be said."""
    if done_w <= 0:
        return None
    latency_left = _timing_left(elapsed, compiling, done_w, todo_w)
    if done.empty or done.loc[done["feasible"].astype(bool), "batch"].nunique() < 2:
        return f"latency ~{latency_left:.0f}s"
    try:  # an estimate only
        acc_s = acceptance.estimate_seconds(LatencyModel(done), names, acc,
                                            acceptance.group_sizes(n_prompts, acc.prompt_batch))
    except Exception:  # noqa: BLE001
        return f"latency ~{latency_left:.0f}s"
    return f"total ~{latency_left + acc_s:.0f}s"


def _latency_stage(ck: Checkpoint, mods: dict[str, Any], grid: LatencyGrid, acc: AcceptanceSettings,
                   device: str, n_prompts: int, progress: bool, runtime: str = "eager",
                   timed: dict[str, Any] | None = None) -> pd.DataFrame:
    """Stage 1: every (batch, ctx) chunk not checkpointed yet, measured through ``runtime``'s runner and written;
    the whole latency table. The compiled runtime's compile time is its own stage, ``compile``. ``timed``: what
    the runners run (``decoder.runner_models``: the GGUFs of the llamacpp runtime), default ``mods``."""
    lat_dir = ck.part / "latency"
    chunk_file = lambda b, c: lat_dir / f"b{b}_ctx{c}.csv"  # noqa: E731
    done_so_far = lambda: read_chunks(sorted(lat_dir.glob("*.csv")), LATENCY_COLUMNS, "latency")  # noqa: E731
    todo = [(b, c) for b, c in grid.chunks() if not chunk_file(b, c).is_file()]
    total_w = sum(grid.weight(b) for b, _ in grid.chunks())
    todo_w = sum(grid.weight(b) for b, _ in todo)
    bar = _bar(total_w, "latency", progress)
    bar.update(total_w - todo_w)
    t0 = time.time()
    done_w = 0.0
    compiling: dict[str, float] = {"seconds": 0.0}  # compiled runtime: compile/capture time, never a latency
    compile_time = (ck.timing("compile", lambda _: compiling["seconds"], True) if runtime == "compiled"
                    else contextlib.nullcontext())
    with contextlib.closing(bar), ck.timing("latency", lambda s: s - compiling["seconds"]), compile_time:
        canary = _canary(mods, device) if todo else None  # its seconds are the stage's, as before
        for b, c in todo:
            have = done_so_far() if lat_dir.exists() else None
            rows, runs = latency.measure_quiet(lambda: latency.measure_chunk(
                timed or mods, b, c, grid, device, skip=latency.oom_skips(have, b, c), runtime=runtime,
                compile_log=compiling),
                grid, canary=canary)
            if len(runs) > 1 and progress:
                bar.write(f"latency b={b} ctx={c}: timed {len(runs)} times, the machine was disturbed ("
                          + ", ".join(_disturbance(r) for r in runs) + "); kept the quietest", file=sys.stderr)
            write_csv_atomic(pd.DataFrame(rows, columns=LATENCY_COLUMNS), chunk_file(b, c))
            done_w += grid.weight(b)
            bar.update(grid.weight(b))
            left = _time_left(done_so_far(), time.time() - t0, compiling["seconds"], done_w, todo_w, list(mods),
                              acc, n_prompts)
            if left is not None:
                bar.set_postfix_str(f"{left} left" + (f" + compiling (so far {compiling['seconds']:.0f}s)"
                                                      if compiling["seconds"] else ""))
    lat_df = read_chunks([chunk_file(b, c) for b, c in grid.chunks()], LATENCY_COLUMNS, "latency")
    ck.stage_time("latency", 0.0, True)
    noisy = lat_df[lat_df["note"].astype(str).str.endswith("while timed")]
    if progress and not noisy.empty:
        print(f"latency: {noisy.groupby(['batch', 'ctx']).ngroups} of {len(grid.chunks())} (batch, ctx) chunks were "
              "timed while the machine was disturbed (their rows' note says how); calibrate again on a quiet "
              "machine for a profile of the quiet machine", file=sys.stderr)
    return lat_df


def _canary(mods: dict[str, Any], device: str) -> Any:
    """The latency stage's reference forward (``latency.Canary``) on the largest model; None where it cannot run."""
    big = max(mods.values(), key=lambda m: sum(p.numel() for p in m.parameters()))
    try:
        return latency.Canary(big, device)
    except Exception:  # noqa: BLE001 - e.g. out of memory: the stage then runs without it
        return None


def _disturbance(run: dict) -> str:
    parts = ([f"others {run['others']:.0%} of the CPU"] if run["others"] is not None else []) + \
        ([f"{run['slowdown']:+.0%} reference forward"] if run["slowdown"] is not None else [])
    return " / ".join(parts) or "?"


def _acceptance_stage(ck: Checkpoint, loaded: Sequence[Any], comb_spec: str, prompts: dict[str, list[str]],
                      acc: AcceptanceSettings, lat_df: pd.DataFrame, device: str, progress: bool
                      ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame], dict[str, list[int]]]:
    """Stage 2: every batch of prompts not checkpointed yet, traced and written; (traces, SV traces, the path
    tables -- trajectories and path_drafts --, the tokens of each calibration prompt by workload, as decoded: chat
    template applied, cut to max_prompt_tokens)."""
    acc_dir = ck.part / "acceptance"
    names = [m.name for m in loaded]
    tok = loaded[-1].tokenizer
    units = [acceptance.PromptUnit(w, i, tuple(encode_prompt(tok, p, acc.chat_template)[-acc.max_prompt_tokens:]))
             for w, ps in prompts.items() for i, p in enumerate(ps)]
    groups = acceptance.batches(units, acc.prompt_batch)
    base = lambda g: acc_dir / f"batch{g:03d}"  # noqa: E731 - one checkpoint per batch of prompts
    todo_g = [g for g in range(len(groups)) if not all(Path(str(base(g)) + kind).is_file()
                                                      for kind in (".traces.csv", ".paths.csv", ".drafts.csv"))]
    todo_sizes = [len(groups[g]) for g in todo_g]
    try:
        est = acceptance.estimate_seconds(LatencyModel(lat_df), names, acc, todo_sizes)
    except Exception:  # noqa: BLE001
        est = float("nan")
    bar = _bar(len(units), f"acceptance (~{est:.0f}s est.)", progress)
    bar.update(len(units) - sum(todo_sizes))
    eos = None if acc.ignore_eos else tok.eos_token_id
    with contextlib.closing(bar), ck.timing("acceptance"):
        for g in todo_g:
            paths: list[dict] = []
            drafts: list[dict] = []
            tr, sv = acceptance.trace_batch([m.model for m in loaded], names, comb_spec, groups[g], acc,
                                            eos_token_id=eos, device=device, path_rows=paths, draft_rows=drafts)
            write_csv_atomic(pd.DataFrame(sv, columns=SV_COLUMNS), Path(str(base(g)) + ".sv.csv"))
            write_csv_atomic(pd.DataFrame(paths, columns=PATH_COLUMNS), Path(str(base(g)) + ".paths.csv"))
            write_csv_atomic(pd.DataFrame(drafts, columns=PATH_DRAFT_COLUMNS), Path(str(base(g)) + ".drafts.csv"))
            write_csv_atomic(pd.DataFrame(tr, columns=TRACE_COLUMNS), Path(str(base(g)) + ".traces.csv"))
            bar.update(len(groups[g]))
    files = lambda kind: [Path(str(base(g)) + kind) for g in range(len(groups))]  # noqa: E731
    traces = read_chunks(files(".traces.csv"), TRACE_COLUMNS, "traces")
    svt = read_chunks(files(".sv.csv"), SV_COLUMNS, "sv_traces")
    paths = dict(trajectories=read_chunks(files(".paths.csv"), PATH_COLUMNS, "trajectories"),
                 path_drafts=read_chunks(files(".drafts.csv"), PATH_DRAFT_COLUMNS, "path_drafts"))
    ck.stage_time("acceptance", 0.0, True)
    return traces, svt, paths, {w: [len(u.ids) for u in units if u.workload == w] for w in prompts}


def _derive(ck: Checkpoint, lat_df: pd.DataFrame, traces: pd.DataFrame, svt: pd.DataFrame,
            paths: dict[str, pd.DataFrame], s_bins: int, a_bins: int, nvml: Any, t_start: float,
            prompt_tokens: dict[str, list[int]]) -> Profile:
    """Stage 3: the derived tables (cost, acceptance means, SV bins) and the profile's metadata."""
    t0 = time.time()
    bins, gains = sv_tables(svt, s_bins, a_bins)
    tables = dict(latency=lat_df, cost=cost_table(lat_df), traces=traces,
                  acceptance=acceptance_summary(traces), sv_traces=svt, sv_bins=bins, info_gain=gains,
                  **paths)
    state = ck.state
    hw_end = hardware.finish(dict(state["hardware"]), nvml=nvml)
    ck.stage_time("derive", time.time() - t0, True)
    meta = dict(
        schema=SCHEMA,
        created=state["created"],
        finished=_now(),
        hardware=hw_end,
        software=dict(spectune=_version(), torch=torch.__version__, transformers=transformers.__version__,
                      cuda=torch.version.cuda, python=sys.version.split()[0], pandas=pd.__version__),
        models=ck.fresh["models"],
        settings=ck.fresh["settings"],
        stages=state["stages"],
        total_seconds=sum(s["seconds"] for s in state["stages"].values()),
        wall_seconds_this_run=time.time() - t_start,
        latency_fit=LatencyModel(lat_df).errors,
        alpha_mean=_alpha_means(traces),
        prompt_tokens=prompt_tokens,
        tables={},
    )
    return Profile(meta=meta, tables=tables)


def _check_positions(loaded: Sequence[Any], grid: LatencyGrid, acc: AcceptanceSettings) -> None:
    """The longest latency cell (context + k new tokens) fits every model's positions."""
    for m in loaded:
        n = max_positions(m.model)
        need = max(grid.contexts) + grid.max_k
        if n is not None and need > n:
            raise ConfigError(f"context {max(grid.contexts)} + max-k {grid.max_k} = {need} positions, but model "
                              f"'{m.name}' holds {n}: use smaller --contexts or --max-k")


def _alpha_means(traces: pd.DataFrame) -> list[dict]:
    """Mean alpha over all draft positions per (proposer, models, combination, workload and 'all')."""
    if traces.empty:
        return []
    keys = ["proposer", "models", "combination"]
    both = pd.concat([traces, traces.assign(workload="all")]) if traces["workload"].nunique() > 1 else traces
    g = both.groupby(keys + ["workload"], sort=False)
    return [dict(zip(keys + ["workload"], k), alpha=float(v)) for k, v in g["alpha"].mean().items()]


def _version() -> str:
    """spectune's version: the installed distribution's, else (a source tree never installed) the package's."""
    try:
        return version("spectune")
    except PackageNotFoundError:
        from spectune import __version__

        return __version__
