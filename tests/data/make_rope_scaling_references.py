#!/usr/bin/env python3
"""Reference data for RoPE scaling (src/model/rope_scaling.*) from Hugging Face transformers.

1. rope_scaling/rotary_reference.json: for each case (one RoPE type and its parameters) the
   transformers LlamaRotaryEmbedding's inv_freq, attention_scaling and cos/sin (both already multiplied
   by attention_scaling, as transformers returns them) at chosen positions of one forward over positions
   0..seq_len-1 (dynamic NTK reads seq_len). Read by tests/test_rope_scaling.cpp.
2. tiny_hf/llama3: a tiny random Llama-3-style model (rope_scaling type llama3, head_dim 64 so the GPU
   kernels take it too) saved by transformers, and reference_logits.safetensors with its logits in fp32
   for 64 tokens, plus the logits of the same weights under the configs in rope_variants.json (linear,
   dynamic, yarn) and with the rotation replaced by the identity (NoPE), read by tests/test_rope_scaling.cpp
   and tests/gpu.

  python3 tests/data/make_rope_scaling_references.py   (CPU torch + transformers; run from the repo root)
"""
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))

# name, head_dim, rope_theta, max_position_embeddings, rope_parameters (without rope_theta), seq_len
CASES = [
    ("default", 64, 10000.0, 256, {"rope_type": "default"}, 200),
    ("linear", 64, 10000.0, 256, {"rope_type": "linear", "factor": 4.0}, 200),
    ("dynamic_within", 64, 10000.0, 256, {"rope_type": "dynamic", "factor": 4.0}, 200),
    ("dynamic_beyond", 64, 10000.0, 64, {"rope_type": "dynamic", "factor": 4.0}, 200),
    ("dynamic_beyond_128", 128, 500000.0, 100, {"rope_type": "dynamic", "factor": 2.0}, 257),
    ("yarn", 64, 10000.0, 256, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, 200),
    ("yarn_params", 128, 1000000.0, 131072,
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16.0,
      "beta_slow": 2.0, "attention_factor": 1.25, "truncate": False}, 200),
    ("yarn_mscale", 64, 10000.0, 1024,
     {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 128, "mscale": 0.707,
      "mscale_all_dim": 1.0}, 200),
    ("yarn_no_original", 64, 10000.0, 512, {"rope_type": "yarn", "factor": 2.0}, 200),
    ("llama3", 64, 10000.0, 256,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}, 200),
    ("llama3_1", 128, 500000.0, 131072,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 200),
]
POSITIONS = [0, 1, 5, 31, 63, 100, 150, 199]


def g9(v):
    """float32 values to 9 significant digits (enough to give them back exactly), keeping the file small."""
    return float(f"{float(v):.9g}")


def rotary_cases():
    out = []
    for name, head_dim, theta, max_pos, params, seq_len in CASES:
        rp = dict(params, rope_theta=theta)
        cfg = transformers.LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                                       max_position_embeddings=max_pos, rope_parameters=rp)
        rot = LlamaRotaryEmbedding(cfg)
        x = torch.zeros(1, seq_len, head_dim, dtype=torch.float32)
        pos = torch.arange(seq_len).unsqueeze(0)
        cos, sin = rot(x, pos)
        half = head_dim // 2
        positions = [p for p in POSITIONS if p < seq_len] + [seq_len - 1]
        out.append({
            "name": name, "head_dim": head_dim, "rope_theta": theta, "max_position_embeddings": max_pos,
            "rope_parameters": params, "seq_len": seq_len,
            "inv_freq": [g9(v) for v in rot.inv_freq.double()],
            "attention_scaling": float(rot.attention_scaling),
            "positions": positions,
            "cos": [[g9(v) for v in cos[0, p, :half].double()] for p in positions],
            "sin": [[g9(v) for v in sin[0, p, :half].double()] for p in positions],
        })
        print(f"{name}: attention_scaling {float(rot.attention_scaling):.6f}")
    meta = {"transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(HERE, "rope_scaling", "rotary_reference.json"), "w") as f:
        json.dump({"generated_by": meta, "cases": out}, f, separators=(",", ":"))
        f.write("\n")


TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=True)
# original context 32: with theta 10000 and head_dim 64, pair 0 keeps its frequency, pairs 1-5 blend, the
# rest are divided by 8
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
# the same weights under other scalings: max_position_embeddings and rope parameters (rope_theta 10000)
VARIANTS = {
    "linear": (256, {"rope_type": "linear", "factor": 4.0}),
    "dynamic": (16, {"rope_type": "dynamic", "factor": 4.0}),  # 64 tokens > 16: the base grows
    "yarn": (128, {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}),
}


def tiny_llama3():
    torch.manual_seed(300)
    cfg = transformers.LlamaConfig(**TINY, max_position_embeddings=256,
                                   rope_parameters=dict(LLAMA3, rope_theta=10000.0))
    model = transformers.LlamaForCausalLM(cfg).float().eval()
    for n, p in model.named_parameters():  # norms start at 1: perturb them so they are really tested
        if "norm" in n:
            p.data.add_(0.1 * torch.randn_like(p))
        # sharp attention (large q.k) and a wide residual: positions change the logits by tens of percent,
        # so even the GPU's bf16 tolerance tells the scalings apart
        if "q_proj" in n or "k_proj" in n:
            p.data.mul_(6.0)
        if "embed_tokens" in n or "o_proj" in n or "down_proj" in n:
            p.data.mul_(10.0)
    d = os.path.join(HERE, "tiny_hf", "llama3")
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    rng = np.random.default_rng(11)
    ids = rng.integers(0, TINY["vocab_size"], size=64).astype(np.int64)
    tensors = {"ids": ids.astype(np.int32)}
    with torch.no_grad():
        tensors["logits"] = model(torch.from_numpy(ids)[None]).logits[0].numpy().astype(np.float32)
        for name, (max_pos, params) in VARIANTS.items():
            vcfg = transformers.LlamaConfig(**TINY, max_position_embeddings=max_pos,
                                            rope_parameters=dict(params, rope_theta=10000.0))
            vm = transformers.LlamaForCausalLM(vcfg).float().eval()
            vm.load_state_dict(model.state_dict())
            tensors["logits_" + name] = vm(torch.from_numpy(ids)[None]).logits[0].numpy().astype(np.float32)
        # NoPE (hydra_fa_nope): the same weights with the rotation replaced by the identity (cos 1, sin 0)
        rot = model.model.rotary_emb
        plain = rot.forward
        rot.forward = lambda x, position_ids, *a, **k: (
            torch.ones(*position_ids.shape, TINY["head_dim"], dtype=x.dtype),
            torch.zeros(*position_ids.shape, TINY["head_dim"], dtype=x.dtype))
        tensors["logits_nope"] = model(torch.from_numpy(ids)[None]).logits[0].numpy().astype(np.float32)
        rot.forward = plain
    save_file(tensors, os.path.join(d, "reference_logits.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    with open(os.path.join(d, "rope_variants.json"), "w") as f:
        json.dump({k: {"max_position_embeddings": m, "rope_parameters": p} for k, (m, p) in VARIANTS.items()}, f,
                  indent=1)
        f.write("\n")
    print("tiny llama3:", sum(p.numel() for p in model.parameters()), "parameters;", sorted(os.listdir(d)))


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    rotary_cases()
    tiny_llama3()
