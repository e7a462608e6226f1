#!/usr/bin/env python3
"""Golden values for the GdnBlock tests (tests/test_gdn.cpp), from an independent PyTorch float64
implementation of one Gated DeltaNet head group written from research/gdn.md §1.1 and §2.1:

  short conv:  y_t[d] = sum_i w[d, i] x_{t-W+1+i}[d] over [prev; x] (prev = the W-1 inputs before the
               segment), then SiLU; the window handed on is the last W-1 rows of [prev; x]
  q, k:        x / sqrt(sum x^2 + 1e-6);  value head j reads q/k head j // (HV / H)
  gates:       g = -exp(A_log) * softplus(a + dt_bias) (torch softplus, identity above 20),
               beta = sigmoid(b), or 2 sigmoid(b) with allow_neg_eigval
  recurrence:  per token, S (K x V): S = exp(g) S; delta = beta (v - S^T k); S = S + k delta^T;
               o = S^T (q / sqrt(K))  -- a plain Python loop over tokens
  output:      o * rsqrt(mean(o^2) + eps) * w_norm[head] * silu(z)

For each config (prefix "a." and "b."), seeded random inputs, parameters and entering state (float32
values, stored exactly as F64), the outputs, the leaving state, and the autograd gradients of
L = sum(out * R_out) + sum over the leaving state's parts of (part * R_part) with respect to every
input, parameter and entering-state tensor. States use the (HV, V, K) layout (M = S^T).

Writes tests/data/gdn_golden.safetensors (all F64; the config in the metadata).
Run: /work/refenv/bin/python tools/make_gdn_golden.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gdn_golden.safetensors")

CONFIGS = {
    "a": dict(T=150, H=2, HV=4, K=16, V=16, W=4, allow_neg_eigval=False, norm_eps=1e-6, seed=1),
    "b": dict(T=70, H=1, HV=2, K=8, V=12, W=4, allow_neg_eigval=True, norm_eps=1e-5, seed=2),
}


def f32(t):
    """float32-representable float64 values, so the C++ float path reads exactly the same inputs."""
    return t.to(torch.float32).to(torch.float64)


def short_conv(x, w, prev):
    W = w.shape[1]
    T = x.shape[0]
    xx = torch.cat([prev, x], dim=0)  # row r is time r - (W - 1)
    y = sum(w[:, i] * xx[i:i + T] for i in range(W))
    return F.silu(y), xx[xx.shape[0] - (W - 1):]


def l2norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gdn_block(c, inp, par, st):
    T, H, HV, K, V = c["T"], c["H"], c["HV"], c["K"], c["V"]
    r = HV // H
    q, cq = short_conv(inp["q_raw"], par["conv_q"], st["conv_q"])
    k, ck = short_conv(inp["k_raw"], par["conv_k"], st["conv_k"])
    v, cv = short_conv(inp["v_raw"], par["conv_v"], st["conv_v"])
    q = l2norm(q.view(T, H, K)).repeat_interleave(r, dim=1)  # (T, HV, K), head j -> j // r
    k = l2norm(k.view(T, H, K)).repeat_interleave(r, dim=1)
    v = v.view(T, HV, V)
    g = -torch.exp(par["A_log"]) * F.softplus(inp["a_raw"] + par["dt_bias"])  # (T, HV)
    beta = torch.sigmoid(inp["b_raw"]) * (2.0 if c["allow_neg_eigval"] else 1.0)
    scale = 1.0 / math.sqrt(K)
    S = st["ssm"].transpose(1, 2)  # (HV, K, V)
    outs = []
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        e = torch.einsum("hkv,hk->hv", S, k[t])
        delta = beta[t][:, None] * (v[t] - e)
        S = S + torch.einsum("hk,hv->hkv", k[t], delta)
        outs.append(torch.einsum("hkv,hk->hv", S, q[t] * scale))
    o = torch.stack(outs)  # (T, HV, V)
    z = inp["z"].view(T, HV, V)
    y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c["norm_eps"]) * par["norm_w"][None] * F.silu(z)
    state_out = {"conv_q": cq, "conv_k": ck, "conv_v": cv, "ssm": S.transpose(1, 2)}
    return y.reshape(T, HV * V), state_out


def make(prefix, c, tensors, metadata):
    gen = torch.Generator().manual_seed(c["seed"])
    T, H, HV, K, V, W = c["T"], c["H"], c["HV"], c["K"], c["V"], c["W"]
    Dk, Dv = H * K, HV * V

    def randn(*shape, sd=1.0):
        return f32(torch.randn(*shape, generator=gen, dtype=torch.float64) * sd)

    def unif(lo, hi, *shape):
        return f32(lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float64))

    inp = {
        "q_raw": randn(T, Dk),
        "k_raw": randn(T, Dk),
        "v_raw": randn(T, Dv),
        "a_raw": randn(T, HV),
        "b_raw": randn(T, HV, sd=1.5),
        "z": randn(T, Dv),
    }
    # fla's init ranges: A in (0, 16), softplus(dt_bias) in [1e-3, 0.1]; widened so decays vary.
    dt = torch.exp(unif(math.log(1e-3), math.log(0.5), HV))
    par = {
        "conv_q": randn(Dk, W, sd=0.5),
        "conv_k": randn(Dk, W, sd=0.5),
        "conv_v": randn(Dv, W, sd=0.5),
        "A_log": f32(torch.log(unif(0.5, 16.0, HV))),
        "dt_bias": f32(dt + torch.log(-torch.expm1(-dt))),
        "norm_w": f32(1.0 + randn(HV, V, sd=0.2)),
    }
    st = {
        "conv_q": randn(W - 1, Dk),
        "conv_k": randn(W - 1, Dk),
        "conv_v": randn(W - 1, Dv),
        "ssm": randn(HV, V, K, sd=0.3),
    }
    weights = {"out": randn(T, Dv)}
    weights.update({k: randn(*v.shape) for k, v in st.items()})

    leaves = {}
    for group, d in (("in", inp), ("param", par), ("state_in", st)):
        for name, t in d.items():
            t.requires_grad_(True)
            leaves[f"{group}.{name}"] = t
    out, state_out = gdn_block(c, inp, par, st)
    loss = (out * weights["out"]).sum() + sum((state_out[k] * weights[k]).sum() for k in state_out)
    names = list(leaves)
    grads = torch.autograd.grad(loss, [leaves[n] for n in names])

    for name, t in leaves.items():
        tensors[f"{prefix}.{name}"] = t.detach().contiguous()
    tensors[f"{prefix}.out"] = out.detach().contiguous()
    for k, t in state_out.items():
        tensors[f"{prefix}.state_out.{k}"] = t.detach().contiguous()
    tensors[f"{prefix}.R.out"] = weights["out"]
    for k in st:
        tensors[f"{prefix}.R.state.{k}"] = weights[k]
    for n, gr in zip(names, grads):
        tensors[f"{prefix}.grad.{n}"] = gr.contiguous()
    cfg = {k: v for k, v in c.items() if k != "seed"}
    metadata[f"{prefix}.config"] = json.dumps(cfg, sort_keys=True)


def main():
    torch.manual_seed(0)
    tensors, metadata = {}, {"generator": "tools/make_gdn_golden.py", "torch": torch.__version__}
    for prefix, c in CONFIGS.items():
        make(prefix, c, tensors, metadata)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata=metadata)
    print(f"wrote {OUT}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
