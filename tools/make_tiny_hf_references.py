#!/usr/bin/env python3
"""Tiny random Llama, Qwen2 and Qwen3 checkpoints with reference logits from HF transformers.

Each model is built by transformers itself from a small config (seeded), saved with
save_pretrained (config.json + model.safetensors), and run in fp32 on a fixed id sequence. The C++
test (tests/test_hf_import.cpp) loads the directory with our HF importer and compares its logits.
This covers what SmolLM2 does not: untied lm_head, q/k/v biases (Qwen2), per-head q/k RMSNorm and
an explicit head_dim != hidden/heads (Qwen3).

  .venv/bin/python tools/make_tiny_hf_references.py --out tests/data/tiny_hf
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

COMMON = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, hidden_act="silu")


def build(kind):
    if kind == "llama":
        cfg = transformers.LlamaConfig(**COMMON, rope_theta=10000.0, tie_word_embeddings=False)
        return transformers.LlamaForCausalLM(cfg)
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(**COMMON, rope_theta=1000000.0, tie_word_embeddings=True)
        return transformers.Qwen2ForCausalLM(cfg)
    if kind == "qwen3":
        cfg = transformers.Qwen3Config(**COMMON, head_dim=16, rope_theta=1000000.0, tie_word_embeddings=False,
                                       attention_bias=False)
        return transformers.Qwen3ForCausalLM(cfg)
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    rng = np.random.default_rng(7)
    ids = rng.integers(0, COMMON["vocab_size"], size=40).astype(np.int64)
    for i, kind in enumerate(["llama", "qwen2", "qwen3"]):
        torch.manual_seed(100 + i)
        model = build(kind).float().eval()
        # Random init leaves norms at 1 and biases at 0: perturb them so they are really tested.
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(args.out, kind)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        logits = model(torch.tensor([ids])).logits[0].numpy().astype(np.float32)
        save_file({"ids": ids.astype(np.int32), "logits": logits}, os.path.join(d, "reference_logits.safetensors"),
                  metadata={"transformers": transformers.__version__, "torch": torch.__version__})
        print(kind, "params", sum(p.numel() for p in model.parameters()), "files", sorted(os.listdir(d)))


if __name__ == "__main__":
    main()
