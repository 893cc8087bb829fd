#!/usr/bin/env python3
"""PyTorch reference timings for `ferrite bench gpu`.

Times what a PyTorch user would run for each case the Rust benchmark measures,
on the same GPU, and prints one JSON object: {"device", "torch", "cases":
{name: {"ms": median, "graph_ms": median}}}. Cases whose backend is
unavailable get null figures and an "error". Timing, as `ferrite bench gpu`
times ours: "ms" is CUDA events around each call (3 warm-ups, median of N), so
Python dispatch and launch latency are inside it; "graph_ms" is GRAPH_REPS calls
captured in one CUDA graph, replayed between two events, divided by the count:
the device time per call once host dispatch is out of the way.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


GRAPH_REPS = 20


def median_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return median_of(fn, iters)


def median_of(fn, iters):
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def graph_ms(fn, iters):
    # Warm up on a side stream, as torch.cuda.graph requires, then capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_REPS):
            fn()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    ms = median_of(graph.replay, iters) / GRAPH_REPS
    del graph
    torch.cuda.empty_cache()
    return ms


def timed(fn, iters):
    return {"ms": median_ms(fn, iters), "graph_ms": graph_ms(fn, iters)}


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dev = "cuda"
    cases = {}

    s = 8192
    a = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    b = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    # Same problem as ours: C = A · Bᵀ, B stored [N, K].
    cases[f"gemm_bf16_{s}"] = timed(lambda: a @ b.T, iters)
    del a, b

    bsz, heads, n = 4, 16, 4096
    for d in (64, 128):
        q, k, v = (torch.randn(bsz, heads, n, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            name = f"attn_d{d}_{'causal' if causal else 'full'}"
            for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        cases[f"{name}_{label}"] = timed(
                            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), iters
                        )
                except Exception as e:  # a backend missing for this shape or build
                    cases[f"{name}_{label}"] = {"ms": None, "graph_ms": None, "error": str(e).splitlines()[0][:200]}
        del q, k, v

    # cuBLASLt int8 (int32 out, no epilogue) against the int8 GEMM twin. _int_mm
    # is fastest with B column-major (a [N, K] tensor transposed), the layout
    # cuBLASLt's int8 tensor-core kernels take; the unit's row-major B is
    # timed too.
    for s in (1024, 4096, 8192):
        a = torch.randint(-128, 128, (s, s), device=dev, dtype=torch.int8)
        bt = torch.randint(-128, 128, (s, s), device=dev, dtype=torch.int8)
        b = bt.t().contiguous()
        cases[f"gemm_i8_{s}"] = timed(lambda: torch._int_mm(a, bt.t()), iters)
        cases[f"gemm_i8_{s}_row_major_b"] = timed(lambda: torch._int_mm(a, b), iters)
        del a, b, bt

    t = 16384
    for e, k in ((8, 2), (64, 8)):
        x = torch.randn(t, e, device=dev, dtype=torch.float32) * 2

        def gate():
            p = torch.softmax(x, dim=-1)
            w, i = torch.topk(p, k, dim=-1)
            return w / w.sum(dim=-1, keepdim=True), i

        cases[f"moe_gate_e{e}_k{k}"] = timed(gate, max(iters, 100))

    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": cases}))


if __name__ == "__main__":
    main()
