"""The PyTorch peers of chapter 4: a MoE layer on `torch._grouped_mm`, written here from scratch,
and chapter 2's per-expert loop, measured exactly as tools/bench measures our fused layer
(FusedDevice::enqueue_experts), in the same GPU session, on exactly the same routings, weights
and hidden states, so their outputs can be compared with ours.

    python3 tools/peers/ch04_grouped_mm.py --routing R.safetensors --samples RESULTS/ch04_torch.csv \\
        --outputs RESULTS/ch04_torch_outputs.safetensors [--quick]
    python3 tools/peers/ch04_grouped_mm.py --routing R.safetensors --outputs O.safetensors \\
        --check-only --device cpu          the same layers and checks on a CPU, nothing timed

The routings come from `bench ch04 --export-routing R.safetensors` (tools/gpu/run makes it
first; `--tiny` for the emulator smoke test's shapes): for each shape S and token count T,
`topk_ids.S.T` i32 [T, k] and `topk_weights.S.T` f32 [T, k]; the metadata gives each shape (H, I,
E, k) and how the bench made its weights and hidden states: chapter 1's generator
(`ch01_router::inputs::patterned`: value i of a tensor of salt s and scale c is
`(2·(splitmix64(splitmix64(s) ^ i) >> 40) / 2^24 - 1) · c` in f32), one salt and scale per
tensor. `patterned` below computes it in int64 torch arithmetic on the device (3.6 G weights at
the GLM-like shape take seconds), the values are rounded to bf16 to nearest even as our layers
round them, and the first and last 64 values of every tensor are compared bit for bit with the
ones the file carries (`check.S.w13`, `check.S.w2`, `check.S.hidden.T`) before anything runs: the
peers multiply exactly our bf16 weights and hidden states.

The layers, bf16 weights and activations:

- torch_grouped_mm (`grouped_mm_layer`): the pairs sorted by expert (a stable argsort of the
  [T·k] expert ids), each expert's pair count (a scatter-add: `bincount` reads its size back to
  the host, which no CUDA graph can hold) and their running sum as `offs` (int32), the pairs'
  rows gathered, one `torch._grouped_mm` on every expert's w13 [E, 2I, H] (as [E, H, 2I], the
  transposed view), silu(gate) * up, one `torch._grouped_mm` on w2, the rows times their routing
  weight in fp32, put back in pair order (a scatter by the permutation) and each token's k rows
  summed in fp32 in a fixed order, rounded to bf16 once. Everything from the ids on is in the
  timed call, as our alignment is in ours.
- torch_loop: chapter 2's peer (`ch02_moe_loop.torch_loop`, Hugging Face's eager experts loop):
  one pair of `linear`s per expert hit, `index_add_` into a bf16 output; its index lists are
  computed before capture (`ch02_moe_loop.grouping`), as chapter 2 measures it.

Both take bf16 hidden states and return bf16; ours takes f32 and returns f32 (see
tools/bench/src/ch04.rs).

Checks. Each output is compared with chapter 2's fp32 reference of the same experts on the same
bf16 values (`ch02_moe_loop.reference_fp32`, routing weights unrounded): max |out - ref| at most
`TOLERANCE` of max |ref|, else the layer is printed as FAILED, not timed, and the script exits 1.
Every output is also written (`out.IMPL.S.T`, bf16 [T, H]) to --outputs: the bench compares it
with its own output on the device (`ch04_check.csv`) and leaves out the rows of a peer that is
not ours within its tolerance.

Method (the same as moe_kernels::measure, through router5.py's functions): captured once in a
CUDA graph. Cold: before each sample, a buffer four times the L2 is read (outside the timed
events), then events are recorded around one replay. Warm: a second graph holds N copies;
time / N. The launch count comes from the profiler on one eager call. A call longer than 1 ms
gets fewer samples (50 cold; 10 warm of a graph of 2 copies), as the bench's own long calls. Timing needs a CUDA GPU:
without one the script refuses, unless --check-only.

`torch._grouped_mm` runs on CUDA (sm80 and up from torch 2.9); where it does not run (a CPU
build without it, or one that refuses the call) --check-only uses `grouped_mm_by_loop`, the same
product one expert at a time, so the rest of the layer is still checked.
"""

import argparse
import ctypes
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router5 import IDENTITY, launches, measure  # noqa: E402  (one method for every peer)
from ch02_moe_loop import (  # noqa: E402  (chapter 2's peer and its checks, reused)
    TOLERANCE, check, grouping, read_safetensors, reference_fp32, to_torch, torch_loop)

MASK64 = (1 << 64) - 1
# A call longer than this (µs, one eager call after a first) is measured with fewer samples, as
# the bench measures ours (tools/bench/src/ch04.rs, LONG_CALL_US and LONG_PLAN): (cold samples,
# warm samples, copies in the warm graph).
LONG_CALL_US = 1000.0
LONG_PLAN = (50, 10, 2)


def call_us(fn):
    """One eager call of `fn` after a first, µs, between device events."""
    fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3


def _signed(c):
    """A 64-bit constant as the int64 torch holds it."""
    c &= MASK64
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(z, s):
    """Logical right shift of an int64 tensor (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def splitmix64_int(z):
    """splitmix64 on a Python int (chapter 1's `splitmix64`)."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def splitmix64(z):
    """splitmix64 on an int64 tensor: additions and products wrap modulo 2^64, as in Rust."""
    z = z + _signed(0x9E3779B97F4A7C15)
    z = (z ^ _shr(z, 30)) * _signed(0xBF58476D1CE4E5B9)
    z = (z ^ _shr(z, 27)) * _signed(0x94D049BB133111EB)
    return z ^ _shr(z, 31)


def patterned(start, n, salt, scale, device):
    """Values start .. start+n of chapter 1's `patterned(_, salt, scale)`, f32, on `device`."""
    i = torch.arange(start, start + n, dtype=torch.int64, device=device)
    h = splitmix64(i ^ _signed(splitmix64_int(salt)))
    u = _shr(h, 40).to(torch.float32) / float(1 << 24)  # 24 bits: exact
    return (2 * u - 1) * scale  # exact, then one rounding, as in Rust


def scale_of(bits):
    """The f32 whose bits are the hex string `bits` (the file's `*_scale_bits`), as a float."""
    return struct.unpack(">f", bytes.fromhex(bits))[0]


def generate_bf16(shape, salt, scale, device, chunk=1 << 26):
    """A tensor of `shape` from the generator, rounded to bf16 (to nearest even), made chunk by
    chunk (int64 temporaries of a whole 2.4 G-value tensor would not fit)."""
    n = 1
    for d in shape:
        n *= d
    out = torch.empty(n, dtype=torch.bfloat16, device=device)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        out[a:b] = patterned(a, b - a, salt, scale, device).to(torch.bfloat16)
    return out.view(*shape)


def ends_match(n, salt, scale, check, device):
    """Whether the first and last 64 values of the generator are `check` (f32 [2·64]), bit for
    bit."""
    m = check.numel() // 2
    got = torch.cat([patterned(0, m, salt, scale, device), patterned(n - m, m, salt, scale, device)])
    return torch.equal(got.view(torch.int32), check.to(device).view(torch.int32))


def grouped_mm_fn():
    """`torch._grouped_mm` (what the brief measures), else `torch.nn.functional.grouped_mm`;
    None without either."""
    return getattr(torch, "_grouped_mm", None) or getattr(F, "grouped_mm", None)


def grouped_mm_by_loop(a, b, offs):
    """The product `torch._grouped_mm(a, b, offs=offs)` computes, one group at a time: rows
    offs[g-1] .. offs[g] of a [P, K] times b[g] [K, N] → [P, N] in a's dtype (fp32 accumulation,
    one rounding). The CPU check's stand-in; never timed."""
    out = torch.empty(a.shape[0], b.shape[-1], dtype=a.dtype, device=a.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        out[start:end] = (a[start:end].float() @ b[g].float()).to(a.dtype)
        start = end
    return out


def grouped_mm_layer(x, w13, w2, ids, wts, gmm):
    """The MoE experts on grouped GEMMs: x [T, H] bf16, w13 [E, 2I, H] bf16 (gate rows, then up
    rows), w2 [E, H, I] bf16, ids [T, k] int64, wts [T, k] f32 → [T, H] bf16. No host
    synchronisation: capturable in a CUDA graph."""
    T, k = ids.shape
    E, I = w13.shape[0], w2.shape[-1]
    flat = ids.reshape(-1)  # [P] the expert of each pair p = t·k + j
    order = torch.argsort(flat, stable=True)  # [P] the pairs sorted by expert
    counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat))  # [E] pairs per expert (bincount without the sync)
    offs = torch.cumsum(counts, 0).to(torch.int32)  # [E] the end of each expert's run
    xs = x[order // k]  # [P, H] each pair's row, sorted by expert
    h = gmm(xs, w13.transpose(-2, -1), offs=offs)  # [P, 2I] gate | up
    a = F.silu(h[:, :I]) * h[:, I:]  # [P, I] SwiGLU
    y = gmm(a, w2.transpose(-2, -1), offs=offs)  # [P, H] down projection
    y = y.float() * wts.reshape(-1)[order].unsqueeze(1)  # [P, H] f32, weighted
    back = torch.empty_like(y)
    back[order] = y  # [P, H] in pair order (a permutation: each row written once)
    return back.view(T, k, -1).sum(dim=1).to(torch.bfloat16)  # [T, H], fixed order over j


def le_bytes(t):
    """The raw bytes of a tensor (contiguous, on the CPU), little-endian as this machine."""
    t = t.detach().to("cpu").contiguous()
    assert sys.byteorder == "little"
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def write_safetensors(path, tensors):
    """`tensors` {name: bf16 tensor} as a safetensors file, with the standard library only."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = le_bytes(t)
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)


class Layer:
    """One shape's weights, regenerated from the routing file and checked against it."""

    def __init__(self, meta, tensors, shape, device):
        get = lambda key: meta[f"{shape}.{key}"]  # noqa: E731
        self.name = shape
        self.H, self.I, self.E, self.k = (int(get(x)) for x in ("hidden", "intermediate", "experts", "k"))
        self.device = device
        dims = {"w13": (self.E, 2 * self.I, self.H), "w2": (self.E, self.H, self.I)}
        self.w = {}
        for name, dim in dims.items():
            salt, scale = int(get(f"{name}_salt")), scale_of(get(f"{name}_scale_bits"))
            n = dim[0] * dim[1] * dim[2]
            check_t = to_torch(*tensors[f"check.{shape}.{name}"], device)
            if not ends_match(n, salt, scale, check_t, device):
                raise SystemExit(f"{shape}: the generator does not give the bench's {name}: "
                                 "the peers would multiply other weights")
            self.w[name] = generate_bf16(dim, salt, scale, device)
        self.hidden_salt = int(meta["hidden_salt"])
        self.tensors = tensors

    def hidden(self, T):
        """[T, H] bf16: the bench's hidden states of T tokens, rounded as our layer rounds them."""
        n, salt = T * self.H, self.hidden_salt + T
        check_t = to_torch(*self.tensors[f"check.{self.name}.hidden.{T}"], self.device)
        if not ends_match(n, salt, 1.0, check_t, self.device):
            raise SystemExit(f"{self.name}: the generator does not give the bench's hidden states "
                             f"of {T} tokens")
        return patterned(0, n, salt, 1.0, self.device).to(torch.bfloat16).view(T, self.H)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routing", required=True, help="the routings (bench ch04 --export-routing)")
    ap.add_argument("--samples", help="where the raw samples go (CSV); needs a CUDA GPU")
    ap.add_argument("--outputs", required=True, help="where every output goes (safetensors)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check-only", action="store_true",
                    help="compute and check the outputs, time nothing (runs on a CPU)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("ch04_grouped_mm: no CUDA GPU here: timing needs one. "
                 "--check-only --device cpu checks the layers on the CPU")
    if not args.check_only and (not device.startswith("cuda") or not args.samples):
        sys.exit("ch04_grouped_mm: timing needs --device cuda and --samples; "
                 "--check-only computes and checks the outputs without timing")
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    meta, tensors = read_safetensors(args.routing)
    if meta.get("chapter") != "ch04":
        sys.exit(f"{args.routing}: not chapter 4's routing file (bench ch04 --export-routing)")
    shapes = meta["shapes"].split(",")
    tokens = [int(t) for t in meta["tokens"].split(",")]
    torch.set_float32_matmul_precision("highest")  # the fp32 reference: no TF32
    gmm = grouped_mm_fn()
    gmm_name = "torch._grouped_mm" if gmm is getattr(torch, "_grouped_mm", None) else "F.grouped_mm"
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(0).replace(" ", "_")
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device=device).fill_(1)
    else:
        name, flush = "cpu", None
    print(f"ch04 peers: shapes {shapes}; tokens {tokens}; torch {torch.__version__}, {name}; "
          f"grouped GEMM {gmm_name if gmm else 'NONE'}; check: max |out - fp32 ref| <= "
          f"{TOLERANCE:g} * max |ref|{'; --check-only: nothing timed' if args.check_only else ''}",
          flush=True)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    outputs = {}
    failures = 0
    for shape in shapes:
        layer = Layer(meta, tensors, shape, device)
        w13, w2 = layer.w["w13"], layer.w["w2"]
        print(f"{shape}: H {layer.H}, I {layer.I}, E {layer.E}, k {layer.k}: weights generated "
              f"and checked against the bench's", flush=True)
        mm = gmm
        for T in tokens:
            ids = to_torch(*tensors[f"topk_ids.{shape}.{T}"], device).long()  # [T, k]
            wts = to_torch(*tensors[f"topk_weights.{shape}.{T}"], device)  # [T, k] f32
            assert ids.shape == (T, layer.k) and wts.shape == (T, layer.k), (ids.shape, wts.shape)
            assert int(ids.min()) >= 0 and int(ids.max()) < layer.E
            x = layer.hidden(T)
            ref = reference_fp32(x, w13, w2, ids, wts)
            if mm is not None and mm is not grouped_mm_by_loop:
                try:
                    grouped_mm_layer(x, w13, w2, ids, wts, mm)
                except RuntimeError as err:
                    if not args.check_only:
                        raise
                    print(f"{shape}: {gmm_name} does not run here ({str(err)[:80]}): "
                          f"--check-only uses grouped_mm_by_loop", flush=True)
                    mm = grouped_mm_by_loop
            mm = mm or (grouped_mm_by_loop if args.check_only else None)
            g = grouping(ids, wts.to(torch.bfloat16), layer.E)  # chapter 2's index lists
            wts_bf16 = wts.to(torch.bfloat16)  # chapter 2's loop takes them in bf16
            peers = [("torch_loop", lambda: torch_loop(x, w13, w2, wts_bf16, g))]
            if mm is not None:
                peers.insert(0, ("torch_grouped_mm",
                                 lambda: grouped_mm_layer(x, w13, w2, ids, wts, mm)))
            for impl, fn in peers:
                try:
                    out = fn()
                    diff, scale, ok = check(out, ref)
                    rel = diff / max(scale, 1e-30)
                    if not ok:
                        failures += 1
                        print(f"{shape} {T:5} {impl}: FAILED: max |out - fp32 ref| {diff:.3e} is "
                              f"{rel:.2e} of max |ref| {scale:.3e}, above the tolerance "
                              f"{TOLERANCE:g} (or the output is not finite): not timed", flush=True)
                        continue
                    outputs[f"out.{impl}.{shape}.{T}"] = out.to(torch.bfloat16)
                    if args.check_only:
                        print(f"{shape} {T:5} {impl:16} max |out - fp32 ref| {diff:.3e} = "
                              f"{rel:.2e} of max |ref| {scale:.3e}", flush=True)
                        continue
                    n = launches(fn)
                    plan = (cold_n, warm_n, copies)
                    if not args.quick and call_us(fn) > LONG_CALL_US:
                        plan = LONG_PLAN
                    cold, warm = measure(fn, flush, *plan)
                except Exception as err:  # one broken peer must not lose the other's numbers
                    failures += 1
                    print(f"{shape} {T:5} {impl}: FAILED: {type(err).__name__}: {err}", flush=True)
                    continue
                record = {"chapter": "ch04", "shape": shape, "impl": impl, "rows": T,
                          "launches": n, "device": name}
                lines.append(",".join(str(record[c]) for c in IDENTITY)
                             + "," + " ".join(f"{v:.3f}" for v in cold)
                             + "," + " ".join(f"{v:.3f}" for v in warm))
                print(f"{shape} {T:5} {impl:16} cold ~{sorted(cold)[len(cold) // 2]:9.2f} us  "
                      f"warm ~{sorted(warm)[len(warm) // 2]:9.2f} us  launches {n:5}  "
                      f"max |out - fp32 ref| {diff:.3e} = {rel:.2e} of max |ref| {scale:.3e}",
                      flush=True)
        del layer, w13, w2
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    write_safetensors(args.outputs, outputs)
    if args.samples and not args.check_only:
        with open(args.samples, "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"ch04 peers: {len(lines) - 1} measurements"
          + (f" written to {args.samples}" if args.samples and not args.check_only else "")
          + f", {len(outputs)} outputs written to {args.outputs}"
          + (f", {failures} FAILED" if failures else ""), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
