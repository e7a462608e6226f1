#!/usr/bin/env bash
# CPU training-step throughput: HydraHead vs PyTorch eager (HF transformers LlamaForCausalLM, fp32)
# on the same model shapes, same machine, same run. PyTorch comes from PyPI in a separate venv
# (outside the project's dependencies):  TORCH_PY=/path/to/venv/bin/python bench/train_vs_torch.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
: "${TORCH_PY:?set TORCH_PY to a python with torch and transformers}"
T="$(nproc)"
B="$ROOT/build/bench_train_step"
[ -x "$B" ] || { echo "build first: cmake --build build --target bench_train_step" >&2; exit 1; }
MODEL="${HYDRA_MODEL:-$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
ours_tiny="$("$B" --preset tiny-cpu --threads "$T" --steps 5)"
theirs_tiny="$("$TORCH_PY" "$ROOT/tools/torch_train_step_bench.py" --name tiny-cpu --threads "$T" --steps 5)"
ours_smol="$("$B" --model "$MODEL" --batch 1 --seq 256 --threads "$T" --steps 5)"
theirs_smol="$("$TORCH_PY" "$ROOT/tools/torch_train_step_bench.py" --name SmolLM2-135M --hidden 576 --layers 30 \
  --heads 9 --kv-heads 3 --ffn 1536 --vocab 49152 --batch 1 --seq 256 --threads "$T" --steps 5)"
python3 - "$ours_tiny" "$theirs_tiny" "$ours_smol" "$theirs_smol" <<'PY'
import json, sys
rows = [json.loads(x) for x in sys.argv[1:]]
print("| model | params | batch x seq | threads | hydra fwd+bwd tok/s | PyTorch eager tok/s | ratio |")
print("|---|---|---|---|---|---|---|")
for ours, theirs in ((rows[0], rows[1]), (rows[2], rows[3])):
    r = ours["fwd_bwd_tokens_per_s"] / theirs["fwd_bwd_tokens_per_s"]
    print(f"| {theirs['model']} | {ours['params']/1e6:.1f}M | {ours['batch']}x{ours['seq']} | {ours['threads']} | "
          f"{ours['fwd_bwd_tokens_per_s']:.0f} | {theirs['fwd_bwd_tokens_per_s']:.0f} (torch {theirs['torch']}) | {r:.2f} |")
PY
