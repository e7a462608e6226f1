#!/usr/bin/env python3
"""PyTorch eager reference of a HydraHead training step on the GPU: SmolLM2-135M (teacher) or its head-level
hybrid, layer for layer the model of src/model/decoder_layer.cpp, for the throughput comparison with
bench/gpu_train_bench (same shapes, same run). Not a project dependency; never imported by the build.

  FA heads: q/k/v projections, NEOX RoPE, F.scaled_dot_product_attention(is_causal, enable_gqa)
  LA heads: q|k|v projection, causal depthwise short conv + SiLU, gates g = -exp(A_log) softplus(a + dt_bias),
            beta = sigmoid(b), Gated DeltaNet through flash-linear-attention's chunk_gated_delta_rule
            (use_qk_l2norm_in_kernel) when its source is at $FLA_PATH (or --fla), else a plain PyTorch
            chunked form (WY / UT transform, a Python loop over chunks; reported as gdn = "torch-chunked"),
            gated RMSNorm with silu(z)
  fusion:   scale-norm on every layer with LA heads; o_proj; SwiGLU MLP; fp32 residual stream
Mixed precision as ours: fp32 parameters and residual, bf16 autocast for the matmuls, norms in fp32;
loss = CE over the tied LM head (logits materialised, as eager PyTorch does); torch.optim.AdamW(fused=True)
with grad-norm clipping at 1.0. The layer layout (FA heads, FA KV groups, LA heads per layer) comes from
the JSON that `gpu_train_bench --plan-out` writes, so both sides train the same architecture.

  python3 tools/torch_hybrid_ref.py --plan plan.json --model hybrid --batch 8 --seq 2048 [--steps 5] [--warmup 2]
Prints one JSON object per configuration (tokens/s median over steps, peak torch.cuda memory).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BF16 = torch.bfloat16


def l2n(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def torch_chunk_gdn(q, k, v, g, beta, scale, C=64):
    """Chunked gated delta rule in plain PyTorch (fla's naive chunk form): q, k, v (B, T, H, D); g, beta (B, T, H)."""
    B, T, H, D = q.shape
    q = l2n(q.float()) * scale
    k = l2n(k.float())
    v = v.float()
    pad = (-T) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))
    n = (T + pad) // C
    q, k, v = (x.transpose(1, 2).reshape(B, H, n, C, D) for x in (q, k, v))
    g = g.float().transpose(1, 2).reshape(B, H, n, C).cumsum(-1)
    beta = beta.float().transpose(1, 2).reshape(B, H, n, C)
    kb, vb = k * beta[..., None], v * beta[..., None]
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    dec = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    A = ((kb @ k.transpose(-1, -2)) * dec).masked_fill(~strict, 0)
    eye = torch.eye(C, device=q.device).expand_as(A)
    Tm = torch.linalg.solve_triangular(eye + A, eye, upper=False)
    w = Tm @ (kb * g.exp()[..., None])
    u = Tm @ vb
    S = q.new_zeros(B, H, D, D)
    outs = []
    for i in range(n):
        qi, ki = q[:, :, i], k[:, :, i]
        gi = g[:, :, i]
        att = (qi @ ki.transpose(-1, -2)) * dec[:, :, i]
        vnew = u[:, :, i] - w[:, :, i] @ S
        outs.append((qi * gi.exp()[..., None]) @ S + att @ vnew)
        S = S * gi[..., -1, None, None].exp() + (ki * (gi[..., -1:] - gi).exp()[..., None]).transpose(-1, -2) @ vnew
    o = torch.stack(outs, 2).reshape(B, H, n * C, D)[:, :, :T]
    return o.transpose(1, 2).to(BF16)


def load_gdn(fla_path):
    try:
        sys.path.insert(0, fla_path)
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        try:  # as bench/cuda_peers.py: fla refuses its gated backward on Hopper with Triton < 3.7.1 (fla #640)
            import fla.ops.common.chunk_o as _chunk_o
            _chunk_o.TRITON_ABOVE_3_7_1 = True
        except Exception:
            pass

        def run(q, k, v, g, beta, scale):
            return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, use_qk_l2norm_in_kernel=True)[0]

        return "fla-triton", run
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"warning": f"flash-linear-attention not importable from {fla_path}: {e!r}; "
                                     "using the plain PyTorch chunked GDN"}), flush=True)
        return "torch-chunked", torch_chunk_gdn


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(BF16)


def rope(x, cos, sin):  # x (B, T, H, D); NEOX pairing (i, i + D/2)
    h = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :h], xf[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(BF16)


class Layer(nn.Module):
    def __init__(self, cfg, n_fa, n_kv, n_la, gdn):
        super().__init__()
        C, F_, H, Dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_heads"], cfg["head_dim"]
        eps = cfg["rms_norm_eps"]
        self.n_fa, self.n_kv, self.n_la, self.Dh, self.eps, self.gdn = n_fa, n_kv, n_la, Dh, eps, gdn
        self.W = cfg["conv_size"]
        self.attn_norm = RMSNorm(C, eps)
        if n_fa:
            self.wq = nn.Linear(C, n_fa * Dh, bias=False)
            self.wk = nn.Linear(C, n_kv * Dh, bias=False)
            self.wv = nn.Linear(C, n_kv * Dh, bias=False)
        if n_la:
            D = n_la * Dh
            self.la_qkv = nn.Linear(C, 3 * D, bias=False)
            self.la_ab = nn.Linear(C, 2 * n_la, bias=False)
            self.la_z = nn.Linear(C, D, bias=False)
            self.conv = nn.Parameter(torch.randn(3 * D, 1, self.W) * 0.3)
            self.A_log = nn.Parameter(torch.log(1 + 15 * torch.rand(n_la)))
            self.dt_bias = nn.Parameter(torch.randn(n_la) - 2)
            self.o_norm = nn.Parameter(torch.ones(n_la, Dh))
            self.head_scale = nn.Parameter(torch.ones(H, Dh))  # scale-norm fusion (layers with LA heads)
        self.wo = nn.Linear(H * Dh, C, bias=False)
        self.ffn_norm = RMSNorm(C, eps)
        self.gate_up = nn.Linear(C, 2 * F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        Dh = self.Dh
        h = self.attn_norm(x)
        heads = []
        if self.n_fa:
            q = rope(self.wq(h).view(B, T, self.n_fa, Dh), cos, sin)
            k = rope(self.wk(h).view(B, T, self.n_kv, Dh), cos, sin)
            v = self.wv(h).view(B, T, self.n_kv, Dh)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                               enable_gqa=True)
            heads.append(o.transpose(1, 2))
        if self.n_la:
            D = self.n_la * Dh
            qkv = self.la_qkv(h).transpose(1, 2)  # (B, 3D, T)
            qkv = F.silu(F.conv1d(F.pad(qkv, (self.W - 1, 0)), self.conv.to(qkv.dtype), groups=3 * D)).transpose(1, 2)
            q, k, v = (t.reshape(B, T, self.n_la, Dh).contiguous() for t in qkv.split(D, -1))
            a, b = self.la_ab(h).float().split(self.n_la, -1)
            g = -self.A_log.exp() * F.softplus(a + self.dt_bias)
            beta = torch.sigmoid(b)
            o = self.gdn(q, k, v, g, beta, Dh ** -0.5).float()
            z = self.la_z(h).view(B, T, self.n_la, Dh).float()
            o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.o_norm * F.silu(z)
            heads.append(o.to(BF16))
        hd = torch.cat(heads, 2) if len(heads) > 1 else heads[0]
        if self.n_la:
            hf = hd.float()
            hd = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps) * self.head_scale).to(BF16)
        x = x + self.wo(hd.reshape(B, T, -1)).float()
        gate, up = self.gate_up(self.ffn_norm(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up).float()


class Model(nn.Module):
    def __init__(self, cfg, layers, gdn):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(cfg, *l, gdn) for l in layers)
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        for n, p in self.named_parameters():
            if p.dim() == 2 and "head_scale" not in n and "o_norm" not in n:
                nn.init.normal_(p, std=(0.5 if "embed" not in n else 1.0) / math.sqrt(p.shape[1]))

    def forward(self, ids, targets):
        T, Dh = ids.shape[1], self.cfg["head_dim"]
        inv = self.cfg["rope_theta"] ** (-torch.arange(0, Dh, 2, device=ids.device, dtype=torch.float64) / Dh)
        ang = torch.arange(T, device=ids.device, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = ang.cos().float(), ang.sin().float()
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = F.linear(self.norm(x), self.embed.weight.to(BF16))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def bench(cfg, layout, name, gdn_name, gdn, B, T, steps, warmup, dev="cuda"):
    torch.manual_seed(0)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    row = {"impl": "pytorch-eager", "model": name, "B": B, "T": T, "gdn": gdn_name if any(l[2] for l in layout) else None,
           "torch": torch.__version__}
    try:
        model = Model(cfg, layout, gdn).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                fused=dev == "cuda")
        ids = torch.randint(0, cfg["vocab_size"], (B, T), device=dev)
        tg = torch.randint(0, cfg["vocab_size"], (B, T), device=dev)
        row["params"] = sum(p.numel() for p in model.parameters())
        sync()
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        ms = []
        t_first = time.perf_counter()
        for s in range(warmup + steps):
            sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev, dtype=BF16):
                loss = model(ids, tg)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sync()
            if s == 0:
                row["first_step_s"] = round(time.perf_counter() - t_first, 2)
            if s >= warmup:
                ms.append((time.perf_counter() - t0) * 1e3)
        ms.sort()
        med = ms[len(ms) // 2]
        row.update(step_ms=round(med, 2), step_ms_min=round(ms[0], 2), step_ms_max=round(ms[-1], 2),
                   tokens_per_s=round(B * T / (med / 1e3)), loss=loss.item(),
                   peak_mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2) if dev == "cuda" else None)
        del model, opt
    except Exception as e:  # noqa: BLE001 (an OOM at 32K is a result too)
        row["error"] = repr(e)[:300]
    if dev == "cuda":
        torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--models", default="teacher,hybrid")
    ap.add_argument("--shapes", default="8x2048,4x4096")
    ap.add_argument("--long", type=int, default=0, help="also B=1 at this T")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--fla", default=os.environ.get("FLA_PATH", ".peer"))
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gdn", default="auto", help="auto (fla when importable) | torch")
    a = ap.parse_args()
    cfg = json.load(open(a.plan))
    gdn_name, gdn = load_gdn(a.fla) if a.gdn == "auto" else ("torch-chunked", torch_chunk_gdn)
    teacher = [[cfg["num_heads"], cfg["num_kv_heads"], 0] for _ in range(cfg["num_layers"])]
    layouts = {"teacher": teacher, "hybrid": cfg["layers"]}
    rows = []
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s]
    for B, T in shapes:
        for m in a.models.split(","):
            rows.append(bench(cfg, layouts[m], m if m == "teacher" else "hybrid-7:1", gdn_name, gdn, B, T, a.steps,
                              a.warmup, a.device))
    if a.long:
        for m in a.models.split(","):
            rows.append(bench(cfg, layouts[m], m if m == "teacher" else "hybrid-7:1", gdn_name, gdn, 1, a.long,
                              max(2, a.steps // 2), 1, a.device))
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
