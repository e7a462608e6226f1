#!/usr/bin/env python3
"""Golden values for tests/test_adamw.cpp and tests/test_losses.cpp, from PyTorch.

Writes tests/data/optim_golden.json with
  adamw:          torch.optim.AdamW (foreach=False, per-group lr/weight decay) on three float32
                  parameters for 10 steps with fixed gradients, global clipping by
                  torch.nn.utils.clip_grad_norm_ and a warmup+cosine lr computed here; the
                  parameters after every step. A fourth parameter is frozen (not in the optimizer).
  cross_entropy:  F.cross_entropy(reduction="sum", ignore_index=-1) of hidden @ W^T and the
                  gradients of grad_scale * loss, in float64.
  kl:             tau^2 * F.kl_div(log_softmax(zs / tau), log_softmax(zt / tau), log_target=True,
                  reduction="sum") = tau^2 * KL(teacher || student) and student gradients, float64.
Inputs are float32 values (stored exactly) so the C++ side sees the same numbers.

Run: /work/refenv/bin/python tools/make_optim_golden.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "optim_golden.json")


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def cosine_lr(step, peak, warmup, total, min_ratio):
    # Independent statement of the schedule documented in src/train/lr_schedule.h.
    if step < warmup:
        return peak * (step + 1) / warmup
    lo = peak * min_ratio
    x = min(max((step - warmup) / (total - 1 - warmup), 0.0), 1.0)
    return lo + (peak - lo) * 0.5 * (1 + math.cos(math.pi * x))


def adamw_golden(gen):
    cfg = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)
    sched = dict(kind="cosine", peak_lr=1e-2, warmup_steps=3, total_steps=10, min_lr_ratio=0.1)
    specs = [  # name, shape, lr_scale, wd_scale, trainable
        ("w1", (4, 3), 1.0, 1.0, True),
        ("b1", (5,), 1.0, 0.0, True),
        ("w2", (3, 6), 0.5, 0.5, True),
        ("frozen", (2, 2), 1.0, 1.0, False),
    ]
    params = [torch.randn(*s, generator=gen, dtype=torch.float32) for _, s, *_ in specs]
    init = [flat(p) for p in params]
    for p, (_, _, _, _, tr) in zip(params, specs):
        p.requires_grad_(tr)
    groups = [
        {"params": [p], "lr": cfg["lr"] * lrs, "weight_decay": cfg["weight_decay"] * wds, "lr_scale": lrs}
        for p, (_, _, lrs, wds, tr) in zip(params, specs)
        if tr
    ]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                            foreach=False)
    steps, lrs, norms, grads_all, after = 10, [], [], [], []
    scales = [0.05, 0.5, 0.1, 1.0, 0.02, 0.3, 0.08, 2.0, 0.15, 0.04]  # some steps clip, some do not
    for s in range(steps):
        lr = cosine_lr(s, sched["peak_lr"], sched["warmup_steps"], sched["total_steps"], sched["min_lr_ratio"])
        lrs.append(lr)
        grads = [torch.randn(p.shape, generator=gen, dtype=torch.float32) * scales[s] for p in params]
        grads_all.append([flat(g) for g in grads])
        for p, g in zip(params, grads):
            p.grad = g.clone() if p.requires_grad else None
        trainable = [p for p in params if p.requires_grad]
        norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, cfg["max_norm"])))
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_scale"]
        opt.step()
        after.append([flat(p) for p in params])
    return {
        "config": cfg,
        "schedule": sched,
        "params": [
            {"name": n, "shape": list(s), "lr_scale": lrs_, "wd_scale": wds, "trainable": tr, "init": init[i]}
            for i, (n, s, lrs_, wds, tr) in enumerate(specs)
        ],
        "lrs": lrs,
        "grad_norms": norms,
        "grads": grads_all,
        "after": after,
    }


def f32(gen, *shape, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).to(torch.float64)


def ce_golden(gen):
    T, C, V, grad_scale = 6, 5, 11, 0.25
    h = f32(gen, T, C, scale=1.5).requires_grad_(True)
    W = f32(gen, V, C).requires_grad_(True)
    targets = torch.tensor([3, -1, 0, 10, 7, 3])
    loss = F.cross_entropy(h @ W.T, targets, ignore_index=-1, reduction="sum")
    (loss * grad_scale).backward()
    return {"T": T, "C": C, "V": V, "grad_scale": grad_scale, "hidden": flat(h), "W": flat(W),
            "targets": targets.tolist(), "loss": float(loss.detach()), "count": int((targets >= 0).sum()),
            "dhidden": flat(h.grad), "dW": flat(W.grad)}


def kl_golden(gen):
    T, Cs, Ct, V, tau, grad_scale = 5, 4, 6, 13, 2.0, 0.5
    hs = f32(gen, T, Cs, scale=2.0).requires_grad_(True)
    Ws = f32(gen, V, Cs).requires_grad_(True)
    ht = f32(gen, T, Ct, scale=2.0)
    Wt = f32(gen, V, Ct)
    log_ps = F.log_softmax(hs @ Ws.T / tau, dim=-1)
    log_pt = F.log_softmax(ht @ Wt.T / tau, dim=-1)
    loss = tau * tau * F.kl_div(log_ps, log_pt, log_target=True, reduction="sum")
    (loss * grad_scale).backward()
    return {"T": T, "Cs": Cs, "Ct": Ct, "V": V, "tau": tau, "grad_scale": grad_scale, "s_hidden": flat(hs),
            "s_W": flat(Ws), "t_hidden": flat(ht), "t_W": flat(Wt), "loss": float(loss.detach()), "dhidden": flat(hs.grad),
            "dW": flat(Ws.grad)}


def main():
    gen = torch.Generator().manual_seed(1234)
    out = {"generator": "tools/make_optim_golden.py (torch %s)" % torch.__version__,
           "adamw": adamw_golden(gen), "cross_entropy": ce_golden(gen), "kl": kl_golden(gen)}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
