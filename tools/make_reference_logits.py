#!/usr/bin/env python3
"""Independent reference logits for the default model, from Hugging Face transformers.

transformers loads the same GGUF (its own GGUF reader and dequantizer, weights in fp32, its own
llama q/k un-permutation) and its own tokenizer converted from the GGUF metadata. We record, per
prompt: the token ids, the full last-position logits, the argmax at every position, and the top-20
ids and logits at several positions. The C++ test (tests/test_reference_logits.cpp) runs the same
ids through our engine and compares.

Run once (CPU is fine, about a minute):
  python -m venv .venv-ref && .venv-ref/bin/pip install torch transformers gguf safetensors accelerate
  .venv-ref/bin/python tools/make_reference_logits.py --gguf .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --out tests/data/smollm2_reference_logits.safetensors
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is 17 times 23?<|im_end|>\n<|im_start|>assistant\n",
    "Unicode test: naïve café, 東京, Ελληνικά, emoji 🚀🔥 and numbers 3.14159, 2024-11-29.",
]


def long_prompt():
    # A long free-prose prompt from a file every Debian system has (the GPL-3 text).
    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
        text = f.read()
    return text[:6000]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    d, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    prompts = PROMPTS + [long_prompt()]
    tensors, meta = {}, {"transformers": transformers.__version__, "torch": torch.__version__, "prompts": []}
    for i, text in enumerate(prompts):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids], dtype=torch.long)
        logits = model(x).logits[0].float().numpy()  # (T, V)
        T = logits.shape[0]
        positions = sorted(set([0, T // 3, T // 2, (2 * T) // 3, T - 1]))
        top_ids = np.argsort(-logits[positions], axis=1, kind="stable")[:, :20].astype(np.int32)
        top_vals = np.take_along_axis(logits[positions], top_ids, axis=1).astype(np.float32)
        tensors[f"p{i}.ids"] = np.asarray(ids, dtype=np.int32)
        tensors[f"p{i}.last_logits"] = logits[-1].astype(np.float32)
        tensors[f"p{i}.argmax"] = logits.argmax(axis=1).astype(np.int32)
        tensors[f"p{i}.top_positions"] = np.asarray(positions, dtype=np.int32)
        tensors[f"p{i}.top_ids"] = top_ids
        tensors[f"p{i}.top_logits"] = top_vals
        # Margin between the best and second-best logit per position, so the test can tell a real
        # argmax disagreement from a near-tie.
        part = np.sort(logits, axis=1)
        tensors[f"p{i}.argmax_margin"] = (part[:, -1] - part[:, -2]).astype(np.float32)
        meta["prompts"].append({"text": text, "tokens": len(ids)})
        print(f"prompt {i}: {len(ids)} tokens, argmax(last) = {int(logits[-1].argmax())} "
              f"{tok.decode([int(logits[-1].argmax())])!r}")
    meta["num_prompts"] = len(prompts)
    save_file(tensors, args.out, metadata={"info": json.dumps(meta)})


if __name__ == "__main__":
    main()
