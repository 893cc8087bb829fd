#!/usr/bin/env python3
"""PyTorch float reference of the int8 MoE decoder block (docs/block.md).

Reads a block written by `ferrite block --save-weights DIR` (int8 .npy weights,
block.json with heads, top-k, gate mode and scales, the input x.npy and the
golden integer output out.npy), runs the same block in float on the dequantized
weights, as `hw::block::block_f64` defines it (real RMSNorm, causal softmax
attention, the router's softmax and top-k with the unit's capacity rule: tokens
in order, choices in rank order; ReLU experts), and prints:

- the integer block's relative error against the float64 block (the figure
  `ferrite block` prints from its Rust float64 reference: a cross-check),
- the time of the float block in float32 and bfloat16 on the GPU (CUDA events,
  median of --iters runs after warm-up), tokens/s, and the bf16 error vs float64.

Usage: python3 scripts/block_reference.py DIR [--iters N] [--json OUT]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

GAIN_SCALE = 1.0 / 64.0  # hw::block::GAIN_SCALE


def load(d):
    cfg = json.load(open(os.path.join(d, "block.json")))
    t = {n: np.load(os.path.join(d, f"{n}.npy")) for n in
         ["g1", "g2", "wq", "wk", "wv", "wo", "gate", "w1", "w2", "x", "out"]}
    for n, a in t.items():
        if a.dtype != np.int8:
            sys.exit(f"{d}/{n}.npy: dtype {a.dtype}, expected int8")
    return cfg, t


def capacity(cf, tokens, k, experts):
    """MoeProblem::capacity_slots: min(T, ceil(cf·T·k/E)) with cf in Q16.16; None = unlimited (T)."""
    if cf is None:
        return tokens
    q = round(cf * 65536)
    return min(tokens, -(-(q * tokens * k) // (65536 * experts)))


def block(cfg, t, dtype, dev, cf):
    """The float block; returns (out, h1, expert sets) in real values."""
    ws, acts = cfg["weight_scales"], cfg["activation_scales"]
    f = lambda a, s: torch.from_numpy(a.astype(np.float64) * s).to(dev, dtype)
    x = f(t["x"], acts["residual"])
    tokens, hidden = x.shape
    heads, k = cfg["heads"], cfg["top_k"]
    d = hidden // heads
    g1, g2 = f(t["g1"], GAIN_SCALE), f(t["g2"], GAIN_SCALE)
    wq, wk, wv, wo = (f(t[n], ws[n]) for n in ["wq", "wk", "wv", "wo"])
    gate = f(t["gate"], ws["gate"])
    e = gate.shape[0]
    w1 = [f(t["w1"][i], ws["w1"][i]) for i in range(e)]
    w2 = [f(t["w2"][i], ws["w2"][i]) for i in range(e)]
    cap = capacity(cf, tokens, k, e)

    def run():
        def norm(v, g):
            rms = v.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(torch.finfo(dtype).tiny)
            return v / rms * g
        n1 = norm(x, g1)
        q, kk, v = ((n1 @ w).view(tokens, heads, d).transpose(0, 1) for w in (wq, wk, wv))
        o = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True)
        h1 = x + o.transpose(0, 1).reshape(tokens, hidden) @ wo
        n2 = norm(h1, g2)
        logits = n2 @ gate.T
        # Ties go to the lower expert index, as in the golden model's sort.
        order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
        chosen = order[:, :k]
        if cfg["mode"] == "topk-softmax":
            wts = torch.softmax(logits.gather(1, chosen), -1)
        else:
            wts = torch.softmax(logits, -1).gather(1, chosen)
        # Capacity: tokens in order, choices in rank order; a choice is kept while its expert has room.
        onehot = torch.nn.functional.one_hot(chosen.reshape(-1), e)
        slot = (onehot.cumsum(0) - onehot).mul(onehot).sum(-1).view(tokens, k)
        kept = slot < cap
        out = h1.clone()
        for ex in range(e):
            tok, rank = torch.nonzero((chosen == ex) & kept, as_tuple=True)
            if tok.numel() == 0:
                continue
            y = torch.relu(n2[tok] @ w1[ex]) @ w2[ex]
            out.index_add_(0, tok, wts[tok, rank].unsqueeze(1) * y)
        return out, h1, chosen
    return run


def rel_err(int_out, scale, real):
    a = int_out.astype(np.float64) * scale
    return float(np.linalg.norm(a - real) / max(np.linalg.norm(real), 1e-300))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--capacity-factor", type=float, default=1.25, help="as given to ferrite block (0 = unlimited)")
    ap.add_argument("--json")
    a = ap.parse_args()
    cfg, t = load(a.dir)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cf = None if a.capacity_factor == 0 else a.capacity_factor
    tokens = t["x"].shape[0]
    res = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "tokens": tokens}
    out64, h1_64, sets64 = block(cfg, t, torch.float64, dev, cf)()
    out64 = out64.cpu().numpy()
    res["integer_vs_f64"] = rel_err(t["out"], cfg["activation_scales"]["residual"], out64)
    for name, dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16)]:
        run = block(cfg, t, dtype, dev, cf)
        with torch.no_grad():
            for _ in range(3):
                out, _, _ = run()
            times = []
            for _ in range(a.iters):
                if dev == "cuda":
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    run()
                    e.record()
                    torch.cuda.synchronize()
                    times.append(s.elapsed_time(e) * 1e-3)
                else:
                    import time
                    t0 = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - t0)
        med = sorted(times)[len(times) // 2]
        err = float(np.linalg.norm(out.double().cpu().numpy() - out64) / np.linalg.norm(out64))
        res[name] = {"median_s": med, "tokens_per_s": tokens / med, "rel_err_vs_f64": err}
    print(json.dumps(res, indent=2))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
