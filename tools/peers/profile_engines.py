"""Where the engines' fused MoE spends its time, kernel by kernel: the peer of
tools/peers/engines_moe.py (its four kernels, its tuned configuration for the shape at T tokens)
on a random routing, each call after a flush of the L2 (cold, as the bench measures), timed by
PyTorch's profiler. Chapter 6 sets these beside our own kernels' steps (`ch04_steps.csv`) to
find where the layers differ.

    python3 tools/peers/profile_engines.py [--tokens 4096] [--calls 20] > RESULTS/profile_engines.txt

Needs a CUDA GPU (the H200 of tools/gpu/run). Nothing here is checked: engines_moe.py checks
the same kernels' outputs in the bench.
"""

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engines_moe import EnginesMoE, config_path, load_configs, pick  # noqa: E402

SHAPES = [  # name, H, I, E, k: chapter 4's two shapes
    ("qwen3_h2048_i768_e128_k8", 2048, 768, 128, 8),
    ("glm_h4096_i1024_e288_k8", 4096, 1024, 288, 8),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_engines: needs a CUDA GPU")
    dev = "cuda"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(4 * l2, dtype=torch.uint8, device=dev)
    g = torch.Generator(device=dev).manual_seed(0)
    for name, H, I, E, k in SHAPES:
        T = args.tokens
        w13 = (torch.randn(E, 2 * I, H, device=dev, generator=g) * 0.02).bfloat16()
        w2 = (torch.randn(E, H, I, device=dev, generator=g) * 0.02).bfloat16()
        x = torch.randn(T, H, device=dev, generator=g).bfloat16()
        ids = torch.topk(torch.randn(T, E, device=dev, generator=g), k, dim=1).indices
        wts = torch.softmax(torch.randn(T, k, device=dev, generator=g), dim=1)
        cfg = pick(load_configs(config_path(E, I)), T)
        layer = EnginesMoE(w13, w2, cfg).prepare(ids.to(torch.int32), wts)
        for _ in range(3):
            layer(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(args.calls):
                flush.fill_(1)
                layer(x)
            torch.cuda.synchronize()
        print(f"== {name}, T = {T}, configuration {cfg}, {args.calls} cold calls")
        print(p.key_averages().table(sort_by="cuda_time_total", row_limit=8))
        del w13, w2, layer
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
