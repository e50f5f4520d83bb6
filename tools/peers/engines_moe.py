"""The engines' fused MoE as a peer of chapter 4: the kernel design SGLang and vLLM run (their
`fused_moe_kernel` and the three kernels around it), written here from scratch in Triton, with
the engines' tuned configurations, measured exactly as tools/bench measures our fused layer, in
the same GPU session, on exactly the same routings, weights and hidden states
(ch04_grouped_mm.py's `Layer`: the bench's generator, checked bit for bit against the routing
file), so its output can be compared with ours.

    python3 tools/peers/engines_moe.py --routing R.safetensors --samples RESULTS/ch04_engines.csv \\
        --outputs RESULTS/ch04_engines_outputs.safetensors [--quick]
    python3 tools/peers/engines_moe.py --routing R.safetensors --outputs O.safetensors \\
        --check-only --device cpu          the same kernels under TRITON_INTERPRET=1, nothing timed
    python3 tools/peers/engines_moe.py --self-check --device cpu
                                           small synthetic shapes against plain torch (no file)
    python3 tools/peers/engines_moe.py --tune --routing R.safetensors \\
        --shape glm_h4096_i1024_e288_k8 --out-dir DIR
                                           the configuration sweep (see "Tuning" below)

The design (one implementation, impl `engines_triton`; four kernels in the timed call):

1. The align step (chapter 3's `moe_align_block_size`, `ch03_align.align_torch`: the pairs
   sorted by expert, each expert's run padded to BLOCK_SIZE_M, the expert of every tile) at the
   configuration's BLOCK_SIZE_M. It is given free: computed before capture, outside the timed
   call (our layer's align is inside ours).
2. `fused_moe_kernel` on w13: a 1-D grid over (tile, column block), swizzled by GROUP_SIZE_M
   (GROUP_SIZE_M tiles share each column block before the next); each program loads its tile's
   BLOCK_SIZE_M pair ids from `sorted_ids`, gathers their hidden rows (pair id // k), and runs
   `tl.dot` over K in BLOCK_SIZE_K steps against its expert's w13 [2I, H] slice (read as
   [K, N]); the fp32 accumulator is rounded to bf16 and stored at the pair's row of a [T·k, 2I]
   buffer, masked by pair id (padding slots hold T·k and store nothing). Programs whose tile lies
   past the padded total return at once.
3. `silu_and_mul_kernel`: [T·k, 2I] → [T·k, I], silu(gate)·up in fp32, rounded to bf16 (its own
   kernel, between the GEMMs, as the engines run it).
4. `fused_moe_kernel` on w2 (k = 1: the A rows are the pair ids themselves), with the routing
   weight (f32) multiplied into the fp32 accumulator in the epilogue before the bf16 store into
   [T·k, H].
5. `moe_sum_kernel`: each token's k rows summed in fp32 in slot order, rounded to bf16 → [T, H].

Configurations (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages by batch bucket, one for
both GEMMs, the bucket the key nearest to M = T, as vLLM's `get_config` picks it):
the table named for the GPU this runs on where there is one, as vLLM looks its tables up, else
the H200's: tools/peers/configs/E=128,N=768,device_name=NVIDIA_H200.json and
..._NVIDIA_H100_80GB_HBM3.json are vLLM's published tables for Qwen3-30B-A3B's shape on the H200
and the H100 (sources and commits in tools/peers/configs/README.md); for the
GLM-like shape (E 288, N = I 1024) no table is published, and
tools/peers/configs/E=288,N=1024,device_name=NVIDIA_H200.json and ..._NVIDIA_H100_80GB_HBM3.json
hold the winners of this script's sweep on each GPU. On a GPU with no table of its own the H200's
is read (vLLM would fall back to its default configuration there); the name is device 0's.

Tuning (--tune): the candidates of vLLM's benchmarks/kernels/benchmark_moe.py
(`get_configs_compute_bound`: num_stages 2-5, BLOCK_SIZE_M 16-256, BLOCK_SIZE_K 64-256,
BLOCK_SIZE_N 32-256, num_warps 4/8, GROUP_SIZE_M 1/16/32/64: 1,920), pruned (`candidates`):
BLOCK_SIZE_M twice the next power of two of the pairs per active expert at that T (a larger tile
is mostly padding) and the one below it (two below from 512 tokens), at least 16; BLOCK_SIZE_N
64-256 and BLOCK_SIZE_K 64-128 (32-wide columns and 256-deep steps are rare in vLLM's published
H200 tables); num_stages 3-4 (2 and 5 appear there too, less often); GROUP_SIZE_M 1 and 16 (the
only values in those tables), 16 only where there are more than 16 tiles; 8 warps only for
tiles of at least 64 × 128; the stages' shared memory at most 200 KiB. At the GLM-like shape
that leaves 10, 20, 20, 44 and 88 candidates at 1, 8, 64, 512 and 4,096 tokens (132 distinct).
Each candidate runs the bench's own routing at each T, is checked against the fp32 reference
and timed as below (fewer samples: --tune-samples cold, 3 warm); the winner is the lowest cold
median. Writes the sweep CSV and the winners' JSON into --out-dir. The kernels are compiled in
parallel first (worker processes fill Triton's cache).

Checks: the output against chapter 2's fp32 reference (ch02_moe_loop.reference_fp32, the
peers' tolerance), written as `out.engines_triton.S.T` bf16 [T, H] to --outputs for the bench
to compare with ours (ch04_check.csv). Method: router5.py's `measure` (a CUDA graph of the four
kernels, cold by a flush of four times the L2 before each replay, warm a graph of N copies),
the samples as ch04_grouped_mm.py writes them.
"""

import argparse
import csv
import json
import math
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("engines_moe: needs PyTorch (pip install torch) and Triton: the peer is a Triton "
             "kernel launched on torch tensors")

try:
    import triton
    import triton.language as tl
except ImportError:  # the message comes from main()
    triton = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ch03_align import align_torch  # noqa: E402  (the align step, given free)
from ch02_moe_loop import TOLERANCE, check, read_safetensors, reference_fp32, to_torch  # noqa: E402

IMPL = "engines_triton"
# Under TRITON_INTERPRET=1 (the CPU check), the interpreter's `tl.dot` gives garbage on bf16
# operands (numpy has no bf16) and its fp32 → bf16 cast truncates: there (WIDEN) the GEMM widens
# the operands to fp32 first, which changes no product (each bf16 × bf16 product is exact in
# fp32), and `to_bf16` rounds to nearest even on the bits. On a GPU neither happens.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def config_path(E, N, device_name=None):
    """The configuration file of E experts and intermediate size N, named as vLLM names it: the
    table of the GPU this runs on where there is one (as vLLM looks its tables up by the device's
    name), else the H200's (the name given, when given)."""
    if device_name is None:
        if torch.cuda.is_available():
            here = torch.cuda.get_device_name(0).replace(" ", "_")
            path = os.path.join(CONFIG_DIR, f"E={E},N={N},device_name={here}.json")
            if os.path.exists(path):
                return path
        device_name = "NVIDIA_H200"
    return os.path.join(CONFIG_DIR, f"E={E},N={N},device_name={device_name}.json")


def load_configs(path):
    """{batch bucket: configuration} from a vLLM-style JSON file."""
    with open(path) as f:
        return {int(m): c for m, c in json.load(f).items()}


def pick(configs, M):
    """The configuration of the bucket nearest to M (vLLM's `get_config`: min over the keys of
    |key - M|; the smaller key on a tie, as min keeps the first in ascending order)."""
    return configs[min(sorted(configs), key=lambda m: abs(m - M))]


if triton is not None:
    @triton.jit
    def to_bf16(x, WIDEN: tl.constexpr):
        """fp32 → bf16, to nearest even. The interpreter's cast truncates: under it (WIDEN) the
        rounding is done on the bits first, so the cast that follows is exact."""
        if WIDEN:
            bits = x.to(tl.uint32, bitcast=True)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
            x = bits.to(tl.float32, bitcast=True)
        return x.to(tl.bfloat16)

    @triton.jit(do_not_specialize=["EM", "num_valid"])
    def fused_moe_kernel(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ids_ptr, expert_ids_ptr, total_ptr,
                         N, K, EM, num_valid,
                         stride_am, stride_be, stride_bn, stride_cm,
                         TOP_K: tl.constexpr, MUL_WEIGHT: tl.constexpr,
                         BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                         BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                         WIDEN: tl.constexpr = False):
        """C[pair] = A[pair // TOP_K] @ B[expert]ᵀ (· w[pair]) for the BLOCK_SIZE_M pairs of one
        tile and BLOCK_SIZE_N columns. A [*, K] row-major, B [E, N, K] (each expert's rows are
        output columns, read as [K, N]), C [*, N] row-major, bf16; w f32 [pairs]."""
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(EM, BLOCK_SIZE_M)
        tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
        # The swizzle: groups of GROUP_SIZE_M tiles walk the column blocks together, so the
        # programs resident at once share B's column blocks and A's rows in L2.
        per_group = GROUP_SIZE_M * tiles_n
        group = pid // per_group
        first_m = group * GROUP_SIZE_M
        group_m = tl.minimum(tiles_m - first_m, GROUP_SIZE_M)
        pid_m = first_m + ((pid % per_group) % group_m)
        pid_n = (pid % per_group) // group_m
        if pid_m * BLOCK_SIZE_M >= tl.load(total_ptr):
            return  # a tile past the padded total: nothing to do
        slots = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        pairs = tl.load(sorted_ids_ptr + slots)  # [BM] pair ids; padding = num_valid
        valid = pairs < num_valid
        expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
        cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        cols_in = cols % N  # loads stay in bounds; the store masks the tail
        ks = tl.arange(0, BLOCK_SIZE_K)
        rows = (pairs // TOP_K).to(tl.int64)  # the gathered A rows
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :]
        b_ptrs = (b_ptr + expert * stride_be + cols_in.to(tl.int64)[None, :] * stride_bn
                  + ks[:, None])
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            left = K - kb * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=valid[:, None] & (ks[None, :] < left), other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < left, other=0.0)
            if WIDEN:  # the interpreter only (see INTERPRET): exact, bf16 products fit fp32
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc += tl.dot(a, b)
            a_ptrs += BLOCK_SIZE_K
            b_ptrs += BLOCK_SIZE_K
        if MUL_WEIGHT:
            w = tl.load(w_ptr + pairs, mask=valid, other=0.0)
            acc = acc * w[:, None]
        c_ptrs = c_ptr + pairs.to(tl.int64)[:, None] * stride_cm + cols[None, :]
        tl.store(c_ptrs, to_bf16(acc, WIDEN), mask=valid[:, None] & (cols[None, :] < N))

    @triton.jit
    def silu_and_mul_kernel(h_ptr, out_ptr, inter, BLOCK: tl.constexpr, WIDEN: tl.constexpr):
        """out[r, :] = silu(h[r, :I]) · h[r, I:], in fp32, rounded to bf16; one program per row
        and BLOCK columns."""
        r = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = c < inter
        g = tl.load(h_ptr + r * 2 * inter + c, mask=m, other=0.0).to(tl.float32)
        u = tl.load(h_ptr + r * 2 * inter + inter + c, mask=m, other=0.0).to(tl.float32)
        y = g / (1.0 + tl.exp(-g)) * u
        tl.store(out_ptr + r * inter + c, to_bf16(y, WIDEN), mask=m)

    @triton.jit
    def moe_sum_kernel(y_ptr, out_ptr, H, TOP_K: tl.constexpr, BLOCK: tl.constexpr,
                       WIDEN: tl.constexpr):
        """out[t, :] = Σ_j y[t·k + j, :], fp32 in slot order, rounded to bf16."""
        t = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = c < H
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for j in tl.static_range(TOP_K):
            acc += tl.load(y_ptr + (t * TOP_K + j) * H + c, mask=m, other=0.0).to(tl.float32)
        tl.store(out_ptr + t * H + c, to_bf16(acc, WIDEN), mask=m)


def gemm_grid(EM, N, cfg):
    return (triton.cdiv(EM, cfg["BLOCK_SIZE_M"]) * triton.cdiv(N, cfg["BLOCK_SIZE_N"]),)


def launch_gemm(a, b, c, w, align, num_valid, top_k, mul_weight, cfg):
    """One `fused_moe_kernel` launch: a [*, K], b [E, N, K], c [*, N] bf16 contiguous."""
    sorted_ids, expert_ids, total = align
    E, N, K = b.shape
    EM = sorted_ids.numel()
    fused_moe_kernel[gemm_grid(EM, N, cfg)](
        a, b, c, w, sorted_ids, expert_ids, total, N, K, EM, num_valid,
        a.stride(0), b.stride(0), b.stride(1), c.stride(0),
        TOP_K=top_k, MUL_WEIGHT=mul_weight,
        BLOCK_SIZE_M=cfg["BLOCK_SIZE_M"], BLOCK_SIZE_N=cfg["BLOCK_SIZE_N"],
        BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], WIDEN=INTERPRET)


class EnginesMoE:
    """The four kernels on one routing: `prepare` (outside the timed call: the align at the
    configuration's BLOCK_SIZE_M, the buffers), then `__call__(x)` → [T, H] bf16, capturable."""

    def __init__(self, w13, w2, cfg):
        self.w13, self.w2, self.cfg = w13, w2, cfg
        self.E, self.I2, self.H = w13.shape
        self.I = w2.shape[-1]

    def prepare(self, ids, wts):
        T, k = ids.shape
        dev = self.w13.device
        self.T, self.k, self.P = T, k, T * k
        self.align = align_torch(ids, self.E, self.cfg["BLOCK_SIZE_M"])
        self.wts = wts.reshape(-1).to(torch.float32).contiguous()
        self.h = torch.empty(self.P, self.I2, dtype=torch.bfloat16, device=dev)
        self.a = torch.empty(self.P, self.I, dtype=torch.bfloat16, device=dev)
        self.y = torch.empty(self.P, self.H, dtype=torch.bfloat16, device=dev)
        self.out = torch.empty(T, self.H, dtype=torch.bfloat16, device=dev)
        return self

    def __call__(self, x):
        cfg, P = self.cfg, self.P
        launch_gemm(x, self.w13, self.h, self.wts, self.align, P, self.k, False, cfg)
        silu_and_mul_kernel[(P, triton.cdiv(self.I, 1024))](
            self.h, self.a, self.I, BLOCK=1024, WIDEN=INTERPRET)
        launch_gemm(self.a, self.w2, self.y, self.wts, self.align, P, 1, True, cfg)
        moe_sum_kernel[(self.T, triton.cdiv(self.H, 1024))](
            self.y, self.out, self.H, TOP_K=self.k, BLOCK=1024, WIDEN=INTERPRET)
        return self.out


# ---------------------------------------------------------------------------------------------
# Tuning.

def next_pow2(n):
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def candidates(T, k, E):
    """The pruned subset of vLLM's `get_configs_compute_bound` for T tokens (see the module)."""
    per_expert = T * k / min(E, T * k)  # pairs per active expert, at least 1
    top = max(16, min(256, 2 * next_pow2(math.ceil(per_expert))))
    ms = [m for m in (16, 32, 64, 128, 256) if m <= top]
    ms = ms[-3:] if T >= 512 else ms[-2:]
    out = []
    for bm in ms:
        tiles = math.ceil(T * k / bm) + min(E, T * k)  # at most
        for bn in (64, 128, 256):
            for bk in (64, 128):
                for warps in (4, 8):
                    if warps == 8 and bm * bn < 64 * 128:
                        continue
                    for stages in (3, 4):
                        if (bm * bk + bk * bn) * 2 * stages > 200 * 1024:
                            continue
                        for group in (1, 16):
                            if group == 16 and tiles <= 16:
                                continue
                            out.append({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk,
                                        "GROUP_SIZE_M": group, "num_warps": warps,
                                        "num_stages": stages})
    return out


def _compile_worker(job):
    """Compiles both GEMMs of each configuration in `job` (Triton's cache then holds them)."""
    (H, I, E, k), cfgs = job
    dev = "cuda"
    i32 = torch.zeros(16, dtype=torch.int32, device=dev)
    f32 = torch.zeros(16, dtype=torch.float32, device=dev)
    bf = torch.zeros(16, dtype=torch.bfloat16, device=dev)
    done = 0
    for cfg in cfgs:
        meta = dict(BLOCK_SIZE_M=cfg["BLOCK_SIZE_M"], BLOCK_SIZE_N=cfg["BLOCK_SIZE_N"],
                    BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
                    num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        try:
            # The same arguments' types and specialisations as launch_gemm's (EM and num_valid
            # are not specialised; the strides are the real ones).
            fused_moe_kernel.warmup(bf, bf, bf, f32, i32, i32, i32, 2 * I, H, 4096, 4096,
                                    H, 2 * I * H, H, 2 * I, TOP_K=k, MUL_WEIGHT=False,
                                    grid=(1,), **meta)
            fused_moe_kernel.warmup(bf, bf, bf, f32, i32, i32, i32, H, I, 4096, 4096,
                                    I, H * I, I, H, TOP_K=1, MUL_WEIGHT=True, grid=(1,), **meta)
            done += 1
        except Exception:  # the timing pass compiles (and reports) it
            pass
    return done


def precompile(shape_dims, cfgs, workers):
    import multiprocessing as mp
    jobs = [(shape_dims, cfgs[i::workers]) for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        return sum(pool.map(_compile_worker, jobs))


def tune(args, meta, tensors, device, flush):
    from ch04_grouped_mm import Layer  # the bench's weights, checked
    from router5 import measure
    shape = args.shape
    tokens = [int(t) for t in (args.tokens or meta["tokens"]).split(",")]
    layer = Layer(meta, tensors, shape, device)
    w13, w2 = layer.w["w13"], layer.w["w2"]
    H, I, E, k = layer.H, layer.I, layer.E, layer.k
    all_cfgs = []
    for T in tokens:
        for c in candidates(T, k, E):
            if c not in all_cfgs:
                all_cfgs.append(c)
    t0 = time.time()
    n = precompile((H, I, E, k), all_cfgs, args.workers) if args.workers > 0 else 0
    print(f"tune {shape}: {len(all_cfgs)} configurations, {n} compiled in "
          f"{time.time() - t0:.1f} s by {args.workers} processes", flush=True)
    os.makedirs(args.out_dir, exist_ok=True)
    rows, winners = [], {}
    name = torch.cuda.get_device_name(0).replace(" ", "_")
    for T in sorted(tokens, reverse=True):  # the longest sweep first
        ids = to_torch(*tensors[f"topk_ids.{shape}.{T}"], device).long()
        wts = to_torch(*tensors[f"topk_weights.{shape}.{T}"], device)
        x = layer.hidden(T)
        ref = reference_fp32(x, w13, w2, ids, wts)
        best = None
        for cfg in candidates(T, k, E):
            moe = EnginesMoE(w13, w2, cfg).prepare(ids, wts)
            fn = lambda: moe(x)  # noqa: E731
            try:
                t1 = time.time()
                diff, scale, ok = check(fn(), ref)
                cold, warm = measure(fn, flush, args.tune_samples, 3, 3)
            except Exception as err:
                print(f"tune {shape} {T:5} {cfg}: FAILED {type(err).__name__}: {str(err)[:120]}",
                      flush=True)
                continue
            cold_med = sorted(cold)[len(cold) // 2]
            warm_med = sorted(warm)[len(warm) // 2]
            rows.append({"shape": shape, "tokens": T, **cfg, "cold_median_us": f"{cold_med:.3f}",
                         "warm_median_us": f"{warm_med:.3f}", "ok": int(ok),
                         "rel_err": f"{diff / max(scale, 1e-30):.2e}", "device": name})
            if ok and (best is None or cold_med < best[0]):
                best = (cold_med, cfg)
            print(f"tune {shape} {T:5} {cfg} cold {cold_med:9.2f} warm {warm_med:9.2f} us "
                  f"ok {int(ok)} ({time.time() - t1:.1f} s)", flush=True)
        if best is None:
            sys.exit(f"tune {shape} {T}: no configuration ran and was right")
        winners[str(T)] = best[1]
        print(f"tune {shape} {T:5}: winner {best[1]} at {best[0]:.2f} us cold", flush=True)
        # Written after every T: a sweep cut short keeps what it measured.
        with open(os.path.join(args.out_dir, f"tune_{shape}.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)
        # Named for the GPU it ran on (`name`, as in the rows), as vLLM names its tables.
        path = os.path.join(args.out_dir, os.path.basename(config_path(E, I, name)))
        with open(path, "w") as f:
            json.dump(dict(sorted(winners.items(), key=lambda kv: int(kv[0]))), f, indent=4)
            f.write("\n")
    print(f"tune {shape}: {len(rows)} timings; winners written to {path}", flush=True)


# ---------------------------------------------------------------------------------------------
# The synthetic self-check (no routing file): small shapes against plain torch.

def self_check(device):
    """The four kernels at small shapes (with K and N tails, padding slots, experts without
    pairs) against chapter 2's fp32 reference; returns the number of failures."""
    failures = 0
    gen = torch.Generator().manual_seed(7)
    shapes = [(96, 48, 8, 2), (64, 32, 5, 3)]  # H, I, E, k
    cfgs = [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
             "num_warps": 4, "num_stages": 2},
            {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2,
             "num_warps": 4, "num_stages": 2}]
    for H, I, E, k in shapes:
        w13 = (torch.rand(E, 2 * I, H, generator=gen) * 0.2 - 0.1).to(torch.bfloat16).to(device)
        w2 = (torch.rand(E, H, I, generator=gen) * 0.2 - 0.1).to(torch.bfloat16).to(device)
        for T in (1, 5, 37):
            x = (torch.rand(T, H, generator=gen) * 2 - 1).to(torch.bfloat16).to(device)
            logits = torch.rand(T, E, generator=gen)
            wts, ids = torch.softmax(logits, -1).topk(k, dim=-1)
            wts = (wts / wts.sum(-1, keepdim=True)).to(device)
            ids = ids.to(device)
            ref = reference_fp32(x, w13, w2, ids, wts)
            for cfg in cfgs:
                out = EnginesMoE(w13, w2, cfg).prepare(ids, wts)(x)
                diff, scale, ok = check(out, ref)
                failures += not ok
                print(f"self-check H {H} I {I} E {E} k {k} T {T:3} BM {cfg['BLOCK_SIZE_M']} "
                      f"BN {cfg['BLOCK_SIZE_N']} BK {cfg['BLOCK_SIZE_K']} G {cfg['GROUP_SIZE_M']}: "
                      f"max |out - fp32 ref| {diff:.3e} of max |ref| {scale:.3e}: "
                      f"{'ok' if ok else 'FAILED'}", flush=True)
    return failures


# ---------------------------------------------------------------------------------------------
# The bench flow.

def config_for(layer, T):
    """The configuration of this shape at T tokens, and the file it comes from."""
    path = config_path(layer.E, layer.I)
    if not os.path.exists(path):
        # The emulator's tiny shapes have no table: the smallest of vLLM's candidate tiles.
        return ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                 "num_warps": 4, "num_stages": 2}, "no table: the smallest candidate")
    return pick(load_configs(path), T), os.path.basename(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routing", help="the routings (bench ch04 --export-routing)")
    ap.add_argument("--samples", help="where the raw samples go (CSV); needs a CUDA GPU")
    ap.add_argument("--outputs", help="where every output goes (safetensors)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check-only", action="store_true",
                    help="compute and check the outputs, time nothing (runs on a CPU)")
    ap.add_argument("--self-check", action="store_true",
                    help="small synthetic shapes against plain torch, no routing file")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tune", action="store_true", help="sweep the configurations (a GPU)")
    ap.add_argument("--shape", help="--tune: the shape to tune (a name in the routing file)")
    ap.add_argument("--tokens", help="--tune: comma-separated token counts (default: the file's)")
    ap.add_argument("--out-dir", help="--tune: where the sweep CSV and the winners go")
    ap.add_argument("--workers", type=int, default=12, help="--tune: compiling processes")
    ap.add_argument("--tune-samples", type=int, default=20, help="--tune: cold samples each")
    args = ap.parse_args()
    if triton is None:
        sys.exit("engines_moe: triton is not installed (pip install triton): the peer is a Triton "
                 "kernel")
    device = args.device
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    if device == "cpu" and not interp:
        sys.exit("engines_moe: --device cpu runs the Triton kernels in the interpreter: set "
                 "TRITON_INTERPRET=1")
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("engines_moe: no CUDA GPU here: timing needs one. TRITON_INTERPRET=1 with "
                 "--check-only --device cpu (or --self-check --device cpu) checks the kernels")
    torch.set_float32_matmul_precision("highest")
    if args.self_check:
        failures = self_check(device)
        print(f"engines_moe self-check: {failures} FAILED" if failures
              else "engines_moe self-check: every case within the tolerance", flush=True)
        sys.exit(1 if failures else 0)
    if not args.routing:
        sys.exit("engines_moe: --routing is needed (bench ch04 --export-routing), or --self-check")
    meta, tensors = read_safetensors(args.routing)
    if meta.get("chapter") != "ch04":
        sys.exit(f"{args.routing}: not chapter 4's routing file (bench ch04 --export-routing)")
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(0).replace(" ", "_")
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device=device).fill_(1)
    else:
        name, flush = "cpu", None
    if args.tune:
        if not (args.shape and args.out_dir) or flush is None:
            sys.exit("engines_moe --tune needs --shape, --out-dir and a CUDA GPU")
        tune(args, meta, tensors, device, flush)
        return
    if not args.outputs:
        sys.exit("engines_moe: --outputs is needed")
    if not args.check_only and (flush is None or not args.samples):
        sys.exit("engines_moe: timing needs --device cuda and --samples; --check-only computes "
                 "and checks the outputs without timing")
    from ch04_grouped_mm import LONG_CALL_US, LONG_PLAN, Layer, call_us, write_safetensors
    from router5 import IDENTITY, launches, measure
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    shapes = meta["shapes"].split(",")
    tokens = [int(t) for t in meta["tokens"].split(",")]
    print(f"ch04 engines' peer ({IMPL}): shapes {shapes}; tokens {tokens}; torch "
          f"{torch.__version__}, triton {triton.__version__}, {name}; the align given free; "
          f"check: max |out - fp32 ref| <= {TOLERANCE:g} * max |ref|"
          f"{'; --check-only: nothing timed' if args.check_only else ''}", flush=True)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    outputs, failures = {}, 0
    for shape in shapes:
        layer = Layer(meta, tensors, shape, device)
        w13, w2 = layer.w["w13"], layer.w["w2"]
        print(f"{shape}: H {layer.H}, I {layer.I}, E {layer.E}, k {layer.k}: weights generated "
              f"and checked against the bench's", flush=True)
        for T in tokens:
            ids = to_torch(*tensors[f"topk_ids.{shape}.{T}"], device).long()
            wts = to_torch(*tensors[f"topk_weights.{shape}.{T}"], device)
            x = layer.hidden(T)
            cfg, src = config_for(layer, T)
            try:
                moe = EnginesMoE(w13, w2, cfg).prepare(ids, wts)  # the align, outside the call
                fn = lambda: moe(x)  # noqa: E731
                ref = reference_fp32(x, w13, w2, ids, wts)
                out = fn()
                diff, scale, ok = check(out, ref)
                rel = diff / max(scale, 1e-30)
                tiles = (f"BLOCK {cfg['BLOCK_SIZE_M']}x{cfg['BLOCK_SIZE_N']}x{cfg['BLOCK_SIZE_K']} "
                         f"G {cfg['GROUP_SIZE_M']} w {cfg['num_warps']} s {cfg['num_stages']} "
                         f"({src})")
                if not ok:
                    failures += 1
                    print(f"{shape} {T:5} {IMPL}: FAILED: max |out - fp32 ref| {diff:.3e} is "
                          f"{rel:.2e} of max |ref| {scale:.3e}: not timed", flush=True)
                    continue
                outputs[f"out.{IMPL}.{shape}.{T}"] = out.clone()
                if args.check_only:
                    print(f"{shape} {T:5} {IMPL} {tiles}: max |out - fp32 ref| {diff:.3e} = "
                          f"{rel:.2e} of max |ref| {scale:.3e}", flush=True)
                    continue
                n = launches(fn)
                plan = (cold_n, warm_n, copies)
                if not args.quick and call_us(fn) > LONG_CALL_US:
                    plan = LONG_PLAN
                cold, warm = measure(fn, flush, *plan)
            except Exception as err:
                failures += 1
                print(f"{shape} {T:5} {IMPL}: FAILED: {type(err).__name__}: {err}", flush=True)
                continue
            record = {"chapter": "ch04", "shape": shape, "impl": IMPL, "rows": T,
                      "launches": n, "device": name}
            lines.append(",".join(str(record[c]) for c in IDENTITY)
                         + "," + " ".join(f"{v:.3f}" for v in cold)
                         + "," + " ".join(f"{v:.3f}" for v in warm))
            print(f"{shape} {T:5} {IMPL} cold ~{sorted(cold)[len(cold) // 2]:9.2f} us  "
                  f"warm ~{sorted(warm)[len(warm) // 2]:9.2f} us  launches {n}  {tiles}  "
                  f"max |out - fp32 ref| {diff:.3e} = {rel:.2e} of max |ref|", flush=True)
        del layer, w13, w2
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    write_safetensors(args.outputs, outputs)
    if args.samples and not args.check_only:
        with open(args.samples, "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"ch04 engines' peer: {len(lines) - 1} measurements"
          + (f" written to {args.samples}" if args.samples and not args.check_only else "")
          + f", {len(outputs)} outputs written to {args.outputs}"
          + (f", {failures} FAILED" if failures else ""), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
