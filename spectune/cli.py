"""The ``spectune`` command: one thin click group over the library API.

Every command is a few lines that parse options and call the API; a ``SpectuneError`` becomes one line on
stderr and exit status 2, never a traceback.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
import sys

import click

from spectune.checks import MAX_REPEATS, MAX_TOGETHER
from spectune.decoding.registry import METHOD_NAMES
from spectune.errors import SpectuneError


def _say(text: str) -> None:
    """One line to stderr, never a password (``spectune.masking``)."""
    from spectune.masking import mask_text

    click.echo(mask_text(" ".join(str(text).splitlines())), err=True)


def _one_line_errors(fn):
    """A ``SpectuneError`` or an OS error is one line and exit status 2; a bug is one line and status 1 (set
    ``SPECTUNE_TRACEBACK=1`` to see its traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpectuneError as e:
            for row in getattr(e, "rows", None) or []:  # measured before an engine fault: the user's, never lost
                click.echo(json.dumps(row))
            _say(f"error: {e}")
            sys.exit(2)
        except KeyboardInterrupt:
            ctx = click.get_current_context(silent=True)
            hint = ""
            if ctx is not None and any(p.name == "resume" for p in ctx.command.params):  # calibrate, bench
                hint = "; what was measured is kept: " + ("run the same command again to continue" if
                                                          ctx.params.get("resume") else
                                                          "the same command with --resume continues")
            click.echo("interrupted" + hint, err=True)
            sys.exit(130)
        except OSError as e:
            where = f": '{e.filename}'" if e.filename else ""
            _say(f"error: {e.strerror or e}{where}")
            sys.exit(2)
        except Exception as e:  # noqa: BLE001 - never a traceback on the user's terminal
            if os.environ.get("SPECTUNE_TRACEBACK"):
                raise
            _say(f"error: internal error ({type(e).__name__}: {e}); please report it (SPECTUNE_TRACEBACK=1 shows "
                 "where)")
            sys.exit(1)

    return wrapper


class _OneLineUsageError(click.UsageError):
    """click's usage errors (bad option values, unknown options) as one line, like every other error."""

    def __init__(self, e: click.ClickException):
        super().__init__(e.format_message(), getattr(e, "ctx", None))
        self.exit_code = e.exit_code

    def show(self, file=None) -> None:
        hint = f" (see '{self.ctx.command_path} -h')" if self.ctx is not None else ""
        _say(f"error: {self.message}{hint}")


class _Group(click.Group):
    def command(self, *args, **kwargs):  # every subcommand gets one-line errors
        deco = super().command(*args, **kwargs)
        return lambda fn: deco(_one_line_errors(fn))

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as e:
            raise _OneLineUsageError(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (_OneLineUsageError, click.exceptions.NoArgsIsHelpError):
            raise
        except click.UsageError as e:
            raise _OneLineUsageError(e) from None


_PICKLE = click.option("--allow-pickle-weights", "allow_pickle", is_flag=True, help="Also load models whose "
                       "weights are pickle files (pytorch_model.bin), which can run code when loaded; by default "
                       "only safetensors load.")
_FORCE = click.option("--force", is_flag=True, help="Replace existing files or directories at the output paths "
                      "even when spectune did not write them.")


def _gathered(fn):
    """The command's options as one object, ``o.models``, ``o.out``...: each option is declared once, in its click
    decorator, and the command body reads them from one carrier instead of a parameter list."""
    from types import SimpleNamespace

    @functools.wraps(fn)
    def command(**options):
        return fn(SimpleNamespace(**options))

    return command


def _engine_options(fn):
    """The options that say how spectune reaches a serving engine (start one, or attach to one by URL)."""
    opts = [
        click.option("--engine-bin", default=None, help="The engine's executable (vllm: its `vllm` script; "
                     "llamacpp: `llama-server`). [default: $SPECTUNE_VLLM or $SPECTUNE_LLAMACPP, then PATH]"),
        click.option("--engine-url", default=None, help="Attach to an engine already serving at this URL instead "
                     "of starting one (a token as http://:TOKEN@host:port is sent, never printed)."),
        click.option("--engine-args", default="", help="Your own engine arguments, passed through verbatim after "
                     "spectune's (e.g. \"--tensor-parallel-size 2 --enforce-eager\")."),
        click.option("--engine-log-dir", type=click.Path(), default="spectune-engine-logs", show_default=True,
                     help="Where a started engine's log goes."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _together_option(fn):
    """How many engine starts a measurement of several keeps alive at once (``EngineSettings.together``)."""
    return click.option("--engine-together", type=click.IntRange(1, MAX_TOGETHER), default=1, show_default=True,
                        help="Engine starts kept alive at once and driven in turn, each drive waiting until all "
                        "are idle, so the host's swings fall on all of them alike (vLLM's starts share one start's "
                        "memory; each llama.cpp start takes its own).")(fn)


def _engine_settings(o, seed=0):
    """How to reach ``o.engine`` (``_engine_options``, ``_together_option``)."""
    from pathlib import Path

    from spectune.engines import EngineSettings, Launch

    return EngineSettings(o.engine, o.engine_bin, o.engine_url, Launch.split_args(o.engine_args),
                          Path(o.engine_log_dir), seed=seed, together=getattr(o, "engine_together", 1))


LOOP_ENGINES = click.Choice(["vllm", "llamacpp"])  # engines spectune runs in the loop (spectune.engines)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="spectune")
def cli():
    """spectune: calibrate, tune and run speculative / collaborative LLM decoding.

    Example: spectune generate --prompt "def fibonacci(n):" --max-new-tokens 32
    """


@cli.command("models")
def models_cmd():
    """List the bundled model family (name, parameters, source, license, cache directory, ready).

    Example: spectune models
    """
    from spectune.models import bundled

    rows = [(m.name, f"{m.parameters / 1e6:.1f}M", m.source, m.license, str(m.cache_dir), "yes" if m.ready else "no")
            for m in bundled.info()]
    head = ("name", "params", "source", "license", "cache", "ready")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


_DTYPE_HELP = ("auto: each model's config dtype where this device computes it natively (CUDA with bf16; a CPU "
               "with avx512_bf16 or amx_bf16), else float32. An explicit dtype wins.")


def _dtype_option(fn):
    return click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
                        show_default=True, help=_DTYPE_HELP)(fn)


_RUNTIME_HELP = ("How the forwards run. eager: transformers' forward over a growing cache (the reference). compiled: "
                 "a static KV cache with torch.compile'd forwards (CUDA graphs on CUDA; compile time is reported "
                 "apart). llamacpp: llama.cpp's kernels over a GGUF of the same weights, on a CPU (needs the "
                 "llamacpp-runtime extra). auto: compiled on CUDA; on a CPU llamacpp where this machine's profiles "
                 "price it faster at the run's batch size, else eager (calibrate: eager).")


def _runtime_option(fn):
    from spectune.decoding.runtime import RUNTIMES

    return click.option("--runtime", type=click.Choice(list(RUNTIMES)), default="auto",
                        show_default=True, help=_RUNTIME_HELP)(fn)


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _models(text: str | None) -> list[str] | None:
    """``--models``: None when not given (the command's default); given but empty is an error, not the default."""
    if text is None:
        return None
    names = _split(text)
    if not names:
        from spectune.errors import ConfigError

        raise ConfigError(f"--models is empty ({text!r}): give model names or directories, smallest first")
    return names


def _numbers(text: str, what: str) -> tuple[float, ...]:
    """Comma-separated numbers (e.g. ``--temperatures 0,0.8``); text that is not one is a one-line error."""
    from spectune.errors import ConfigError

    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"invalid {what} '{text}': expected comma-separated numbers") from None


def _setting(name: str, *decls: str, keep_config: bool = False, help: str = "", **kw):
    """A click option for ``DecodeConfig`` field ``name``, its default declared there once: shown as the option's
    default, or with ``keep_config`` left None (a flag not given keeps a --config file's value) and named in the
    help."""
    from dataclasses import fields

    from spectune.config import DecodeConfig

    d = next(f.default for f in fields(DecodeConfig) if f.name == name)
    opt = "--" + name.replace("_", "-")
    if keep_config:
        shown = f"{d:g}" if isinstance(d, float) else d
        return click.option(opt, *decls, default=None, help=f"{help} [default: {shown}]".strip(), **kw)
    return click.option(opt, *decls, default=d, show_default=True, help=help or None, **kw)


@cli.command("generate")
@click.option("--models", help="Comma-separated models, smallest first (bundled names or directories). "
              "Default: the bundled family.")
@_setting("method", type=click.Choice(list(METHOD_NAMES)), keep_config=True,
          help="Decoding method (sv: draft, companion, target + a calibrated profile).")
@_setting("combine", keep_config=True, help="target | we:W1,W2,... | cd:MU")
@click.option("--gamma", default=None,
              help="Proposal length per model, in model order (default 5 for the first, 1 for others).")
@_setting("proposer", keep_config=True, help="model (the first model drafts) | ngram:N_MIN,N_MAX (prompt lookup "
          "of up to gamma_0 tokens; method sd, the default then; --models may be the target alone) | "
          "ngram+model:N_MIN,N_MAX[,K] (a lookup of up to K tokens where it matches, else the first model "
          "drafts gamma_0; method sd).")
@_setting("policy", keep_config=True, help="Draft length of the first model: fixed | heuristic (HF: +2 after a "
          "fully accepted block, else -1) | confidence:T (stop after a draft token of probability < T).")
@_setting("temperature", type=float, keep_config=True, help="0 = greedy.")
@_setting("top_k", type=int, keep_config=True, help="0 disables.")
@_setting("top_p", type=float, keep_config=True, help="1 disables.")
@_setting("seed", type=int, keep_config=True, help="Sampling seed.")
@_setting("max_new_tokens", type=int, keep_config=True)
@click.option("--prompt", help="Prompt text.")
@click.option("--prompts", "prompts_file", type=click.Path(),
              help="A JSONL (\"prompt\" per line) or .txt file of prompts.")
@click.option("--batch-size", type=int, default=None, help="Prompts decoded together in one loop. [default: 8]")
@click.option("--config", "config_path", type=click.Path(), help="A spectune-native config JSON; flags override it.")
@click.option("--profile", "profile_path", type=click.Path(), help="Calibrated profile for sv (default: the one "
              "found for these models).")
@click.option("--ignore-eos", is_flag=True, help="Do not stop at the end-of-sequence token.")
@click.option("--device", default="cpu", show_default=True)
@_dtype_option
@_runtime_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: token_ids, text, stats, dtypes, "
              "runtime.")
@_PICKLE
@_gathered
def generate_cmd(o):
    """Decode a prompt exactly from the combined distribution with the chosen method.

    Example: spectune generate --models draft-s,smollm2-135m --method cos --combine we:0.5,0.5 --prompt "def add(a, b):"

    With --prompts FILE the prompts run in batches of --batch-size (ragged: each sequence accepts its own
    number of tokens per step); the output is one line per prompt, then the batch stats.

    A prompt plus --max-new-tokens longer than the smallest model's positions is an error before decoding; if
    decoding fails midway, the text generated until then is printed before the error line. Writes no files.
    """
    from spectune.api import generate_batch
    from spectune.errors import ConfigError
    from spectune.workloads import read_prompts
    from spectune.config import DecodeConfig
    from spectune.models.bundled import DEFAULT_FAMILY

    base = DecodeConfig.load(o.config_path) if o.config_path else None
    flags = dict(models=_models(o.models), method=o.method, combine=o.combine, gamma=o.gamma,
                 temperature=o.temperature, top_k=o.top_k, top_p=o.top_p, seed=o.seed,
                 max_new_tokens=o.max_new_tokens, proposer=o.proposer, policy=o.policy)
    d = base or DecodeConfig()  # a flag not given: the config's value, else DecodeConfig's default
    defaults = {k: getattr(d, k) for k in flags} | dict(models=list(d.models) or DEFAULT_FAMILY,
                                                        gamma=list(d.gamma) or None)
    if o.method is None and base is None and (o.proposer or "").startswith("ngram"):
        defaults["method"] = "sd"  # the one method the ngram proposer runs with
    opts = {k: (v if v is not None else defaults[k]) for k, v in flags.items()}
    if (o.prompt is None) == (o.prompts_file is None):
        raise ConfigError("give exactly one of --prompt TEXT or --prompts FILE")
    texts = [o.prompt] if o.prompt is not None else read_prompts(o.prompts_file)
    bs = o.batch_size if o.batch_size is not None else (base.batch_size if base else 8)
    from spectune.errors import DecodeError
    from spectune.models.loading import allow_pickle_weights

    try:
        with allow_pickle_weights(o.allow_pickle):
            res = generate_batch(opts.pop("models"), texts, batch_size=bs, ignore_eos=o.ignore_eos, device=o.device,
                                 profile=o.profile_path, dtype=o.dtype, runtime=o.runtime, **opts)
    except DecodeError as e:
        for t in e.texts:  # what was generated before the failure is the user's: never lost
            click.echo(t)
        raise
    _print_generated(res, texts, o.prompt is not None, o.as_json, base, o.config_path)


def _print_generated(res, texts, one_prompt, as_json, base, config_path):
    """``generate``'s output: the texts and the batch stats, or one JSON object (``--json``)."""
    import json

    if not as_json:  # --json: the dtypes are in the object, so the output stays one JSON object
        click.echo(res.dtype_note, err=True)
    if base is not None and base.dtype != "auto" and set(res.dtypes.values()) != {base.dtype}:
        click.echo(f"warning: config '{config_path}' was tuned in {base.dtype}; this run uses "
                   f"{','.join(sorted(set(res.dtypes.values())))}, so its advice may not apply", err=True)
    if as_json:
        one = res.results[0].to_dict() | {"stats": res.stats.to_dict()}
        run = {"dtypes": res.dtypes, "runtime": res.runtime, "compile_seconds": round(res.compile_seconds, 3)}
        click.echo(json.dumps((one if one_prompt else res.to_dict()) | run))
        return
    for r in res.results:
        click.echo(r.text)
    st = res.stats
    click.echo(f"-- {len(texts)} prompt(s), {st.output_tokens} tokens, {st.tokens_per_second:.1f} tok/s, mean "
               f"accepted length {st.mean_accepted_length:.2f}, {st.calls_per_token:.2f} model calls/token; "
               f"{res.runtime} runtime" + (f" (compiling {res.compile_seconds:.1f} s of it)"
                                           if res.runtime == "compiled" else ""), err=True)


@cli.command("calibrate")
@click.option("--models", help="Comma-separated models, smallest first. Default: the bundled family.")
@_setting("combine", help="Combination acceptance is measured against (as generate).")
@click.option("--workload", default="mix", show_default=True,
              help="Bundled name (mix = its four sets), a prompt file, or a comma list.")
@click.option("--batch-sizes", help="Batch sizes to time. [default: 1,2,4,8,16 on CPU; 1,2,4,8,16,32 on CUDA]")
@click.option("--max-k", type=int, default=8, show_default=True, help="Largest new-token count K (and draft length).")
@click.option("--all-k", is_flag=True,
              help="Time every k at every batch size (default: every k up to batch 2, then 1,2,4,..,K).")
@click.option("--contexts", default="64,256", show_default=True, help="Context lengths to time.")
@click.option("--repeats", type=int, default=3, show_default=True, help="Timed repeats per cell (median reported).")
@click.option("--quiet-attempts", type=int, default=3, show_default=True,
              help="Time a latency chunk again while other processes or a busy host slow the machine, at most "
                   "this many times in all (1: never again).")
@click.option("--prompts-per-workload", type=int, default=None,
              help="Calibration prompts per workload. [default: 15 in all, at least 3 per workload]")
@click.option("--states-per-prompt", type=int, default=8, show_default=True, help="Draft starts per prompt.")
@click.option("--state-stride", type=int, default=8, show_default=True,
              help="Tokens of the trajectory between draft starts (they cover the first STATES x STRIDE tokens).")
@_setting("temperature", type=float, help="Calibration temperature (0 = greedy).")
@click.option("--lookup", "lookups", multiple=True,
              help="Lookup proposer traced beside the models (repeatable): ngram:N_MIN,N_MAX, or none. "
              "[default: ngram:1,2 ngram:1,3 ngram:2,4]")
@click.option("--device", default="cpu", show_default=True)
@_dtype_option
@_runtime_option
@click.option("--out", type=click.Path(),
              help="Profile directory. [default: ~/.cache/spectune/profiles/<models>--<hardware>]")
@click.option("--resume", is_flag=True, help="Continue an interrupted calibration from its finished stages.")
@click.option("--engine", type=LOOP_ENGINES, default=None, help="Measure this serving engine's latency "
              "through it (the target alone, lookups of K = 2, 4, --max-k and the draft at K = 1, 4, --max-k) into "
              "an engine profile; acceptance comes from a runtime profile of the models (--acceptance).")
@click.option("--acceptance", type=click.Path(), default=None, help="--engine: the runtime profile whose traces the "
              "engine profile carries. [default: the best found, this machine's first]")
@click.option("--engine-steps", type=click.Choice(["client", "engine"]), default="client", show_default=True,
              help="--engine: price each step as the client saw it (its decode goodput) or as the engine timed it.")
@click.option("--engine-step-stat", type=click.Choice(["fastest", "quartile", "fastest-start", "paired"]),
              default="fastest", show_default=True, help="--engine: a stage's step from its measurements: the "
              "fastest, the lower quartile, the median of its fastest start, or the target alone's fastest times the "
              "median of the stage's ratios to it round by round (for --engine-together).")
@click.option("--engine-passes", type=click.IntRange(1, MAX_REPEATS), default=2, show_default=True,
              help="--engine: start every stage this many times, in turn, each for --repeats measurements (a --resume "
              "may change it: fewer starts no further pass).")
@_engine_options
@_together_option
@_FORCE
@_PICKLE
@_gathered
def calibrate_cmd(o):
    """Measure latency, acceptance and SV statistics of your models on this machine and write a profile.

    Example: spectune calibrate --models draft-s,draft-m,smollm2-135m --workload code --out my-profile

    An existing --out: a spectune profile there is replaced when the new one is complete, in one atomic step
    (the previous profile stays readable until then, and a kill never leaves --out missing); an empty directory
    is used; a directory holding other files, or a file, is an error before anything is measured unless
    --force. Work in progress is checkpointed in OUT.partial (a directory that is not a spectune checkpoint is
    never touched).

    Example: spectune calibrate --engine vllm --models draft-s,smollm2-135m --batch-sizes 1,4,8

    With --engine, the engine is started once per stage from the exact speculative settings measured (or
    measured at --engine-url when it serves them: a run with speculation needs its own starts) and rows are
    checkpointed as measured; the profile records the engine's name, version and parallel configuration.
    """
    if o.engine:
        return _calibrate_engine(o, _engine_settings(o))
    from spectune.calibration import calibrate
    from spectune.models.loading import allow_pickle_weights

    with allow_pickle_weights(o.allow_pickle):
        prof = calibrate(_models(o.models), combine=o.combine, workload=o.workload, batch_sizes=o.batch_sizes,
                         max_k=o.max_k,
                         all_k=o.all_k, contexts=o.contexts, repeats=o.repeats, quiet_attempts=o.quiet_attempts,
                         prompts_per_workload=o.prompts_per_workload,
                         states_per_prompt=o.states_per_prompt, state_stride=o.state_stride, temperature=o.temperature,
                         device=o.device, dtype=o.dtype, runtime=o.runtime, out=o.out, resume=o.resume, force=o.force,
                         lookups=None if not o.lookups else () if o.lookups == ("none",) else o.lookups)
    compiling = prof.meta["stages"].get("compile", {}).get("seconds")
    click.echo(f"profile written to {prof.path} ({prof.meta['total_seconds']:.0f} s"
               + (f", of which compiling {compiling:.0f} s" if compiling else "") + ")")


def _calibrate_engine(o, settings):
    from spectune.calibration.engine import EngineGrid, calibrate_engine

    if settings.url:
        from spectune.errors import ConfigError

        raise ConfigError("calibrate --engine starts the engine once per speculative setting: --engine-url cannot "
                          "change a running engine's speculation")
    k = o.max_k
    grid = EngineGrid(**({"batch_sizes": o.batch_sizes} if o.batch_sizes else {}),  # checked (one line) by the grid
                      lookup_ks=tuple(sorted({x for x in (2, 4, k) if x <= k})),
                      draft_ks=tuple(sorted({1, min(4, k), k})), repeats=o.repeats, workload=o.workload,
                      passes=o.engine_passes, steps=o.engine_steps, stat=o.engine_step_stat)
    specs = _models(o.models) or ["draft-s", "smollm2-135m"]
    prof = calibrate_engine(specs, settings, grid, acceptance=o.acceptance, out=o.out, force=o.force,
                            resume=o.resume, say=lambda s: click.echo(s, err=True))
    e = prof.meta["engine"]
    click.echo(f"engine profile ({e['name']} {e['version']}) written to {prof.path} "
               f"({prof.meta['total_seconds']:.0f} s)")


@cli.group("profile", cls=_Group)
def profile_group():
    """Inspect calibration profiles.

    Example: spectune profile show my-profile   (written by: spectune calibrate ... --out my-profile)
    """


@profile_group.command("show")
@click.argument("path", type=click.Path())
@click.option("--plot", "plot_dir", type=click.Path(), help="Also write PNG plots into this directory.")
@_FORCE
def profile_show_cmd(path, plot_dir, force):
    """Summarise a profile: c per pair and batch size, L(b, k), alpha per pair and workload, information gain.

    Example: spectune profile show my-profile --plot plots/   (my-profile: spectune calibrate ... --out my-profile)

    --plot DIR is created if needed; a PNG in it is replaced only when spectune wrote it (else an error unless
    --force); other files there are left alone. A --plot that is a file, lies under a file or is not writable
    is an error before anything is printed.
    """
    from spectune.calibration.views import plot, summary
    from spectune.outputs import target_dir
    from spectune.profile import load_profile

    if plot_dir:
        target_dir(plot_dir, "--plot")
    prof = load_profile(path)
    click.echo(summary(prof))
    for f in plot(prof, plot_dir, force=force) if plot_dir else []:
        click.echo(f"wrote {f}")


@cli.command("recommend")
@click.option("--models", help="Comma-separated models, smallest first. Default: the bundled family.")
@_setting("combine", help="Your combination (never changed by the search).")
@click.option("--workload", default="mix", show_default=True,
              help="Bundled workload or prompt file (held-out prompts validate).")
@click.option("--batch-size", type=int, default=None,
              help="Tune for this calibrated batch size only. [default: search all]")
@click.option("--pareto", is_flag=True, help="Two objectives: goodput and per-request latency (Pareto front).")
@click.option("--max-latency", type=float, default=None, help="Constraint: seconds per output token of one request.")
@click.option("--trials", type=int, default=500, show_default=True, help="Optuna trials this worker adds to the study.")
@click.option("--storage", default=None,
              help="Optuna storage URL shared by workers (e.g. postgresql://u:p@host/db). [default: sqlite in --out]")
@click.option("--study-name", default=None,
              help="Study name (workers with the same name share it). [default: from models/combination/workload]")
@click.option("--validate", "validate_n", type=int, default=0, show_default=True,
              help="Measure the N best predicted configs and standard on held-out prompts.")
@click.option("--validate-prompts", type=int, default=None,
              help="Held-out prompts per validation run. [default: 2 x batch size, >= 4]")
@click.option("--resamples", type=int, default=20, show_default=True,
              help="Re-price the top configurations over this many bootstrap resamples of the calibration prompts "
              "(P(near best): how often each is within 5 % of the best); 0 = off.")
@_setting("max_new_tokens", type=int)
@_setting("temperature", type=float)
@click.option("--profile", "profile_path", type=click.Path(), help="Use this profile instead of looking one up.")
@click.option("--no-calibrate", is_flag=True, help="Fail instead of calibrating when no profile matches.")
@click.option("--out", default="spectune-recommend", show_default=True, type=click.Path(),
              help="Directory for config.json, schedule.json and the default study.db.")
@click.option("--plot", "plot_dir", type=click.Path(), help="Write speedup-vs-gamma and Pareto-front PNGs here.")
@_setting("seed", type=int)
@click.option("--device", default="cpu", show_default=True, help="Where --validate (and a missing profile's "
              "calibration) runs; profiles are looked up for its hardware.")
@_dtype_option
@_runtime_option
@click.option("--engine", type=LOOP_ENGINES, default=None, help="Advise for this serving engine: priced on "
              "its engine profile (spectune calibrate --engine), searched over what it runs (target alone, a draft, "
              "a prompt lookup; K per batch size), --validate measured in it.")
@_engine_options
@_together_option
@_FORCE
@_PICKLE
@_gathered
def recommend_cmd(o):
    """Find the fastest configuration of your models for your traffic on this machine, from a profile.

    Example: spectune recommend --models draft-s,smollm2-135m --combine we:0.5,0.5 --validate 3 --plot plots/

    An existing --out directory is used: its config.json and schedule.json are replaced and its study.db is
    continued only when spectune wrote them (else an error before the search, unless --force); other files
    there are left alone. --plot DIR likewise replaces only PNGs spectune wrote. An --out or --plot that is a
    file, lies under a file or is not writable is an error before the search. Passwords in --storage URLs are
    never printed.

    Example: spectune recommend --engine vllm --models draft-s,smollm2-135m --validate 3
    """
    from spectune.models.bundled import DEFAULT_FAMILY
    from spectune.models.loading import allow_pickle_weights
    from spectune.api import recommend
    from spectune.tune.report import print_recommendation

    with allow_pickle_weights(o.allow_pickle):
        rec = recommend(_models(o.models) or list(DEFAULT_FAMILY), combine=o.combine, workload=o.workload,
                        batch_size=o.batch_size, pareto=o.pareto, max_latency=o.max_latency, n_trials=o.trials,
                        storage=o.storage, study_name=o.study_name, validate_n=o.validate_n,
                        validate_prompts=o.validate_prompts, resamples=o.resamples, max_new_tokens=o.max_new_tokens,
                        temperature=o.temperature,
                        profile=o.profile_path, calibrate_missing=not o.no_calibrate, out=o.out, plot_dir=o.plot_dir,
                        seed=o.seed, device=o.device, dtype=o.dtype, runtime=o.runtime, force=o.force, say=_say,
                        engine=_engine_settings(o, o.seed) if o.engine else None)
    print_recommendation(rec)


@cli.command("export")
@click.argument("config", type=click.Path())
@click.option("--engine", required=True, type=click.Choice(["vllm", "sglang", "trtllm", "hf", "llamacpp", "native"]),
              help="Serving engine to export for.")
@click.option("--engine-version", default=None, help="Engine schema version (vllm: 0.32.0, 0.25.0, or 0.6.4 for the "
              "older "
              "flat arguments; trtllm: main-2026.03, or main-2025.10 for DraftTarget with lower-bound schedule keys; "
              "llamacpp: b11434, b9596, or b4000 for --draft-max/--draft-min). [default: newest known]")
@click.option("--schedule", "schedule_path", type=click.Path(), help="schedule.json of spectune recommend. "
              "[default: the one beside CONFIG]")
@click.option("--profile", "profile_path", type=click.Path(), help="Profile for the predicted speedups. "
              "[default: the one recorded in CONFIG or found for its models]")
@click.option("--model-path", "model_paths", multiple=True, metavar="NAME=PATH", help="Where model NAME of the config "
              "lives on the serving machine (repeatable).")
@click.option("--out", type=click.Path(), help="Write the engine artifact to this file (atomically).")
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON object.")
@click.option("--check", is_flag=True, help="Run the artifact in its engine on held-out prompts and print measured "
              "vs predicted goodput: hf (HF's generate) or vllm (started from the artifact, or --engine-url; proves "
              "from its counters and log that it ran the artifact's method and K at each batch size).")
@click.option("--workload", default=None, help="Acceptance traces for the predictions and, with --check, the "
              "held-out prompts. [default: the schedule's, else mix]")
@click.option("--prompts", type=int, default=4, show_default=True, help="--check: held-out prompts per run.")
@click.option("--repeats", type=int, default=3, show_default=True, help="--check: interleaved repeats.")
@_engine_options
@_gathered
def export_cmd(o):
    """Translate a spectune config (and its per-batch-size schedule) for a serving engine.

    Example: spectune export spectune-recommend/config.json --engine vllm --out speculative_config.json

    Example: spectune export spectune-recommend/config.json --engine vllm --check --engine-args "--enforce-eager"

    What the engine cannot express (CoS, ensembles, contrastive decoding, SV, n models) is said plainly, and
    the nearest expressible configuration (target-only SD) is exported with its predicted speedup. With
    --check the exported artifact runs in its engine (hf, vllm, llamacpp) and is measured against the prediction;
    for vllm and llamacpp the check fails (exit 2) unless the engine's log and counters show the artifact's method
    and K at every batch size run.
    """
    import json

    from spectune.errors import ConfigError, EngineError
    from spectune.artifacts import check_out, export, local_model_paths, parse_overrides, write_out

    from spectune.engines import ENGINES

    if o.check and o.engine not in ("hf", *ENGINES):
        raise ConfigError(f"--check runs the artifact in its engine: hf, {', '.join(ENGINES)}; not {o.engine}")
    if o.out:
        check_out(o.out, o.force)
    overrides = parse_overrides(o.model_paths)
    if o.check and o.engine in ENGINES and not o.engine_url:  # an engine started here serves the local models from here
        from spectune.config import DecodeConfig

        overrides = local_model_paths(DecodeConfig.load(o.config).models, overrides, o.engine, o.engine_bin)
    exp = export(o.config, o.engine, engine_version=o.engine_version, schedule=o.schedule_path, profile=o.profile_path,
                 model_paths=overrides, workload=o.workload)
    if o.out:
        write_out(o.out, exp.text(), o.force)
        click.echo(f"wrote {o.out}", err=True)
    res = None
    if o.check and o.engine == "hf":
        from spectune.bench.hf_check import check_hf_export

        res = check_hf_export(exp, workload=o.workload or "mix", prompts=o.prompts, repeats=o.repeats,
                              say=lambda s: click.echo(s, err=True))
    elif o.check:
        from spectune.bench.engine_check import CheckSettings, check_engine_export

        settings = _engine_settings(o)
        res = check_engine_export(exp, settings, CheckSettings(o.workload or "mix", o.prompts, o.repeats),
                                  say=lambda s: click.echo(s, err=True))
    if o.as_json:
        click.echo(json.dumps({**exp.to_dict(), **({"check": res.to_dict()} if res else {})}, indent=2))
    else:
        click.echo(exp.report() + (f"\n{res.report()}" if res else ""))
    if res is not None and hasattr(res, "failures") and res.failures():
        raise EngineError(f"{o.engine} did not run the artifact as exported: {'; '.join(res.failures())}")


@cli.command("bench")
@click.option("--models", help="Comma-separated models, smallest first. Default: draft-s,smollm2-135m.")
@_setting("combine", help="target | we:W1,W2,... | cd:MU")
@click.option("--methods", default="standard,sd,naive-cos,cos", show_default=True, help="Methods of the grid.")
@click.option("--gammas", default="1,2,3,4", show_default=True, help="Proposal lengths of the first model.")
@click.option("--gamma-rest", default="1", show_default=True,
              help="Proposal lengths of the other models (cos: gamma_p).")
@click.option("--batch-sizes", default="1", show_default=True)
@click.option("--temperatures", default="0", show_default=True,
              help="Comma list: e.g. 0,0.8 measures greedy and sampling.")
@click.option("--space", "whole_space", is_flag=True, help="Measure the whole search space of recommend (slow).")
@click.option("--proposer", "proposers", multiple=True, help="Also measure this proposer (repeatable): "
              "ngram:N_MIN,N_MAX runs sd over the models of r (the target alone for target) with k = each of --gammas; "
              "ngram+model:N_MIN,N_MAX,K runs sd over the models, looking up K tokens and drafting each of --gammas "
              "where the lookup misses (fixed and each --policy).")
@click.option("--policy", "policies", multiple=True, help="Also measure this draft-length policy (repeatable: "
              "heuristic, confidence:T) for each of --methods sd, naive-cos, cos and each of --gammas; with --engine "
              "llamacpp: confidence:T, its --spec-draft-p-min, for the draft at each of --gammas.")
@click.option("--workload", default="mix", show_default=True, help="Its held-out prompts are measured.")
@click.option("--prompts", type=int, default=2, show_default=True,
              help="Held-out prompts per run (at least the batch size).")
@click.option("--max-new-tokens", type=int, default=32, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True, help="Interleaved repeats (medians reported).")
@click.option("--hf/--no-hf", default=True, show_default=True,
              help="HF assisted generation and HF generate of the target side by side.")
@click.option("--validate-advice", is_flag=True,
              help="Calibrate/recommend, then measure the grid: regret, MAPE, Spearman.")
@click.option("--trials", type=int, default=300, show_default=True, help="Optuna trials for --validate-advice.")
@click.option("--advice-validate", "advice_validate", type=int, default=0, show_default=True,
              help="--engine --validate-advice: recommend --validate N, its N best measured in the engine on the "
              "workload's calibration prompts (the grid runs the held-out ones) and the pick the measured best.")
@click.option("--advice-confirm", "advice_confirm", type=int, default=0, show_default=True,
              help="--engine --validate-advice: after the grid, measure each cell's pick, the grid's 3 fastest and "
              "the target alone again in N fresh rounds and report the regret on those rounds (the grid's best is "
              "picked on the repeats it is measured on).")
@click.option("--profile", "profile_path", type=click.Path(),
              help="Profile for sv and --validate-advice. [default: found or calibrated]")
@click.option("--out", default="spectune-bench", show_default=True, type=click.Path(),
              help="rows.csv, summary.csv (and advice.csv) go here; with --engine engine-rows.csv, engine-summary.csv "
              "(and engine-advice.csv, engine-validation.csv, engine-confirm.csv).")
@click.option("--resume", is_flag=True, help="Skip runs already in OUT/rows.csv.")
@click.option("--plot", "plot_dir", type=click.Path(), help="Write PNG plots here.")
@click.option("--device", default="cpu", show_default=True, help="Where the models run (spectune's runs and HF's).")
@_dtype_option
@_runtime_option
@click.option("--engine", type=LOOP_ENGINES, default=None, help="Measure in this serving engine, beside "
              "the runtime and interleaved with it: the target alone, the first model drafting each of --gammas, "
              "each --proposer lookup at each of --gammas, and each --pick.")
@click.option("--pick", "picks", multiple=True, type=click.Path(), help="--engine: also measure this config.json "
              "(e.g. recommend's pick), as exported (repeatable).")
@click.option("--engine-only", is_flag=True, help="--engine: leave out spectune's runtime rows (by default each "
              "configuration also runs in the runtime, repeat by repeat).")
@_engine_options
@_together_option
@_FORCE
@_PICKLE
@_gathered
def bench_cmd(o):
    """Measure configurations on the runtime decoder beside the target alone and HF assisted generation.

    Example: spectune bench --models draft-s,smollm2-135m --gammas 1,2,4 --batch-sizes 1,4 --plot plots/

    Reports goodput (median, spread over interleaved repeats), speedup vs standard and vs the target alone,
    accepted length, calls per token, and the decoder's efficiency against Thm 3.1/3.6 at the alpha and c
    measured in the same run. --validate-advice also reports regret, MAPE and Spearman of the advice.

    An existing --out directory is used: its rows.csv, summary.csv (advice.csv, predicted_vs_measured.csv,
    profile/, advice/) are replaced only when spectune wrote them (else an error before anything is measured,
    unless --force); --resume continues its rows.csv. --plot DIR replaces only PNGs spectune wrote. An --out or
    --plot that is a file, lies under a file or is not writable is an error before anything is measured.
    """
    from spectune import checks

    for flag, value in (("--advice-validate", o.advice_validate), ("--advice-confirm", o.advice_confirm)):
        if value and not (o.engine and o.validate_advice):
            from spectune.errors import ConfigError

            raise ConfigError(f"{flag} needs --engine and --validate-advice (the runtime's advice is validated by "
                              "bench --validate-advice itself)")
    if o.engine:
        checks.integer(o.advice_validate, "--advice-validate", lo=0, hi=checks.MAX_COUNT)
        checks.integer(o.advice_confirm, "--advice-confirm", lo=0, hi=checks.MAX_COUNT)
        return _bench_engine(o, _engine_settings(o))
    from spectune.bench import BenchSpec, RunSettings, bench, validate_advice as _advice
    from spectune.bench.table import plot, print_table
    from spectune.models.loading import allow_pickle_weights
    from spectune.outputs import target_dir

    ints = checks.integers
    spec = BenchSpec(models=tuple(_models(o.models) or ["draft-s", "smollm2-135m"]), combine=o.combine,
                     methods=tuple(_split(o.methods) or ()), gammas=ints(o.gammas, "gammas", hi=checks.MAX_COUNT),
                     gamma_rest=ints(o.gamma_rest, "gamma-rest", hi=checks.MAX_COUNT),
                     batch_sizes=ints(o.batch_sizes, "batch sizes", hi=checks.MAX_BATCH),
                     temperatures=_numbers(o.temperatures, "temperatures"), max_new_tokens=o.max_new_tokens, hf=o.hf,
                     proposers=o.proposers, policies=o.policies)
    if o.whole_space:
        spec = spec.with_search_space()
    if o.plot_dir:
        target_dir(o.plot_dir, "--plot")
    checks.integer(o.trials, "trials", lo=1, hi=checks.MAX_TRIALS)
    run = RunSettings(o.workload, o.prompts, o.repeats, dtype=o.dtype, runtime=o.runtime, device=o.device)
    with allow_pickle_weights(o.allow_pickle):
        if o.validate_advice:
            adv = _advice(spec, run, profile=o.profile_path, trials=o.trials, out=o.out, force=o.force, say=_say)
            res = adv.bench
        else:
            res = bench(spec, run, out=o.out, resume=o.resume, profile=o.profile_path, force=o.force, say=_say)
    print_table(res.summary)
    if o.validate_advice:
        click.echo(adv.per_batch.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        click.echo(f"advice: regret {adv.regret:.3f}, MAPE {adv.mape:.1%} (of speedups {adv.mape_speedup:.1%}), "
                   f"Spearman {adv.spearman:.3f} (profile {adv.profile_path})")
        if adv.hf_rows is not None:
            click.echo(f"advice executed by HF (batch 1): regret {adv.hf_regret:.3f}, MAPE {adv.hf_mape:.1%} "
                       f"(spectune's cost model), {adv.hf_mape_priced:.1%} (HF's step priced)")
    for f in [*res.files, *(plot(res.summary, o.plot_dir, force=o.force) if o.plot_dir else [])]:
        click.echo(f"wrote {f}", err=True)


def _engine_policies(policies, engine):
    """The draft policies beside fixed that ``bench --engine`` measures: confidence:P, where the engine stops a
    draft on the draft's confidence (llama.cpp's p-min)."""
    from spectune.decoding.policy import ConfidencePolicy, parse_policy
    from spectune.engines import engine_class
    from spectune.errors import ConfigError

    out = tuple(p for p in dict.fromkeys(policies) if p != "fixed")
    for p in out:
        if not (engine_class(engine).p_min and isinstance(parse_policy(p), ConfidencePolicy)):
            raise ConfigError(f"bench --engine {engine} measures the policies it runs: --policy '{p}' is not one "
                              f"(llama.cpp: confidence:P, its --spec-draft-p-min)")
    return out


def _bench_engine(o, settings):
    from spectune import checks
    from spectune.bench.engine_runs import EngineBenchSpec, run_engine_bench
    from spectune.bench.runner import claim_outputs
    from spectune.config import DecodeConfig
    from spectune.decoding.proposers import proposer_kind

    from spectune.engines import engine_class

    advice = (o.profile_path, o.trials) if o.validate_advice else None
    kinds = {"ngram": "ngram:N_MIN,N_MAX"}
    if "sd-ngram+model" in engine_class(settings.name).methods:
        kinds["ngram+model"] = "ngram+model:N_MIN,N_MAX,K"
    lookups = tuple(p for p in o.proposers if proposer_kind(p) in kinds)
    if len(lookups) != len(o.proposers):
        from spectune.errors import ConfigError

        raise ConfigError(f"bench --engine measures what {settings.name} runs: --proposer "
                          f"{' or '.join(kinds.values())} only")
    spec = EngineBenchSpec(tuple(_models(o.models) or ["draft-s", "smollm2-135m"]),
                           checks.integers(o.gammas, "gammas", hi=checks.MAX_COUNT), lookups,
                           checks.integers(o.batch_sizes, "batch sizes", hi=checks.MAX_BATCH), o.max_new_tokens,
                           o.workload, o.prompts, o.repeats, tuple(DecodeConfig.load(p) for p in o.picks),
                           ("fixed",) + _engine_policies(o.policies, settings.name))
    claim_outputs(Path(o.out) if o.out else None, o.force, ("engine-rows.csv", "engine-summary.csv",
                                                            "engine-advice.csv", "engine-validation.csv",
                                                            "engine-confirm.csv"))
    advised = None
    if advice:
        from dataclasses import replace

        from spectune.bench.engine_advice import engine_picks

        advised = engine_picks(spec, settings, advice[0], advice[1], say=_say, validate=o.advice_validate,
                               out=o.out)
        spec = replace(spec, picks=spec.picks + tuple(advised.values()))
    rows, summary = run_engine_bench(spec, settings, out=o.out, dtype=o.dtype, say=_say, runtime=not o.engine_only)
    click.echo(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if advised:
        from spectune.bench.engine_advice import advice_table, save, summary_line

        configs = spec.configs()
        table = advice_table(rows, advised, configs, advice[0], settings.name)
        if o.out:  # kept should the fresh rounds fail
            save(table, Path(o.out) / "engine-advice.csv")
        if o.advice_confirm:
            from spectune.bench.engine_advice import confirm

            table = confirm(table, rows, configs, settings, spec.held_out(), o.advice_confirm,
                            n_prompts=spec.prompts, out=o.out, say=_say)
            if o.out:
                save(table, Path(o.out) / "engine-advice.csv")
        click.echo(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        click.echo(summary_line(table))


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """The CLI prints a warning on one line, without the source line Python's format adds (the library keeps it)."""
    return f"warning ({category.__name__}): {message}\n"


def main():
    import signal
    import warnings

    warnings.formatwarning = _one_line_warning
    # SIGTERM unwinds like Ctrl-C: every ``with`` closes, so an engine spectune started is stopped with it
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    cli(prog_name="spectune")
