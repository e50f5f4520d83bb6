"""The PyTorch peers of chapter 2: the experts of a MoE layer for a routing given, two ways,
measured exactly as tools/bench measures our grouped loop (GroupedDevice::enqueue_experts), in
the same GPU session, on exactly the same routings and the same shapes.

    python3 tools/peers/ch02_moe_loop.py --routing R.safetensors --samples RESULTS/ch02_torch.csv [--quick]

The routings come from `bench ch02 --export-routing R.safetensors` (tools/gpu/run makes it
first): for each token count T, `topk_ids.T` i32 [T, k] and `topk_weights.T` f32 [T, k], with
the layer's shape (hidden H, moe_intermediate I, experts E, k) in the metadata. The weights are
random bf16 of exactly those shapes, packed as the book packs them: w13 [E, 2I, H] (gate rows,
then up rows) and w2 [E, H, I]; the hidden states are random bf16 [T, H]. Timing does not depend
on the values.

The two layers, both bf16 weights and activations (PyTorch's defaults for bf16 matmuls):

- torch_loop: Hugging Face's per-expert loop (Qwen3MoeSparseMoeBlock): for each active expert,
  index its tokens, `x[top_x] @ w13[e].T`, silu(gate) * up, `@ w2[e].T`, times the routing
  weight, `index_add_` into the output. Hugging Face finds each expert's tokens with
  `torch.where` inside the loop, a host synchronisation that no CUDA graph can hold; here the
  per-expert index lists are computed once before capture, so the loop is captured in a graph
  like ours (our grouped loop also gets its grouping from the host before capture).
- torch_grouped_mm: the layer on `torch._grouped_mm` (PyTorch >= 2.8, sm90 bf16): the pairs
  sorted by expert, `offs` = the cumulative counts (int32), gather, one grouped GEMM with
  `w13.transpose(-2, -1)`, SwiGLU, one grouped GEMM with `w2.transpose(-2, -1)`, times the
  weights, `index_add_` back. The sort and `offs` are computed before capture, as the other two
  get their grouping (on the device they would add a sort and a scan to the timed call; chapter
  3 measures that sort).

Method (the same as moe_kernels::measure, through router5.py's functions): captured once in a
CUDA graph. Cold: before each sample, a buffer four times the L2 is read (outside the timed
events), then events are recorded around one replay. Warm: a second graph holds N copies;
time / N. The launch count comes from the profiler on one eager call.

Each layer's output is compared once with the same experts computed in fp32 by torch from the
same bf16 values; the largest difference is printed, so a gross bug shows in the log.

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


def uniform(shape, scale, gen):
    """Values in [-scale, scale), as the book's generator makes them, rounded to bf16."""
    return ((torch.rand(shape, generator=gen, device="cuda") * 2 - 1) * scale).to(torch.bfloat16)


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
    w13 = uniform((E, 2 * I, H), 1 / math.sqrt(H), gen)  # [E, 2I, H] bf16: gate rows, up rows
    w2 = uniform((E, H, I), 1 / math.sqrt(I), gen)  # [E, H, I] bf16
    has_grouped_mm = hasattr(torch, "_grouped_mm") and torch.cuda.get_device_capability(0) >= (9, 0)
    print(f"{shape}: H {H}, I {I}, E {E}, k {k}; tokens {tokens}; torch {torch.__version__}, "
          f"{device}; torch._grouped_mm {'available' if has_grouped_mm else 'NOT available: skipped'}",
          flush=True)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    failures = 0
    for T in tokens:
        ids = to_torch(*tensors[f"topk_ids.{T}"], "cuda").long()  # [T, k]
        wts = to_torch(*tensors[f"topk_weights.{T}"], "cuda")  # [T, k] f32
        assert ids.shape == (T, k) and wts.shape == (T, k), (ids.shape, wts.shape)
        assert int(ids.min()) >= 0 and int(ids.max()) < E
        x = uniform((T, H), 1.0, gen)  # [T, H] bf16
        wts_bf16 = wts.to(torch.bfloat16)  # Hugging Face casts the weights to the hidden dtype

        # The grouping, before capture: pairs sorted by expert (stable), each expert's run.
        flat = ids.reshape(-1)  # [T·k]
        order = torch.argsort(flat, stable=True)  # [T·k] pair ids, by expert
        counts = torch.bincount(flat, minlength=E)  # [E]
        experts = []  # (e, top_x: its pairs' tokens, idx: their slots j)
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n:
                pairs = order[start:start + n]
                experts.append((e, (pairs // k).contiguous(), (pairs % k).contiguous()))
            start += n
        tok_sorted = (order // k).contiguous()  # [T·k] the token of each sorted pair
        w_sorted = wts_bf16.reshape(-1)[order].contiguous()  # [T·k]
        offs = torch.cumsum(counts, 0).to(torch.int32)  # [E] the end of each expert's run

        def torch_loop():
            out = torch.zeros(T, H, dtype=torch.bfloat16, device="cuda")
            for e, top_x, idx in experts:
                gate_up = x[top_x] @ w13[e].t()  # [n, 2I]
                act = F.silu(gate_up[:, :I]) * gate_up[:, I:]  # [n, I]
                y = (act @ w2[e].t()) * wts_bf16[top_x, idx, None]  # [n, H]
                out.index_add_(0, top_x, y)
            return out

        def torch_grouped_mm():
            xs = x[tok_sorted]  # [T·k, H] sorted by expert
            gate_up = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)  # [T·k, 2I]
            act = F.silu(gate_up[:, :I]) * gate_up[:, I:]  # [T·k, I]
            y = torch._grouped_mm(act, w2.transpose(-2, -1), offs=offs) * w_sorted[:, None]
            return torch.zeros(T, H, dtype=torch.bfloat16, device="cuda").index_add_(0, tok_sorted, y)

        # The same experts in fp32 from the same bf16 values (weights unrounded): the check.
        ref = torch.zeros(T, H, dtype=torch.float32, device="cuda")
        xf = x.float()
        for e, top_x, idx in experts:
            gate_up = xf[top_x] @ w13[e].float().t()
            act = F.silu(gate_up[:, :I]) * gate_up[:, I:]
            ref.index_add_(0, top_x, (act @ w2[e].float().t()) * wts[top_x, idx, None])
        scale = ref.abs().max().item()

        peers = [("torch_loop", torch_loop)]
        if has_grouped_mm:
            peers.append(("torch_grouped_mm", torch_grouped_mm))
        for impl, fn in peers:
            try:
                diff = (fn().float() - ref).abs().max().item()
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
                  f"{len(experts)} experts active  max |out - fp32 ref| {diff:.3e} "
                  f"(max |ref| {scale:.3e})", flush=True)
    with open(args.samples, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"moe_loop: {len(lines) - 1} measurements written to {args.samples}"
          + (f", {failures} FAILED" if failures else ""), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
