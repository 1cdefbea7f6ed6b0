"""Usage: python lookup_rule_check.py ENGINE_PROFILE LLAMA_SERVER WORKLOADS (comma-separated).

Does the simulator's llama.cpp lookup rule match llama.cpp's ngram-simple on the same prompts? Calibration
prompts of a workload at b = 1, 48 tokens each: the engine's tokens per step vs CostModel's tokens per round."""
import sys
from spectune.config import DecodeConfig
from spectune.decoder import encode_workload
from spectune.engines import EngineSettings, LlamaCppEngine, open_engine
from spectune.models import load_tokenizer
from spectune.profile import load_profile
from spectune.tune import CostModel

prof = load_profile(sys.argv[1], check_hardware=False)  # the llama.cpp engine profile
target = "smollm2-135m"
tok = load_tokenizer(target)
exe = sys.argv[2]
for w in sys.argv[3].split(","):
    prompts = encode_workload(tok, w, "calibration", 20)
    for n_max, k in [(2, 8), (3, 4), (3, 8)]:
        spec = f"ngram:1,{n_max}"
        cfg = DecodeConfig(models=(target,), method="sd", gamma=(k,), proposer=spec, batch_size=1, max_new_tokens=48)
        cm = CostModel(prof, w, max_new_tokens=48)
        sim = cm.sim_counts(cfg).tokens_per_round
        flags = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(n_max),
                 "--spec-ngram-simple-size-m", str(k)]
        st = EngineSettings("llamacpp", exe, log_dir="/tmp/emu-logs", args=("-t", "2"))
        with open_engine(st, LlamaCppEngine.model_file(target, exe), flags) as eng:
            d = eng.drive(prompts, 1, 48)
        c = d.counters
        steps = c.generated - c.requests - c.accepted
        print(f"{w} {spec} K={k}: engine {(c.generated - c.requests) / max(steps, 1):.3f} tokens/step "
              f"(drafts {c.drafts:.0f}, draft tokens {c.draft_tokens:.0f}, accepted {c.accepted:.0f}, "
              f"steps {steps:.0f}); simulator {sim:.3f} tokens/round", flush=True)
