"""The PyTorch peer of chapters 1 and 5: the five-line router, measured exactly as tools/bench
measures our routers (chapter 1's chain, chapter 5's fused pair), in the same GPU session.

Method (the same as moe_kernels::measure): the five lines are captured once in a CUDA graph.
Cold: before each sample, a buffer four times the L2 is read (outside the timed events; a read,
not a write, so the timed work pays no write-back of dirty lines), then events are recorded
around one replay. Warm: a second graph holds N copies; time / N. The launch count comes from
the profiler on one eager call.

    python3 tools/peers/router5.py --samples RESULTS/ch01_torch.csv [--quick]
    python3 tools/peers/router5.py --chapter ch05 --samples RESULTS/ch05_torch.csv [--quick]

--chapter names the rows of the samples file and picks the row counts (chapter 5 measures the
row axis more finely: 1, 2, 4, 6, 16, 32, 64, 96, 8192); --rows overrides them.

Writes the raw samples, not statistics: tools/bench summarises them with the same code as its
own measurements (one definition of a median), and gives them the floor of its own case at the
same shape and rows. The identifying columns are named as in tools/bench/columns.txt, the
column list of every benchmark CSV, read from that file.
"""

import argparse
import os

import torch

COLUMNS = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "columns.txt")).read().strip().split(",")
IDENTITY = [c for c in COLUMNS if c in ("chapter", "shape", "impl", "rows", "launches", "device")]
assert IDENTITY == ["chapter", "shape", "impl", "rows", "launches", "device"], IDENTITY
ROWS = {"ch01": [1, 6, 16, 96, 8192], "ch05": [1, 2, 4, 6, 16, 32, 64, 96, 8192]}
SHAPES = [
    # name, hidden, experts, k, scoring
    ("glm_h4096_e288_k8", 4096, 288, 8, "sigmoid"),
    ("qwen3_h2048_e128_k8", 2048, 128, 8, "softmax"),
]


# ANCHOR: five_lines
def five_lines(hidden, weight, bias, k, scoring):
    """The model's reference router, in fp32, as five lines (the same steps as our chain)."""
    logits = hidden @ weight.t()
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)
    ids = torch.topk(scores + bias if bias is not None else scores, k, dim=-1, sorted=False).indices
    weights = scores.gather(1, ids)
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return ids, weights
# ANCHOR_END: five_lines


def timed_replays(graph, samples, flush=None, divide=1):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    graph.replay()
    for s, e in zip(starts, ends):
        if flush is not None:
            flush.max()  # reads 4x the L2: the weights and inputs are cold again
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", required=True, help="where the raw samples go (CSV)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chapter", choices=sorted(ROWS), default="ch01",
                    help="the chapter whose bench merges these samples (default ch01)")
    ap.add_argument("--rows", help="comma-separated row counts (default: the chapter's)")
    args = ap.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")] if args.rows else ROWS[args.chapter]
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    torch.manual_seed(0)
    device = torch.cuda.get_device_name(0).replace(" ", "_")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device="cuda").fill_(1)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    for name, hidden_size, experts, k, scoring in SHAPES:
        weight = torch.randn(experts, hidden_size, device="cuda") * 0.02
        bias = (8.0 + 0.05 * torch.randn(experts, device="cuda")) if scoring == "sigmoid" else None
        for rows in rows_list:
            hidden = torch.randn(rows, hidden_size, device="cuda")
            fn = lambda: five_lines(hidden, weight, bias, k, scoring)  # noqa: E731
            n = launches(fn)
            cold, warm = measure(fn, flush, cold_n, warm_n, copies)
            record = {"chapter": args.chapter, "shape": name, "impl": "torch_5line", "rows": rows,
                      "launches": n, "device": device}
            lines.append(",".join(str(record[c]) for c in IDENTITY)
                         + "," + " ".join(f"{x:.3f}" for x in cold)
                         + "," + " ".join(f"{x:.3f}" for x in warm))
            cold_sorted = sorted(cold)
            print(f"{name:22} {rows:5} torch_5line cold ~{cold_sorted[len(cold) // 2]:9.2f} us  "
                  f"launches {n}", flush=True)
    with open(args.samples, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
