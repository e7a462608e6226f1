#!/usr/bin/env python3
"""Golden data for the CPU training engine, from PyTorch + Hugging Face transformers.

A tiny Llama (2 layers, GQA 4:2 heads, vocab 61, tied embeddings) is built by transformers with a
fixed seed; norms are perturbed so their gradients are not trivial. We record, in fp32:
  * the model (config.json + model.safetensors, HF names) -> our importer loads exactly these weights;
  * one batch (B=2, S=16, with some targets = -100/ignored), its logits, mean CE loss, and the gradient
    of every parameter;
  * a 10-step training trajectory with torch.optim.AdamW (lr 3e-3, betas (0.9, 0.95), eps 1e-8,
    weight decay 0.1 on matrices only, none on norms) and global grad-norm clipping at 1.0 on one
    fixed batch: the loss before each step and the final parameters.
Run once:  .venv/bin/python tools/make_train_golden.py --out tests/data/train_golden
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                                   hidden_act="silu")
    model = transformers.LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)

    rng = np.random.default_rng(3)
    B, S = 2, 16

    def batch():
        seq = rng.integers(0, cfg.vocab_size, size=(B, S + 1))
        inputs, targets = seq[:, :-1].copy(), seq[:, 1:].copy()
        targets[0, :3] = -100  # some positions are not scored
        return inputs, targets

    def loss_of(inputs, targets):
        logits = model(torch.tensor(inputs)).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), torch.tensor(targets).reshape(-1),
                                                 ignore_index=-100)
        return logits, loss

    out = {}
    inputs, targets = batch()
    logits, loss = loss_of(inputs, targets)
    loss.backward()
    out["inputs"] = inputs.astype(np.int32)
    out["targets"] = np.where(targets < 0, -1, targets).astype(np.int32)
    out["logits"] = logits.detach().numpy().astype(np.float32)
    out["loss"] = np.array([loss.item()], dtype=np.float32)
    names = []
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().numpy().astype(np.float32)
        names.append(name)
    model.zero_grad()

    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    losses, step_inputs, step_targets = [], [], []
    inputs, targets = batch()  # one fixed batch: the loss must fall step by step
    for step in range(10):
        _, loss = loss_of(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        step_inputs.append(inputs)
        step_targets.append(np.where(targets < 0, -1, targets))
    out["traj.losses"] = np.array(losses, dtype=np.float32)
    out["traj.inputs"] = np.stack(step_inputs).astype(np.int32)
    out["traj.targets"] = np.stack(step_targets).astype(np.int32)
    for name, p in model.named_parameters():
        out["final." + name] = p.detach().numpy().astype(np.float32)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "lr": 3e-3, "betas": [0.9, 0.95],
            "eps": 1e-8, "weight_decay": 0.1, "clip": 1.0, "params": names}
    save_file(out, os.path.join(args.out, "golden.safetensors"), metadata={"info": json.dumps(meta)})
    print("loss", loss.item(), "trajectory", [round(x, 4) for x in losses])


if __name__ == "__main__":
    main()
