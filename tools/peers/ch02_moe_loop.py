"""The PyTorch peers of chapter 2: Hugging Face's two experts paths (transformers 5.17) for a
routing given, measured exactly as tools/bench measures our grouped loop
(GroupedDevice::enqueue_experts), in the same GPU session, on exactly the same routings and the
same shapes.

    python3 tools/peers/ch02_moe_loop.py --routing R.safetensors --samples RESULTS/ch02_torch.csv [--quick]

The routings come from `bench ch02 --export-routing R.safetensors` (tools/gpu/run makes it
first): for each token count T, `topk_ids.T` i32 [T, k] and `topk_weights.T` f32 [T, k], with
the layer's shape (hidden H, moe_intermediate I, experts E, k) in the metadata. The weights are
random bf16 of exactly those shapes, laid out as Hugging Face's `Qwen3MoeExperts` holds them:
`gate_up_proj` [E, 2I, H] (gate rows, then up rows) and `down_proj` [E, H, I], the book's w13
and w2; the hidden states are random bf16 [T, H]. Timing does not depend on the values. The
routing weights are cast to bf16, as Qwen3's router casts them to the hidden states' dtype.

The two layers, written fresh after transformers 5.17's code, bf16 weights and activations:

- torch_loop: Hugging Face's "eager" experts path (`Qwen3MoeExperts.forward`): for each expert
  hit, index its tokens, `linear` on `gate_up_proj[e]`, `chunk(2)`, silu(gate) * up, `linear`
  on `down_proj[e]`, times the routing weight, `index_add_` into a bf16 output (each add rounds
  to bf16; on the GPU the adds of one expert's rows are atomics). Hugging Face finds each
  expert's tokens with `one_hot` and `torch.where` inside the call; `torch.where` is a host
  synchronisation that no CUDA graph can hold, so here those index lists are computed once
  before capture (the same `where` on the same mask), and the loop is captured in a graph like
  ours (our grouped loop also gets its grouping from the host before capture).
- torch_grouped_mm: Hugging Face's default experts path (`grouped_mm_experts_forward` in
  `integrations/moe.py`, what `experts_implementation=None` resolves to where grouped_mm runs):
  the pairs sorted by expert, gather, one grouped GEMM on every expert's `gate_up_proj` (`offs`:
  the cumulative pair counts of all E experts, int32), silu(gate) * up, one grouped GEMM on
  `down_proj`, times the routing weights, then Hugging Face's combine: the rows put back in
  pair order by the inverse permutation (a gather), and each token's k rows summed by
  `.view(T, k, H).sum(dim=1)`, a fixed-order reduction accumulated in fp32 and rounded to bf16
  once (deterministic, unlike `index_add_`). The grouped GEMM is `torch.nn.functional.grouped_mm`
  where it exists, else `torch._grouped_mm`, as Hugging Face picks it. Computed before capture,
  as the others get their grouping: the sort, the offsets (Hugging Face uses `histc` and
  `cumsum` in the call; here `bincount` and `cumsum`, the same numbers) and the inverse
  permutation (Hugging Face builds it in the call with a scatter of `arange`); on the device
  they would add a sort, a histogram, a scan and a scatter to the timed call (chapter 3
  measures that sort). Left out as well: Hugging Face's three `masked_fill`s for expert
  parallelism's sentinel ids, which change nothing when every expert is local (as here), but
  cost passes over [T·k, H] (the gathered rows, in place), [T·k, 2I] and [T·k, H] (copies) in
  Hugging Face's call. So this peer is a little faster than Hugging Face's call itself.

What the peers keep in bf16 and ours does not: the peers take bf16 hidden states and write a
bf16 output, and keep every intermediate in bf16. Ours (tools/bench/src/ch02.rs) takes f32
hidden states [T, H] (converted to bf16 by its gather), writes the down projection of every
pair as f32 y [T·k, H] and reads it back in its combine, and writes an f32 output [T, H]. Its
activations therefore move more bytes than the same layer with bf16 activations would: at 4096
tokens 1174 MB (604 MB of them the f32 input, y and output), 872 MB if those were bf16, against
1208 MB of expert weights. The bench log prints these at each token count.

Method (the same as moe_kernels::measure, through router5.py's functions): captured once in a
CUDA graph. Cold: before each sample, a buffer four times the L2 is read (outside the timed
events), then events are recorded around one replay. Warm: a second graph holds N copies;
time / N. The launch count comes from the profiler on one eager call.

Each layer's output is checked once against the same experts computed in fp32 by torch from the
same bf16 values (`reference_fp32`: its own loop over the routing, sharing nothing with the
peers' groupings; routing weights unrounded): max |out - ref| must be at most TOLERANCE of
max |ref|. A peer that fails is printed as FAILED, not timed and not written, and the script
exits 1.

The layer functions take their tensors and a grouping and run on any device, so they can be
checked on the CPU at a tiny shape:

    from ch02_moe_loop import grouping, torch_loop, torch_grouped_mm, reference_fp32, check

Writes the raw samples: tools/bench summarises them with the same code as its own measurements
and gives each row the floor of its own case at the same shape and T.
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router5 import IDENTITY, launches, measure  # noqa: E402  (one method for every peer)

# max |peer - fp32 reference| <= TOLERANCE * max |reference|. The peers round the gathered
# rows, gate | up, the activation, the down projection, the weighted rows and the output to
# bf16 (2^-9 relative each), and the loop's index_add_ rounds each of a token's k partial sums;
# what that leaves is well under 1e-2 of the largest output, and a wrong expert, weight or
# token is of the order of the output itself.
TOLERANCE = 2e-2


def read_safetensors(path):
    """(metadata, {name: (dtype, shape, raw bytes)}) of a safetensors file, read with the
    standard library only (the format: an 8-byte little-endian header length, a JSON header,
    the data), so the GPU machine needs no `safetensors` package."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], body[a:b])
    return meta, tensors


def to_torch(dtype, shape, raw, device):
    dt = {"I32": torch.int32, "F32": torch.float32}[dtype]
    return torch.frombuffer(bytearray(raw), dtype=dt).reshape(shape).to(device)


def uniform(shape, scale, gen, device="cuda"):
    """Values in [-scale, scale), as the book's generator makes them, rounded to bf16."""
    return ((torch.rand(shape, generator=gen, device=device) * 2 - 1) * scale).to(torch.bfloat16)


def grouped_mm_fn():
    """The grouped GEMM Hugging Face calls: `torch.nn.functional.grouped_mm` where it exists,
    else `torch._grouped_mm`; None without either."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def grouped_mm_runs(capability):
    """Hugging Face's test on CUDA (`_can_use_grouped_mm`): sm80 and up with
    `torch.nn.functional.grouped_mm`, or `torch._grouped_mm` from torch 2.9; Hopper only for an
    older `torch._grouped_mm`. The H200 is sm90: any of them runs there."""
    if hasattr(F, "grouped_mm"):
        return capability >= (8, 0)
    if hasattr(torch, "_grouped_mm"):
        version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
        return capability >= (8, 0) if version >= (2, 9) else capability[0] == 9
    return False


def grouping(ids, wts, E):
    """What both peers get before capture, from the routing `ids` [T, k] (int64) and the
    routing weights `wts` [T, k] (the peers' dtype, bf16):

    - `experts`: Hugging Face's eager loop's index lists, computed as it computes them: for
      each expert hit, in increasing order, (e, token_idx, top_k_pos) from `torch.where` on the
      one-hot mask [E, k, T].
    - for the grouped_mm path: `tok_sorted` [T·k] the token of each pair sorted by expert,
      `w_sorted` [T·k] its weight, `offs` [E] int32 the end of each expert's run, and
      `inv_perm` [T·k] where each pair (in pair order t·k + j) went in the sorted order.
    """
    T, k = ids.shape
    mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)  # [E, k, T]
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    experts = []
    for e in hit[:, 0].tolist():
        top_k_pos, token_idx = torch.where(mask[e])
        experts.append((e, token_idx, top_k_pos))
    flat = ids.reshape(-1)  # [T·k] expert of each pair
    _, perm = torch.sort(flat)  # the pairs sorted by expert, as Hugging Face sorts them
    counts = torch.bincount(flat, minlength=E)  # [E]
    inv_perm = torch.empty_like(perm)
    inv_perm[perm] = torch.arange(perm.numel(), device=perm.device)
    return {
        "T": T,
        "k": k,
        "experts": experts,
        "tok_sorted": (perm // k).contiguous(),
        "w_sorted": wts.reshape(-1)[perm].contiguous(),
        "offs": torch.cumsum(counts, 0, dtype=torch.int32),
        "inv_perm": inv_perm,
    }


def torch_loop(x, w13, w2, wts, g):
    """Hugging Face's eager experts path (`Qwen3MoeExperts.forward`) with its index lists from
    `g`: x [T, H], w13 [E, 2I, H], w2 [E, H, I], wts [T, k], all bf16 → [T, H] bf16."""
    out = torch.zeros_like(x)
    for e, token_idx, top_k_pos in g["experts"]:
        gate, up = F.linear(x[token_idx], w13[e]).chunk(2, dim=-1)  # [n, I] each
        y = F.linear(F.silu(gate) * up, w2[e])  # [n, H]
        y = y * wts[token_idx, top_k_pos, None]
        out.index_add_(0, token_idx, y.to(out.dtype))
    return out


def torch_grouped_mm(x, w13, w2, g, gmm=None):
    """Hugging Face's grouped_mm experts path (`grouped_mm_experts_forward`) with its grouping
    from `g`: x [T, H], w13 [E, 2I, H], w2 [E, H, I] bf16 → [T, H] bf16."""
    gmm = gmm or grouped_mm_fn()
    T, k, H = g["T"], g["k"], x.shape[-1]
    offs = g["offs"]
    xs = x[g["tok_sorted"]]  # [T·k, H] the pairs' rows, sorted by expert
    gate, up = gmm(xs, w13.transpose(-2, -1), offs=offs).chunk(2, dim=-1)  # [T·k, I] each
    y = gmm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)  # [T·k, H]
    y = y * g["w_sorted"][:, None]
    # Hugging Face's combine: back to pair order, then each token's k rows summed (fp32
    # accumulation, one rounding to bf16), in a fixed order.
    return y[g["inv_perm"]].view(T, k, H).sum(dim=1).to(x.dtype)


def reference_fp32(x, w13, w2, ids, wts):
    """The same experts in fp32 from the same bf16 values, from the routing alone: for each
    expert in `ids`, its (token, slot) pairs, gate | up, SwiGLU, down, times the f32 routing
    weight `wts`, summed per token in fp32. → [T, H] f32."""
    T, H = x.shape
    inter = w2.shape[-1]
    xf = x.float()
    out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        h = xf[t] @ w13[e].float().t()  # [n, 2I]
        a = F.silu(h[:, :inter]) * h[:, inter:]
        out.index_add_(0, t, (a @ w2[e].float().t()) * wts[t, j, None].float())
    return out


def check(out, ref, tol=TOLERANCE):
    """(max |out - ref|, max |ref|, whether the first is at most tol times the second; NaN or
    infinity in `out` fails)."""
    diff = (out.float() - ref).abs().max().item()
    scale = ref.abs().max().item()
    return diff, scale, bool(torch.isfinite(out).all()) and diff <= tol * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routing", required=True, help="the routings (bench ch02 --export-routing)")
    ap.add_argument("--samples", required=True, help="where the raw samples go (CSV)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    meta, tensors = read_safetensors(args.routing)
    shape = meta["shape"]
    H, I, E, k = (int(meta[key]) for key in ("hidden", "intermediate", "experts", "k"))
    tokens = [int(t) for t in meta["tokens"].split(",")]
    torch.set_float32_matmul_precision("highest")  # the fp32 reference: no TF32
    device = torch.cuda.get_device_name(0).replace(" ", "_")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device="cuda").fill_(1)
    gen = torch.Generator(device="cuda").manual_seed(0)
    w13 = uniform((E, 2 * I, H), 1 / math.sqrt(H), gen)  # gate_up_proj [E, 2I, H] bf16
    w2 = uniform((E, H, I), 1 / math.sqrt(I), gen)  # down_proj [E, H, I] bf16
    gmm = grouped_mm_fn()
    has_grouped_mm = grouped_mm_runs(torch.cuda.get_device_capability(0))
    gmm_name = "torch.nn.functional.grouped_mm" if hasattr(F, "grouped_mm") else "torch._grouped_mm"
    print(f"{shape}: H {H}, I {I}, E {E}, k {k}; tokens {tokens}; torch {torch.__version__}, "
          f"{device}; grouped GEMM {gmm_name} "
          f"{'available' if has_grouped_mm else 'NOT available: torch_grouped_mm skipped'}; "
          f"check: max |out - fp32 ref| <= {TOLERANCE:g} * max |ref|",
          flush=True)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    failures = 0
    for T in tokens:
        ids = to_torch(*tensors[f"topk_ids.{T}"], "cuda").long()  # [T, k]
        wts = to_torch(*tensors[f"topk_weights.{T}"], "cuda")  # [T, k] f32
        assert ids.shape == (T, k) and wts.shape == (T, k), (ids.shape, wts.shape)
        assert int(ids.min()) >= 0 and int(ids.max()) < E
        x = uniform((T, H), 1.0, gen)  # [T, H] bf16
        wts_bf16 = wts.to(torch.bfloat16)  # Qwen3's router casts them to the hidden dtype
        g = grouping(ids, wts_bf16, E)
        ref = reference_fp32(x, w13, w2, ids, wts)

        peers = [("torch_loop", lambda: torch_loop(x, w13, w2, wts_bf16, g))]
        if has_grouped_mm:
            peers.append(("torch_grouped_mm", lambda: torch_grouped_mm(x, w13, w2, g, gmm)))
        for impl, fn in peers:
            try:
                diff, scale, ok = check(fn(), ref)
                rel = diff / max(scale, 1e-30)
                if not ok:
                    failures += 1
                    print(f"{shape} {T:5} {impl}: FAILED: max |out - fp32 ref| {diff:.3e} is "
                          f"{rel:.2e} of max |ref| {scale:.3e}, above the tolerance "
                          f"{TOLERANCE:g} (or the output is not finite): not timed", flush=True)
                    continue
                n = launches(fn)
                cold, warm = measure(fn, flush, cold_n, warm_n, copies)
            except Exception as err:  # one broken peer must not lose the other's numbers
                failures += 1
                print(f"{shape} {T:5} {impl}: FAILED: {type(err).__name__}: {err}", flush=True)
                continue
            record = {"chapter": "ch02", "shape": shape, "impl": impl, "rows": T,
                      "launches": n, "device": device}
            lines.append(",".join(str(record[c]) for c in IDENTITY)
                         + "," + " ".join(f"{v:.3f}" for v in cold)
                         + "," + " ".join(f"{v:.3f}" for v in warm))
            print(f"{shape} {T:5} {impl:16} cold ~{sorted(cold)[len(cold) // 2]:9.2f} us  "
                  f"warm ~{sorted(warm)[len(warm) // 2]:9.2f} us  launches {n:5}  "
                  f"{len(g['experts'])} experts active  max |out - fp32 ref| {diff:.3e} "
                  f"= {rel:.2e} of max |ref| {scale:.3e} (tolerance {TOLERANCE:g})",
                  flush=True)
    with open(args.samples, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"moe_loop: {len(lines) - 1} measurements written to {args.samples}"
          + (f", {failures} FAILED" if failures else ""), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
