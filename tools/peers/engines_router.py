"""The engines' router as a peer of chapter 5: a cuBLAS bf16 → fp32 gate GEMM, then SGLang's
Triton router kernel design, written here from scratch, measured exactly as tools/bench measures
our routers (chapter 5's pair and `blas_fused`), in the same GPU session, on exactly the bench's
inputs, its ids checked before timing.

    python3 tools/peers/engines_router.py --samples RESULTS/ch05_engines.csv [--quick]
    TRITON_INTERPRET=1 python3 tools/peers/engines_router.py --check-only --device cpu --rows 1,6,17
                                           the same kernel and checks on a CPU, nothing timed

One implementation, impl `engines_router`, two launches per call:

1. The gate GEMM: `torch.mm(hidden, gate.t(), out_dtype=torch.float32)`, bf16 [T, H] × bf16
   [E, H]ᵀ → fp32 [T, E] logits. On CUDA this is one cuBLAS call (a bf16 GEMM with fp32 output:
   torch's `mm` with `out_dtype` goes to cuBLASLt / cuBLAS; the profiler's kernel names, printed
   once per shape, say which: `nvjet_*`, `sm90_xmma_*` or `cutlass_*` are cuBLAS's own). Where
   `out_dtype` does not run (the CPU; a torch before 2.8), the fp32 product of the same bf16
   values, said in the log.
2. `router_kernel` (SGLang's `_router_triton_kernel` design): one warp per program
   (num_warps = 1), BLOCK_M rows per program (max(1, min(4, 256 // BLOCK_N)), as SGLang tiles
   them: 2 rows at 128 experts, 1 at 288), BLOCK_N = the next power of two of E (the row held in
   the warp's registers, masked past E). The scores (softmax over the row for Qwen3; sigmoid for
   the GLM-like shape) and the rank keys (the softmax's logits; sigmoid + the selection bias) are
   two arrays; then k rounds: the row max of the keys, the lowest expert id among the experts
   that hold it (ties), that expert's score gathered, its key set to −∞. After k rounds, the k
   scores divided by their sum (renormalised; both shapes), stored with the ids (int32).

The inputs are the bench's own (tools/bench/src/ch05.rs `Input::new`): hidden states
patterned(T·H, 3 + T, 1.0) and gate weight patterned(E·H, 1, 0.02), each rounded to bf16, and
the GLM-like bias 8 + patterned(E, 2, 0.05) in fp32 (chapter 1's generator, computed here by
ch04_grouped_mm.patterned; the first and last values are compared with a direct evaluation of
chapter 1's formula in Python integers). The row counts are chapter 5's (ROWS: keep them equal to
tools/bench/src/ch05.rs's ROWS; --rows overrides).

Checks (before timing; a wrong row count is printed FAILED, not timed, and the script exits 1):
the ids against an fp64 oracle on the same bf16 inputs (exact dot products, the scores and keys
in fp64): on every row whose k-th and (k+1)-th keys are further apart than an fp32 GEMM could
move them (2^-20 of the sum of the products' magnitudes, times the key's slope: a clear cut,
where fp32 rounding cannot change the choice), the k ids must be the oracle's as a set, and at
least half of the rows must be such rows, as the bench asks of ours; the weights within 1e-4 of
the oracle's on those rows. The bench checks our pair's ids on the same inputs against chapter
1's f64 oracle (on the logits our GEMM computed, every row with a clear cut there): on the rows
clear-cut for both, both are the oracle's ids, so the same ids.

Method: router5.py's `measure` (a CUDA graph of the two launches; cold: a flush of four times
the L2 before each replay; warm: a graph of N copies). The samples as router5.py writes them
(`chapter` ch05); `bench ch05 --peers` merges them (tools/gpu/run joins this file and
router5.py's with merge_peers.py).
"""

import argparse
import os
import sys

try:
    import torch
except ImportError:
    sys.exit("engines_router: needs PyTorch (pip install torch) and Triton")

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router5 import IDENTITY  # noqa: E402  (one column list for every peer)

IMPL = "engines_router"
# Chapter 5's row counts: tools/bench/src/ch05.rs's ROWS (the bench refuses a peer row without a
# case at its shape and rows).
ROWS = [1, 2, 4, 6, 8, 12, 16, 32, 64, 96, 128, 256, 512, 1024, 2048, 4096, 8192]
SHAPES = [
    # name, hidden, experts, k, scoring (chapter 5's: tools/bench/src/ch01.rs SHAPES)
    ("glm_h4096_e288_k8", 4096, 288, 8, "sigmoid"),
    ("qwen3_h2048_e128_k8", 2048, 128, 8, "softmax"),
]
WEIGHT_TOL = 1e-4


if triton is not None:
    @triton.jit
    def router_kernel(logits_ptr, bias_ptr, w_ptr, ids_ptr, M,
                      E: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SIGMOID: tl.constexpr,
                      HAS_BIAS: tl.constexpr):
        """ids, weights [M, K] of fp32 logits [M, E]: BLOCK_M rows per program."""
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        row_in = rows < M
        col_in = cols < E
        x = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * E + cols[None, :],
                    mask=row_in[:, None] & col_in[None, :], other=0.0)
        if SIGMOID:
            scores = 1.0 / (1.0 + tl.exp(-x))
            keys = scores
        else:
            keys = tl.where(col_in[None, :], x, float("-inf"))
            e = tl.where(col_in[None, :], tl.exp(keys - tl.max(keys, axis=1)[:, None]), 0.0)
            scores = e / tl.sum(e, axis=1)[:, None]
        if HAS_BIAS:
            keys = keys + tl.load(bias_ptr + cols, mask=col_in, other=0.0)[None, :]
        keys = tl.where(col_in[None, :], keys, float("-inf"))
        slots = tl.arange(0, BLOCK_K)
        got_w = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        got_i = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.int32)
        for j in tl.static_range(K):
            best = tl.max(keys, axis=1)
            who = tl.min(tl.where(keys == best[:, None], cols[None, :], BLOCK_N), axis=1)
            hit = cols[None, :] == who[:, None]
            w = tl.sum(tl.where(hit, scores, 0.0), axis=1)
            got_w = tl.where(slots[None, :] == j, w[:, None], got_w)
            got_i = tl.where(slots[None, :] == j, who[:, None], got_i)
            keys = tl.where(hit, float("-inf"), keys)
        total = tl.sum(got_w, axis=1)
        got_w = got_w / tl.where(total > 0.0, total, 1.0)[:, None]
        out = rows.to(tl.int64)[:, None] * K + slots[None, :]
        m = row_in[:, None] & (slots[None, :] < K)
        tl.store(w_ptr + out, got_w, mask=m)
        tl.store(ids_ptr + out, got_i, mask=m)


def _mm_out_dtype(device):
    """Whether `torch.mm(..., out_dtype=torch.float32)` runs on bf16 here (CUDA, torch ≥ 2.8)."""
    try:
        a = torch.ones(2, 16, dtype=torch.bfloat16, device=device)
        return torch.mm(a, a.t(), out_dtype=torch.float32).dtype == torch.float32
    except (TypeError, RuntimeError):  # NotImplementedError (the CPU) is a RuntimeError
        return False


MM_OUT_DTYPE = {}


def gate_gemm(hidden, gate):
    """fp32 logits [T, E] of bf16 hidden [T, H] and gate [E, H]: one cuBLAS bf16 GEMM with fp32
    output on CUDA. Without `out_dtype` (the CPU; an older torch), the fp32 product of the same
    bf16 values (on CUDA an fp32 cuBLAS GEMM, TF32 off: said in the log)."""
    dev = hidden.device.type
    if dev not in MM_OUT_DTYPE:
        MM_OUT_DTYPE[dev] = _mm_out_dtype(hidden.device)
        if not MM_OUT_DTYPE[dev]:
            print(f"engines_router: torch.mm(out_dtype=float32) does not run on {dev}: the gate "
                  f"GEMM is the fp32 product of the bf16 values instead", flush=True)
    if MM_OUT_DTYPE[dev]:
        return torch.mm(hidden, gate.t(), out_dtype=torch.float32)
    return hidden.float() @ gate.float().t()


class EnginesRouter:
    """The two launches on fixed buffers (capturable)."""

    def __init__(self, hidden, gate, bias, k, scoring):
        self.hidden, self.gate, self.bias, self.k = hidden, gate, bias, k
        self.T, self.E = hidden.shape[0], gate.shape[0]
        self.sigmoid = scoring == "sigmoid"
        self.block_n = triton.next_power_of_2(self.E)
        self.block_m = max(1, min(4, 256 // self.block_n))
        dev = hidden.device
        self.w = torch.empty(self.T, k, dtype=torch.float32, device=dev)
        self.ids = torch.empty(self.T, k, dtype=torch.int32, device=dev)
        self.dummy = torch.zeros(1, dtype=torch.float32, device=dev)

    def __call__(self):
        logits = gate_gemm(self.hidden, self.gate)
        router_kernel[(triton.cdiv(self.T, self.block_m),)](
            logits, self.bias if self.bias is not None else self.dummy, self.w, self.ids, self.T,
            E=self.E, K=self.k, BLOCK_M=self.block_m, BLOCK_N=self.block_n,
            BLOCK_K=triton.next_power_of_2(self.k), SIGMOID=self.sigmoid,
            HAS_BIAS=self.bias is not None, num_warps=1)
        return self.ids, self.w


def patterned_direct(i, salt, scale):
    """Value i of chapter 1's `patterned(_, salt, scale)` in Python integers and floats."""
    from ch04_grouped_mm import splitmix64_int
    import struct
    h = splitmix64_int(splitmix64_int(salt) ^ i)
    u = (h >> 40) / float(1 << 24)
    f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]  # noqa: E731
    return f32(f32(2 * u - 1) * f32(scale))


def inputs(T, H, E, bias, device):
    """The bench's inputs at T rows: hidden [T, H] bf16, gate [E, H] bf16, bias [E] f32 or None."""
    from ch04_grouped_mm import patterned
    hidden = patterned(0, T * H, 3 + T, 1.0, device)
    gate = patterned(0, E * H, 1, 0.02, device)
    for t, n, salt, scale in ((hidden, T * H, 3 + T, 1.0), (gate, E * H, 1, 0.02)):
        for i in (0, n - 1):
            if t[i].item() != patterned_direct(i, salt, scale):
                raise SystemExit(f"engines_router: the generator differs from chapter 1's at value "
                                 f"{i} of salt {salt}: not the bench's inputs")
    b = 8.0 + patterned(0, E, 2, 0.05, device) if bias else None
    return (hidden.to(torch.bfloat16).view(T, H), gate.to(torch.bfloat16).view(E, H), b)


def oracle(hidden, gate, bias, scoring):
    """fp64: (keys [T, E], scores [T, E], how far an fp32 GEMM may move each key [T, E]) of the
    bf16 values. The bound: 2^-20 of the sum of the products' magnitudes (an fp32 sum's error,
    with room), times the key's slope (1/4 at most for a sigmoid)."""
    logits = hidden.double() @ gate.double().t()
    slack = (hidden.double().abs() @ gate.double().abs().t()) * 2.0 ** -20
    if scoring == "sigmoid":
        scores = torch.sigmoid(logits)
        keys, slack = scores, slack / 4
    else:
        scores = torch.softmax(logits, dim=-1)
        keys = logits
    if bias is not None:
        keys = keys + bias.double()
    return keys, scores, slack


def check_ids(ids, w, hidden, gate, bias, k, scoring):
    """(clear-cut rows, rows, clear-cut rows with other ids, max weight error on clear-cut rows).
    A row is clear-cut when its k-th and (k+1)-th keys are further apart than their two slacks:
    no fp32 rounding of the logits can swap them."""
    keys, scores, slack = oracle(hidden, gate, bias, scoring)  # fp64, on the inputs' device
    top = keys.topk(k + 1, dim=-1)
    kth, nxt = top.indices[:, k - 1:k], top.indices[:, k:k + 1]
    gap = (keys.gather(1, kth) - keys.gather(1, nxt)).squeeze(1)
    clear = gap > (slack.gather(1, kth) + slack.gather(1, nxt)).squeeze(1)
    want = top.indices[:, :k].sort(dim=-1).values
    got = ids.long().sort(dim=-1).values
    bad = int(((want != got).any(dim=-1) & clear).sum().item())
    chosen = scores.gather(1, ids.long())
    want_w = chosen / chosen.sum(-1, keepdim=True)
    err = (w.double() - want_w).abs().max(dim=-1).values
    werr = err[clear].max().item() if clear.any() else 0.0
    return int(clear.sum().item()), ids.shape[0], bad, werr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", help="where the raw samples go (CSV); needs a CUDA GPU")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check-only", action="store_true", help="check, time nothing")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", help="comma-separated row counts (default: chapter 5's)")
    args = ap.parse_args()
    if triton is None:
        sys.exit("engines_router: triton is not installed (pip install triton)")
    device = args.device
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("engines_router: --device cpu runs the kernel in Triton's interpreter: set "
                 "TRITON_INTERPRET=1")
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("engines_router: no CUDA GPU here: timing needs one; TRITON_INTERPRET=1 "
                 "--check-only --device cpu checks the kernel")
    if not args.check_only and (not device.startswith("cuda") or not args.samples):
        sys.exit("engines_router: timing needs --device cuda and --samples")
    rows_list = [int(r) for r in args.rows.split(",")] if args.rows else ROWS
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    torch.set_float32_matmul_precision("highest")
    if device.startswith("cuda"):
        from router5 import launches, measure
        name = torch.cuda.get_device_name(0).replace(" ", "_")
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device=device).fill_(1)
    else:
        name, flush = "cpu", None
    print(f"ch05 engines' peer ({IMPL}): torch {torch.__version__}, triton {triton.__version__}, "
          f"{name}; rows {rows_list}; ids checked against the fp64 oracle on clear-cut rows"
          f"{'; --check-only: nothing timed' if args.check_only else ''}", flush=True)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    failures = 0
    for shape, H, E, k, scoring in SHAPES:
        for T in rows_list:
            try:
                hidden, gate, bias = inputs(T, H, E, scoring == "sigmoid", device)
                r = EnginesRouter(hidden, gate, bias, k, scoring)
                ids, w = r()
                clear, n, bad, werr = check_ids(ids, w, hidden, gate, bias, k, scoring)
                ok = bad == 0 and 2 * clear >= n and werr <= WEIGHT_TOL
                what = (f"{clear} of {n} rows clear-cut, {bad} with other ids, weights within "
                        f"{werr:.1e}")
                if not ok:
                    failures += 1
                    print(f"{shape} {T:5} {IMPL}: FAILED: {what}: not timed", flush=True)
                    continue
                if args.check_only:
                    print(f"{shape} {T:5} {IMPL}: {what}", flush=True)
                    continue
                if T == rows_list[0]:
                    with torch.profiler.profile(
                            activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                        r()
                        torch.cuda.synchronize()
                    kernels = sorted({e.name for e in prof.events()
                                      if e.device_type == torch.autograd.DeviceType.CUDA})
                    print(f"{shape}: kernels of one call: {kernels}", flush=True)
                n_launch = launches(r)
                cold, warm = measure(r, flush, cold_n, warm_n, copies)
            except Exception as err:
                failures += 1
                print(f"{shape} {T:5} {IMPL}: FAILED: {type(err).__name__}: {err}", flush=True)
                continue
            record = {"chapter": "ch05", "shape": shape, "impl": IMPL, "rows": T,
                      "launches": n_launch, "device": name}
            lines.append(",".join(str(record[c]) for c in IDENTITY)
                         + "," + " ".join(f"{v:.3f}" for v in cold)
                         + "," + " ".join(f"{v:.3f}" for v in warm))
            print(f"{shape:22} {T:5} {IMPL} cold ~{sorted(cold)[len(cold) // 2]:9.2f} us  "
                  f"warm ~{sorted(warm)[len(warm) // 2]:9.2f} us  launches {n_launch}  {what}",
                  flush=True)
    if args.samples and not args.check_only:
        with open(args.samples, "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"ch05 engines' peer: {len(lines) - 1} measurements"
          + (f" written to {args.samples}" if args.samples and not args.check_only else "")
          + (f", {failures} FAILED" if failures else ""), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
