#!/usr/bin/env python3
"""PyTorch CPU eager reference for bench_train_step: forward+backward tokens/s of the same model
shape (HF transformers LlamaForCausalLM, fp32, eager attention), random tokens, median over steps.

  .venv/bin/python tools/torch_train_step_bench.py --hidden 256 --layers 8 --heads 8 --kv-heads 2 \
      --ffn 768 --vocab 260 --batch 8 --seq 256 --threads 2
Prints one JSON object. Used by bench/train_vs_torch.sh; not a project dependency.
"""
import argparse
import json
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(hidden=256, layers=8, heads=8, kv_heads=2, ffn=768, vocab=260, batch=8, seq=256, steps=5,
                     threads=2).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--name", default="tiny-cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                                   num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads, max_position_embeddings=max(a.seq, 2048),
                                   tie_word_embeddings=True, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg).float().train()
    x = torch.randint(0, a.vocab, (a.batch, a.seq))
    y = torch.randint(0, a.vocab, (a.batch, a.seq))
    rates = []
    for step in range(a.steps + 1):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        dt = time.perf_counter() - t0
        if step > 0:
            rates.append(a.batch * a.seq / dt)
    rates.sort()
    print(json.dumps({"engine": "pytorch-eager", "torch": torch.__version__, "model": a.name,
                      "params": sum(p.numel() for p in model.parameters()), "batch": a.batch, "seq": a.seq,
                      "threads": a.threads, "fwd_bwd_tokens_per_s": round(rates[len(rates) // 2], 1)}))


if __name__ == "__main__":
    main()
