"""Peer timings for bench/cuda_gdn_attention_bench.cu at the same shapes, in the same run: the
flash-linear-attention Triton kernels (chunk_gated_delta_rule forward and forward+backward with
use_qk_l2norm_in_kernel=True, fused_recurrent_gated_delta_rule for the decode step) and PyTorch's
fused softmax attention (F.scaled_dot_product_attention, causal, GQA through enable_gqa). Called the
way shared/bench/peer_gdn_sdpa.py calls them (triton.testing.do_bench medians, warmup 25 ms, rep 200 ms).

The GDN decode and chunk-forward rows are timed twice: as Python calls (the way users call fla) and
replayed from CUDA graphs (`*_graph` rows: fla's kernels without its host-side launch cost, which the
Python-call times include whenever launching takes longer than the L2 flush before each call). Our
bench replays its decode step and chunk forward from CUDA graphs the same way (same flush), so those rows
compare GPU time with GPU time.

Then joins with our rows (--ours FILE, JSON lines from cuda_gdn_attention_bench) and prints one table
with the ratio peer_ms / our_ms (above 1: ours is faster).

Usage: FLA_PATH=.peer python3 bench/cuda_peers.py --ours ours.jsonl [--quick] [--attn-only | --gdn-only]
           [--shape BxTxHxD ...] [--json out.json]
The fla source tree is never committed: it is fetched into a git-ignored folder and carried.
bench/gpu_peers.sh builds our benchmark with CMake, runs the GPU op table's GDN and attention parity cases,
our benchmark and this script in one call.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton

p = argparse.ArgumentParser()
p.add_argument("--ours", required=True)
p.add_argument("--quick", action="store_true")
p.add_argument("--json", default="")
p.add_argument("--attn-only", action="store_true", help="attention rows only (no fla)")
p.add_argument("--gdn-only", action="store_true", help="the GDN rows only (decode and chunk, no attention)")
p.add_argument("--decode-only", action="store_true", help="the GDN decode rows only")
p.add_argument("--shape", action="append", default=[], metavar="BxTxHxD",
               help="GDN chunk rows at these shapes only (repeatable; no decode or attention rows)")
args = p.parse_args()

dev = "cuda"
torch.manual_seed(0)
rows = []


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def emit(op, B, T, H, D, ms, **extra):
    r = {"impl": "peer", "op": op, "B": B, "T": T, "H": H, "D": D, "ms": round(ms, 4)}
    r.update(extra)
    rows.append(r)
    print(json.dumps(r), flush=True)


sys.path.insert(0, os.environ.get("FLA_PATH", ".peer"))
from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule  # noqa: E402
import fla.ops.common.chunk_o as _chunk_o  # noqa: E402

# Timing only (as in shared/bench/peer_gdn_sdpa.py): fla refuses its gated backward on Hopper with
# Triton < 3.7.1 (its issue #640); the guard is lifted so the kernels' time can be read.
_chunk_o.TRITON_ABOVE_3_7_1 = True

x = torch.empty(2 * 1024**3 // 2, dtype=torch.bfloat16, device=dev).normal_()
y = torch.empty_like(x)
ms = bench(lambda: y.copy_(x))
emit("ceiling_copy_2GiB", 0, 0, 0, 0, ms, TB_s=round(2 * x.numel() * 2 / ms / 1e9, 2))
del x, y


def emit_graph(op, B, T, H, D, fn):
    """Times fn replayed from a CUDA graph (captured after warm-up on a side stream, so Triton's
    autotuning is done before the capture); a failure is reported and the other rows are kept."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        emit(op, B, T, H, D, bench(lambda: graph.replay()))
        del graph
    except Exception as e:
        print("fla %s under a CUDA graph: %s" % (op, str(e).splitlines()[0] if str(e) else type(e).__name__))


def gdn_inputs(B, T, H, D, grad):
    q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32)) * 0.1
    beta = torch.rand(B, T, H, device=dev, dtype=torch.float32).sigmoid()
    ts = [q, k, v, g, beta]
    if grad:
        for t in ts:
            t.requires_grad_(True)
    return ts


def peer_gdn(B, T, H, D):
    q, k, v, g, beta = gdn_inputs(B, T, H, D, True)
    fwd = lambda: chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    emit("gdn_fwd", B, T, H, D, bench(fwd))
    o, _ = fwd()
    do = torch.randn_like(o)

    def fb():
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        o.backward(do)

    emit("gdn_fwdbwd", B, T, H, D, bench(fb))
    # the forward again, replayed from a CUDA graph: fla's kernels without its Python-side launch cost
    # (the eager time above includes it whenever launching takes longer than the L2 flush before each
    # call). Not the forward+backward: capturing fla's backward failed in call AL and left the CUDA
    # context unusable for the rest of the run.
    emit_graph("gdn_fwd_graph", B, T, H, D, fwd)
    del q, k, v, g, beta, o, do
    torch.cuda.empty_cache()


def peer_attn(B, T, H, Hkv, D):
    qa = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    ka = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    va = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    gqa = Hkv != H
    f = lambda: F.scaled_dot_product_attention(qa, ka, va, is_causal=True, enable_gqa=gqa)
    emit("attn_fwd", B, T, H, D, bench(f))
    oa = f()
    doa = torch.randn_like(oa)

    def fba():
        o = F.scaled_dot_product_attention(qa, ka, va, is_causal=True, enable_gqa=gqa)
        o.backward(doa)

    emit("attn_fwdbwd", B, T, H, D, bench(fba))
    # the same call pinned to one SDPA backend each (FlashAttention-2 and cuDNN), for the record
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(be):
                emit("attn_fwd_sdpa_" + name, B, T, H, D, bench(f))
                emit("attn_fwdbwd_sdpa_" + name, B, T, H, D, bench(fba))
        except Exception as e:  # a backend that refuses the shape
            print("SDPA backend %s: %s" % (name, str(e).splitlines()[0] if str(e) else type(e).__name__))
    del qa, ka, va, oa, doa
    torch.cuda.empty_cache()


def peer_decode(B, H, D):
    q, k, v, g, beta = gdn_inputs(B, 1, H, D, False)
    h0 = torch.randn(B, H, D, D, device=dev, dtype=torch.float32)
    fr = lambda: fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                   use_qk_l2norm_in_kernel=True)
    emit("gdn_decode", B, 1, H, D, bench(fr))
    # the same step replayed from a CUDA graph: GPU time without the Python launch cost, which can exceed
    # the L2 flush that do_bench runs before each call (then the time above includes host time)
    emit_graph("gdn_decode_graph", B, 1, H, D, fr)


chosen = []
for text in args.shape:
    parts = text.lower().split("x")
    if len(parts) != 4 or not all(x.isdigit() and int(x) > 0 for x in parts):
        p.error("--shape %r: expected four positive integers BxTxHxD, e.g. 8x4096x9x64" % text)
    chosen.append(tuple(int(x) for x in parts))
for B, T, H, D in chosen:
    peer_gdn(B, T, H, D)
if not chosen and not args.attn_only:
    peer_decode(64, 16, 128)
    peer_decode(64, 9, 64)
shapes = [(8, 4096), (2, 16384), (1, 65536)] if not chosen and not args.decode_only else []
for B, T in shapes[: 1 if args.quick else 3]:
    if not args.attn_only:
        peer_gdn(B, T, 16, 128)
    if not args.gdn_only:
        peer_attn(B, T, 16, 16, 128)
if not chosen and not args.attn_only and not args.decode_only:
    peer_gdn(8, 4096, 9, 64)
if not chosen and not args.gdn_only and not args.decode_only:
    peer_attn(8, 4096, 9, 3, 64)
    peer_attn(8, 2048, 9, 3, 64)

meta = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()}
print(json.dumps(meta), flush=True)

ours = {}
with open(args.ours) as fh:
    for line in fh:
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("impl") == "ours":
                ours[(r["op"], r["B"], r["T"], r["H"], r["D"])] = r
table = []
print("\n%-20s %-22s %10s %10s %8s  %s" % ("op", "shape", "ours ms", "peer ms", "ratio", "peer"))
for r in rows:
    if r["op"].startswith("ceiling"):
        continue
    key = (r["op"], r["B"], r["T"], r["H"], r["D"])
    peer = "fla" if r["op"].startswith("gdn") else "torch SDPA"
    shape = "B%d T%d H%d d%d" % (r["B"], r["T"], r["H"], r["D"])
    if "_sdpa_" in r["op"]:  # SDPA pinned to one backend (flash / cudnn): against our cuDNN path
        base, backend = r["op"].split("_sdpa_")
        peer = "torch SDPA, %s backend" % backend
        variants = [(base + "_cudnn", ours.get((base + "_cudnn",) + key[1:]))]
    elif r["op"] == "gdn_fwd_graph" and key in ours:  # GPU time against GPU time, both from CUDA graphs
        peer = "fla, both from CUDA graphs (GPU time)"
        variants = [(r["op"], ours[key])]
    elif r["op"] == "gdn_fwd_graph":  # fla's GPU time against our (eager) call (an older bench's output)
        peer = "fla, CUDA graph (GPU time)"
        base = r["op"][: -len("_graph")]
        variants = [(base, ours.get((base,) + key[1:]))]
    else:  # SDPA as it chooses / fla: against our kernels and, for attention, our cuDNN path
        variants = [(r["op"], ours.get(key))]
        if (r["op"] + "_cudnn",) + key[1:] in ours:
            variants.append((r["op"] + "_cudnn", ours[(r["op"] + "_cudnn",) + key[1:]]))
    for name, ov in variants:
        if ov is None:
            print("%-20s %-22s %10s %10.3f %8s  %s" % (name, shape, "-", r["ms"], "-", peer))
            continue
        ratio = r["ms"] / ov["ms"]
        table.append({"op": name, "shape": shape, "ours_ms": ov["ms"], "peer_ms": r["ms"], "ratio": round(ratio, 3),
                      "peer": peer})
        print("%-20s %-22s %10.3f %10.3f %8.2f  %s" % (name, shape, ov["ms"], r["ms"], ratio, peer))
for key, o in ours.items():
    if key[0] in ("gdn_decode_inplace", "state_copy_graph"):
        shape = "B%d T%d H%d d%d" % (o["B"], o["T"], o["H"], o["D"])
        what = ("(ours, state in place)" if key[0] == "gdn_decode_inplace" else
                "(the decode state's bytes as one device copy from a graph: the step's ceiling)")
        print("%-20s %-22s %10.4f %10s %8s  %s" % (o["op"], shape, o["ms"], "-", "-", what))
if args.json:
    with open(args.json, "w") as fh:
        json.dump({"meta": meta, "peer_rows": rows, "ours": list(ours.values()), "table": table}, fh, indent=1)
