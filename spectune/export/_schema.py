"""Engine facts as data: per engine and version, every key or flag an export may emit, the values spectune
writes for enumerated keys, what the per-batch-size schedule means, what the version rejects, and where
each key is read -- with the upstream file and release the facts were read from. The renderers take their
spellings from here (``names``, ``values``, ``schedule``); ``violations`` checks every export against it, so a
key an engine does not know can never reach a user's file silently.

Sources (read 2026-11; the release / commit of each is in ``EngineSchema.release``):
  * vLLM 0.25.0: ``SpeculativeConfig`` (vllm/config/speculative.py); the schedule
    ``num_speculative_tokens_per_batch_size`` is expanded by ``build_dynamic_sd_schedule_lookup``
    (vllm/v1/spec_decode/dynamic/utils.py), which clamps every scheduled K to ``num_speculative_tokens``.
  * vLLM 0.6.4: the flat engine arguments of vllm/engine/arg_utils.py.
  * SGLang: python/sglang/srt/server_args.py, ``--speculative-algorithm STANDALONE`` (PR #10090).
  * TensorRT-LLM: tensorrt_llm/llmapi/llm_args.py. main (2026-03 on): ``DraftTargetDecodingConfig.decoding_type:
    Literal["Draft_Target"]``, the YAML merged into the LLM arguments directly, ``draft_len_schedule`` keys are
    batch-size upper bounds (PR #10860, 2026-03-13; draft-target from PR #12262), acceptance gate
    ``acceptance_rate_window_size`` / ``acceptance_rate_threshold``. 2025-10 (after PR #8194, before the
    pydantic discriminator): ``DecodingBaseConfig.from_dict`` dispatches on ``decoding_type: DraftTarget``,
    ``draft_len_schedule`` keys are lower bounds and must include 1, gate ``acceptance_window`` /
    ``acceptance_length_threshold``.
  * transformers 5.23.0: ``AssistedCandidateGenerator.__init__`` (generation/candidate_generator.py) reads
    ``num_assistant_tokens``, ``num_assistant_tokens_schedule`` and ``assistant_confidence_threshold`` from
    ``assistant_model.generation_config``, never from the target's; unset (None) they become 20, "constant"
    and 0.4 (``GenerationConfig._get_default_generation_params``); a threshold of 0.0 disables the confidence
    stop (``ConfidenceCriteria`` needs > 0) and its ROC re-tuning (needs a truthy threshold).
  * llama.cpp ``llama-server`` (common/arg.cpp): current builds take ``--spec-type``, ``--spec-draft-model`` /
    ``-md``, ``--spec-draft-n-max``, ``--spec-draft-n-min``, ``--spec-draft-p-min``; ``--draft`` / ``--draft-n`` /
    ``--draft-max`` and ``--draft-min`` / ``--draft-n-min`` remain only to fail with "the argument has been
    removed". b4000-era builds take ``--draft-max`` / ``--draft-min`` / ``--draft-p-min``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# what a per-batch-size schedule means in each form (``EngineSchema.schedule``)
SCHEDULE_FORMS = {
    "none": "one K at every batch size",
    "ranges": "inclusive [batch_lo, batch_hi, K] ranges from batch 1, K = 0 = no drafting; every K is clamped to "
              "num_speculative_tokens; batch sizes above the last range keep its K",
    "disable-above": "one K; speculation off above speculative_disable_by_batch_size",
    "upper-bounds": "{N: K}: batch sizes above the previous key and up to N use K; above the largest key speculation "
                    "is off; the smallest key's K must equal max_draft_len; exclusive with max_concurrency",
    "lower-bounds": "{N: K}: batch sizes from N up to the next key use K; the last K holds for every larger batch; "
                    "key 1 must be present with K = max_draft_len",
}


@dataclass(frozen=True, eq=False)
class EngineSchema:
    engine: str
    version: str  # the engine version the facts hold for ("main-YYYY.MM": its main branch then)
    keys: frozenset[str]  # config keys (JSON/YAML engines) or command-line flags (CLI engines)
    source: str  # upstream repository and file(s) read
    release: str = ""  # the release / commit / pull request the facts were read at
    values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # enumerated key -> values spectune may write
    schedule: str = "none"  # a SCHEDULE_FORMS key
    removed: frozenset[str] = frozenset()  # keys / flags this version rejects
    sections: Mapping[str, frozenset[str]] = field(default_factory=dict)  # artifact section -> keys read there
    names: Mapping[str, str] = field(default_factory=dict)  # role -> this version's spelling (for the renderers)


def violations(schema: EngineSchema, keys_by_section: Mapping[str, set[str]], values: list[tuple[str, Any]]
               ) -> list[str]:
    """What an artifact does wrong against ``schema``: keys outside the version's keys (per section where the
    engine reads keys from different places), removed flags, enumerated values the version does not take.
    ``keys_by_section``: {"": keys} for a flat artifact; ``values``: (key, value) pairs of scalar entries."""
    out = []
    for section, keys in keys_by_section.items():
        allowed = schema.sections.get(section, schema.keys) if schema.sections else schema.keys
        if schema.sections and section not in schema.sections:
            out.append(f"section '{section}' is not one of {sorted(schema.sections)}")
        out += [f"'{k}' is not a key of {section or schema.engine}" for k in sorted(keys - allowed)]
        out += [f"'{k}' was removed in this version" for k in sorted(keys & schema.removed)]
    for k, v in values:
        if k in schema.values and v not in schema.values[k]:
            out.append(f"'{k}' = {v!r}: this version takes {list(schema.values[k])}")
    return out


def _s(engine: str, version: str, keys: set[str], source: str, release: str, **kw: Any) -> EngineSchema:
    return EngineSchema(engine, version, frozenset(keys), source, release, **kw)


_TRT_FILE = "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py"
_LLAMA_FILE = "ggml-org/llama.cpp common/arg.cpp"
_SAMPLING_FLAGS = {"--temp", "--top-k", "--top-p", "-np"}

SCHEMAS: dict[str, dict[str, EngineSchema]] = {
    "vllm": {
        "0.25.0": _s("vllm", "0.25.0", {
            "method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
            "draft_tensor_parallel_size", "quantization", "max_model_len", "revision", "code_revision",
            "enforce_eager", "disable_padded_drafter_batch", "draft_sample_method", "rejection_sample_method",
            "prompt_lookup_max", "prompt_lookup_min", "kv_cache_dtype", "attention_backend",
        }, "vllm-project/vllm vllm/config/speculative.py (SpeculativeConfig), "
           "vllm/v1/spec_decode/dynamic/utils.py (build_dynamic_sd_schedule_lookup)",
            "0.25.0; schedule lookup read at commit 14b450c", values={"method": ("draft_model",)},
            schedule="ranges"),
        "0.6.4": _s("vllm", "0.6.4", {
            "speculative_model", "num_speculative_tokens", "speculative_disable_by_batch_size",
            "speculative_draft_tensor_parallel_size", "speculative_model_quantization",
            "speculative_max_model_len", "ngram_prompt_lookup_max", "ngram_prompt_lookup_min",
            "spec_decoding_acceptance_method", "disable_logprobs_during_spec_decoding",
        }, "vllm-project/vllm vllm/engine/arg_utils.py (EngineArgs)", "v0.6.4", schedule="disable-above"),
    },
    "sglang": {
        "main-2025.09": _s("sglang", "main-2025.09", {
            "--model-path", "--speculative-algorithm", "--speculative-draft-model-path",
            "--speculative-draft-model-revision", "--speculative-num-steps", "--speculative-eagle-topk",
            "--speculative-num-draft-tokens", "--speculative-accept-threshold-single",
            "--speculative-accept-threshold-acc", "--max-running-requests",
        }, "sgl-project/sglang python/sglang/srt/server_args.py", "main after PR #10090 (STANDALONE, 2025-09)",
            values={"--speculative-algorithm": ("STANDALONE",), "--speculative-eagle-topk": ("1",)}),
    },
    "trtllm": {
        "main-2026.03": _s("trtllm", "main-2026.03", {
            "speculative_config", "decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model",
            "max_concurrency", "draft_len_schedule", "load_format", "acceptance_rate_window_size",
            "acceptance_rate_threshold", "use_rejection_sampling", "allow_advanced_sampling",
            "advanced_sampling_mode", "enable_penalty", "disable_overlap_scheduler",
        }, f"{_TRT_FILE} (DecodingBaseConfig, DraftTargetDecodingConfig)",
            "main after PR #10860 (2026-03-13) and #12262; read at commit 0004396",
            values={"decoding_type": ("Draft_Target",)}, schedule="upper-bounds",
            removed=frozenset({"acceptance_window", "acceptance_length_threshold"})),
        "main-2025.10": _s("trtllm", "main-2025.10", {
            "speculative_config", "decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model",
            "max_concurrency", "draft_len_schedule", "load_format", "acceptance_window",
            "acceptance_length_threshold", "disable_overlap_scheduler",
        }, f"{_TRT_FILE} (DecodingBaseConfig.from_dict, DraftTargetDecodingConfig)",
            "main after PR #8194 (dynamic draft length stage 1, 2025-10), before PR #10860",
            values={"decoding_type": ("DraftTarget",)}, schedule="lower-bounds"),
    },
    "hf": {
        "5.23.0": _s("hf", "5.23.0", set(), "huggingface/transformers src/transformers/generation/"
                     "candidate_generator.py (AssistedCandidateGenerator.__init__), configuration_utils.py "
                     "(GenerationConfig)", "v5.23.0 (installed)", sections={
                         "target_generation_config": frozenset({
                             "do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "transformers_version"}),
                         "assistant_generation_config": frozenset({
                             "num_assistant_tokens", "num_assistant_tokens_schedule",
                             "assistant_confidence_threshold", "transformers_version"})},
                     values={"num_assistant_tokens_schedule": ("constant", "heuristic", "heuristic_transient")}),
    },
    "llamacpp": {
        "b9596": _s("llamacpp", "b9596", {
            "-m", "-md", "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
            *_SAMPLING_FLAGS}, f"{_LLAMA_FILE} (speculative parameters, removed params)",
            "builds after the --spec-draft-* rename (~b9596); read at commit 0017d6f",
            values={"--spec-type": ("draft-simple",)},
            removed=frozenset({"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"}),
            names={"draft_max": "--spec-draft-n-max", "draft_min": "--spec-draft-n-min",
                   "p_min": "--spec-draft-p-min", "spec_type": "--spec-type"}),
        "b4000": _s("llamacpp", "b4000", {"-m", "-md", "--draft-max", "--draft-min", "--draft-p-min", *_SAMPLING_FLAGS},
                    f"{_LLAMA_FILE} (--draft-max / --draft-min)", "b4000-era builds, before the --spec-draft-* rename",
                    names={"draft_max": "--draft-max", "draft_min": "--draft-min", "p_min": "--draft-p-min"}),
    },
    "native": {
        "spectune.decode_config/1": _s("native", "spectune.decode_config/1", {
            "schema", "models", "method", "combine", "gamma", "temperature", "top_k", "top_p", "seed",
            "max_new_tokens", "batch_size", "dtype", "extra", "proposer", "policy",
        }, "spectune/config.py (DecodeConfig)", "this spectune"),
    },
}

DEFAULT_VERSION = {"vllm": "0.25.0", "sglang": "main-2025.09", "trtllm": "main-2026.03", "hf": "5.23.0",
                   "llamacpp": "b9596", "native": "spectune.decode_config/1"}
ENGINES = tuple(SCHEMAS)
