"""The PyTorch peer of chapter 1: the five-line router, measured exactly as tools/bench measures
our chain (kernels/ch01_router.cu), in the same GPU session, and the ceilings of this GPU.

Method (the same as moe_kernels::measure): the five lines are captured once in a CUDA graph.
Cold: before each sample, a buffer four times the L2 is written (outside the timed events), then
events are recorded around one replay. Warm: a second graph holds N copies; time / N. Median,
10th and 90th percentile of many samples. The launch count comes from the profiler on one eager
call.

    python3 tools/peers/router5.py --out RESULTS/ch01_torch.csv --ceilings RESULTS/ceilings.csv

Writes rows with the columns of bench/results/<gpu>/ch01.csv (floor_us left empty: tools/bench
fills it from its own floor for the same shape and rows) and one row of ceilings:
bf16_tflops (an 8192^3 bf16 matmul on random data) and copy_gbs (device-to-device copy, bytes
read plus written).
"""

import argparse
import statistics

import torch

HEADER = ("chapter,shape,impl,rows,launches,cold_median_us,cold_p10_us,cold_p90_us,"
          "warm_median_us,warm_p10_us,warm_p90_us,floor_us,samples,device")
ROWS = [1, 6, 16, 96, 8192]
SHAPES = [
    # name, hidden, experts, k, scoring
    ("glm_h4096_e288_k8", 4096, 288, 8, "sigmoid"),
    ("qwen3_h2048_e128_k8", 2048, 128, 8, "softmax"),
]


def five_lines(hidden, weight, bias, k, scoring):
    """The model's reference router, in fp32, as five lines (the same steps as our chain)."""
    logits = hidden @ weight.t()
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)
    ids = torch.topk(scores + bias if bias is not None else scores, k, dim=-1, sorted=False).indices
    weights = scores.gather(1, ids)
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return ids, weights


def pct(xs, q):
    xs = sorted(xs)
    return xs[round((len(xs) - 1) * q)]


def timed_replays(graph, samples, flush=None, divide=1):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    graph.replay()
    for s, e in zip(starts, ends):
        if flush is not None:
            flush.fill_(1)  # writes 4x the L2: the weights and inputs are cold again
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 / divide for s, e in zip(starts, ends)]


def measure(fn, flush, cold_samples, warm_samples, warm_copies):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    one = torch.cuda.CUDAGraph()
    with torch.cuda.graph(one):
        fn()
    many = torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for _ in range(warm_copies):
            fn()
    cold = timed_replays(one, cold_samples, flush=flush)
    warm = timed_replays(many, warm_samples, divide=warm_copies)
    return cold, warm


def launches(fn):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())


def ceilings():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1000.0)
    tflops = 2 * 8192 ** 3 / statistics.median(times) / 1e12
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(11):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1000.0)
    copy_gbs = 2 * n / statistics.median(times[1:]) / 1e9
    return tflops, copy_gbs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ceilings", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    torch.manual_seed(0)
    device = torch.cuda.get_device_name(0).replace(" ", "_")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
    lines = [HEADER]
    for name, hidden_size, experts, k, scoring in SHAPES:
        weight = torch.randn(experts, hidden_size, device="cuda") * 0.02
        bias = (8.0 + 0.05 * torch.randn(experts, device="cuda")) if scoring == "sigmoid" else None
        for rows in ROWS:
            hidden = torch.randn(rows, hidden_size, device="cuda")
            fn = lambda: five_lines(hidden, weight, bias, k, scoring)  # noqa: E731
            n = launches(fn)
            cold, warm = measure(fn, flush, cold_n, warm_n, copies)
            lines.append(",".join(str(v) for v in [
                "ch01", name, "torch_5line", rows, n,
                f"{statistics.median(cold):.3f}", f"{pct(cold, 0.1):.3f}", f"{pct(cold, 0.9):.3f}",
                f"{statistics.median(warm):.3f}", f"{pct(warm, 0.1):.3f}", f"{pct(warm, 0.9):.3f}",
                "", len(cold), device]))
            print(f"{name:22} {rows:5} torch_5line cold {statistics.median(cold):9.2f} us "
                  f"warm {statistics.median(warm):9.2f} us  launches {n}", flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    tflops, copy_gbs = ceilings()
    with open(args.ceilings, "w") as f:
        f.write("bf16_tflops,copy_gbs,device\n")
        f.write(f"{tflops:.1f},{copy_gbs:.1f},{device}\n")
    print(f"ceilings: bf16 matmul {tflops:.0f} TFLOP/s, device copy {copy_gbs:.0f} GB/s")


if __name__ == "__main__":
    main()
