"""The PyTorch peer of chapter 3: the bookkeeping a fused expert kernel reads (moe_align_block_size:
the routing's T·k pairs sorted by expert, each expert's run padded to a multiple of BLOCK_M),
written in PyTorch and measured exactly as tools/bench measures our kernel
(kernels/ch03_align_block_size.cu), in the same GPU session, on exactly the same ids.

    python3 tools/peers/ch03_align.py --ids F.safetensors --samples RESULTS/ch03_torch.csv \\
        [--hashes RESULTS/ch03_torch_hashes.csv] [--quick]

The ids come from `bench ch03 --export-ids F.safetensors` (tools/gpu/run makes it first): for
each E (128, 288) and token count T, `ids.e{E}.{T}` i32 [T, k], and the outputs chapter 3's CPU
reference (`align_reference`) gives for them, `sorted_ids.e{E}.{T}` [capacity],
`expert_ids.e{E}.{T}` [capacity / BLOCK_M] and `num_tokens_post_padded.e{E}.{T}` [1], all i32;
the metadata gives the shapes, k, the token counts, BLOCK_M of every case (`block_m.e{E}`: the
chapter's rule) and where determinism is shown (`hash_experts`, `hash_tokens`, `hash_runs`).
The file is read with the standard library only (ch02_moe_loop.read_safetensors). The ids are
handed to PyTorch as int64, as `torch.topk` returns them (the conversion is outside the timed
call); our kernel reads them as int32.

The layout, the same as ours, bit for bit: P = T·k pairs, pair p = t·k + j; `sorted_ids`
[capacity] holds the pair indices sorted by expert, pairs in ascending order within an expert
(a stable sort), each expert's run padded with the placeholder P to a multiple of BLOCK_M, and
P in every slot past the padded total; `expert_ids` holds the expert of each BLOCK_M-slot tile,
-1 past the last; `num_tokens_post_padded` the padded total. capacity = P + min(P, E)·(BLOCK_M-1).

The PyTorch version (`align_torch`), in the order a reader would write it:
  order = argsort(ids, stable=True)          the pairs by expert, pair order kept within one
  counts[e]                                  each expert's pairs (bincount)
  padded = ceil(counts / BLOCK_M)·BLOCK_M, ends = cumsum(padded), first = ends - padded
  slot of the i-th sorted pair = first[e] + (i - start of e's run in `order`)
  sorted_ids = full(capacity, P); sorted_ids[slot] = order       (a scatter)
  expert_ids[tile] = searchsorted(ends, tile·BLOCK_M, right) while tile·BLOCK_M < total, else -1
`torch.bincount` reads the largest id back to the host to size its output, a synchronisation no
CUDA graph can hold; so the counts are `zeros(E).scatter_add_(ids, ones)`, the same numbers
(integer adds: exact in any order). Nothing else leaves the device: one call is a CUDA graph.

Method (the same as moe_kernels::measure, through router5.py's functions): captured once in a
CUDA graph. Cold: before each sample, a buffer four times the L2 is read (outside the timed
events), then events are recorded around one replay. Warm: a second graph holds N copies;
time / N. The launch count comes from the profiler on one eager call.

Before timing, each case's output is compared with the exported reference, every slot of the
three outputs: a difference is printed as FAILED (the case is not timed and not written) and the
script exits 1. The bench checks our kernel's output against the same reference on the device.

Determinism (--hashes FILE): at `hash_experts` and each of `hash_tokens`, the PyTorch version runs
`hash_runs` times (eager; 20 with --quick) and each run's outputs are hashed as the bench hashes
ours: zlib's CRC-32 of `sorted_ids`, `expert_ids`, `num_tokens_post_padded` in that order, each
as little-endian int32 bytes. The rows (the bench's columns) go to FILE; `bench ch03 --hashes
--peer-hashes FILE` checks and merges them. A stable sort is deterministic by definition, and the
scatter writes each slot once, so one hash per size is expected here too.

The function runs on any device, so it can be checked on the CPU:

    from ch03_align import align_torch, capacity, output_hash, determinism
"""

import argparse
import ctypes
import os
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router5 import IDENTITY, launches, measure  # noqa: E402  (one method for every peer)
from ch02_moe_loop import read_safetensors, to_torch  # noqa: E402  (the standard-library reader)

HASH_HEADER = ("impl,experts,tokens,k,block_m,pairs,runs,distinct_hashes,runs_equal_to_reference,"
               "hash,reference_hash,device")


def capacity(P, E, block_m):
    """The slots the output needs at most: every active expert wastes at most BLOCK_M - 1, and at
    most min(P, E) experts are active (chapter 3's `capacity`)."""
    return P + min(P, E) * (block_m - 1)


def align_torch(ids, E, block_m):
    """ids [T, k] (integer, values in 0..E) -> (sorted_ids [capacity], expert_ids
    [capacity // block_m], num_tokens_post_padded [1]), all int32, on the ids' device. No
    host synchronisation: capturable in a CUDA graph."""
    flat = ids.reshape(-1).long()  # [P] the expert of each pair
    P = flat.numel()
    cap = capacity(P, E, block_m)
    dev = flat.device
    order = torch.argsort(flat, stable=True)  # [P] pair indices sorted by expert, stable
    counts = torch.zeros(E, dtype=torch.long, device=dev).scatter_add_(
        0, flat, torch.ones_like(flat))  # [E] = torch.bincount(flat, minlength=E), no sync
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)  # [E] inclusive end of each expert's padded run
    first = ends - padded  # [E] each expert's first slot
    run_start = torch.cumsum(counts, 0) - counts  # [E] each expert's first place in `order`
    e_sorted = flat[order]
    slot = first[e_sorted] + torch.arange(P, device=dev) - run_start[e_sorted]
    sorted_ids = torch.full((cap,), P, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, slot, order.to(torch.int32))
    total = ends[-1:]  # [1] the padded total
    tile_start = torch.arange(cap // block_m, device=dev) * block_m
    expert_ids = torch.searchsorted(ends, tile_start, right=True)  # first e with ends[e] > start
    expert_ids = expert_ids.masked_fill_(tile_start >= total, -1).to(torch.int32)
    return sorted_ids, expert_ids, total.to(torch.int32)


NAMES = ("sorted_ids", "expert_ids", "num_tokens_post_padded")


def first_difference(got, want):
    """Where `got` first differs from `want` (triples of tensors), in words; None when equal."""
    for name, g, w in zip(NAMES, got, want):
        g, w = g.cpu(), w.cpu()
        if g.shape != w.shape:
            return f"{name} has shape {list(g.shape)}, expected {list(w.shape)}"
        if g.dtype != w.dtype:
            return f"{name} is {g.dtype}, expected {w.dtype}"
        diff = (g != w).nonzero()
        if diff.numel():
            i = int(diff[0, 0])
            return (f"{name}[{i}] is {int(g[i])}, expected {int(w[i])} "
                    f"({diff.shape[0]} of {g.numel()} slots differ)")
    return None


def le_bytes(t):
    """The bytes of an int32 tensor, little-endian (this machine's order: x86-64), in order."""
    t = t.to(device="cpu", dtype=torch.int32).contiguous()
    assert sys.byteorder == "little"
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def output_hash(outs):
    """CRC-32 (zlib's) of sorted_ids, then expert_ids, then num_tokens_post_padded, as the bench
    hashes ours; 8 hex digits."""
    c = 0
    for t in outs:
        c = zlib.crc32(le_bytes(t), c)
    return f"{c:08x}"


def expected(tensors, E, T, device):
    return tuple(to_torch(*tensors[f"{name}.e{E}.{T}"], device) for name in NAMES)


def determinism(meta, tensors, runs=None, where="cuda", device_name="cuda"):
    """The PyTorch version `runs` times (the file's `hash_runs` when None), eager, at
    `hash_experts` and each of `hash_tokens`: (one CSV line per size in HASH_HEADER's columns,
    how many sizes gave more than one hash or an output other than the reference's)."""
    E, k = int(meta["hash_experts"]), int(meta["k"])
    runs = runs or int(meta["hash_runs"])
    tokens = [int(t) for t in meta["tokens"].split(",")]
    block_m = [int(b) for b in meta[f"block_m.e{E}"].split(",")]
    rows, bad = [], 0
    for T in (int(t) for t in meta["hash_tokens"].split(",")):
        bm = block_m[tokens.index(T)]
        ids = to_torch(*tensors[f"ids.e{E}.{T}"], where).long()
        want = expected(tensors, E, T, where)
        reference = output_hash(want)
        seen, equal, first = set(), 0, None
        for _ in range(runs):
            out = align_torch(ids, E, bm)
            h = output_hash(out)
            first = first or h
            seen.add(h)
            equal += all(torch.equal(g, w) for g, w in zip(out, want))
        rows.append(f"torch_align,{E},{T},{k},{bm},{T * k},{runs},{len(seen)},{equal},{first},"
                    f"{reference},{device_name}")
        print(f"ch03 align hashes: E {E} T {T:6}: {len(seen)} distinct hashes in {runs} runs, "
              f"{equal} equal to the reference, {first} (reference {reference})", flush=True)
        if len(seen) != 1 or equal != runs or first != reference:
            bad += 1
    return rows, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", required=True, help="the ids and expected outputs (bench ch03 --export-ids)")
    ap.add_argument("--samples", required=True, help="where the raw samples go (CSV)")
    ap.add_argument("--hashes", help="where the determinism rows go (CSV)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cold_n, warm_n, copies = (20, 5, 5) if args.quick else (200, 50, 20)
    meta, tensors = read_safetensors(args.ids)
    k = int(meta["k"])
    shapes = meta["shapes"].split(",")
    experts = [int(e) for e in meta["experts"].split(",")]
    tokens = [int(t) for t in meta["tokens"].split(",")]
    block_m = {E: [int(b) for b in meta[f"block_m.e{E}"].split(",")] for E in experts}
    device = torch.cuda.get_device_name(0).replace(" ", "_")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device="cuda").fill_(1)
    print(f"ch03 align: E {experts}, k {k}, tokens {tokens}; torch {torch.__version__}, {device}; "
          f"check: every slot equal to align_reference", flush=True)
    lines = [",".join(IDENTITY + ["cold_us", "warm_us"])]
    failures = 0
    for shape, E in zip(shapes, experts):
        for T, bm in zip(tokens, block_m[E]):
            ids = to_torch(*tensors[f"ids.e{E}.{T}"], "cuda").long()  # [T, k], as topk gives them
            assert ids.shape == (T, k), ids.shape
            want = expected(tensors, E, T, "cuda")
            fn = lambda: align_torch(ids, E, bm)  # noqa: E731
            try:
                where = first_difference(fn(), want)
                if where is not None:
                    failures += 1
                    print(f"{shape} {T:6} torch_align: FAILED: not the reference's output: {where}: "
                          f"not timed", flush=True)
                    continue
                n = launches(fn)
                cold, warm = measure(fn, flush, cold_n, warm_n, copies)
            except Exception as err:  # one broken case must not lose the others' numbers
                failures += 1
                print(f"{shape} {T:6} torch_align: FAILED: {type(err).__name__}: {err}", flush=True)
                continue
            record = {"chapter": "ch03", "shape": shape, "impl": "torch_align", "rows": T,
                      "launches": n, "device": device}
            lines.append(",".join(str(record[c]) for c in IDENTITY)
                         + "," + " ".join(f"{v:.3f}" for v in cold)
                         + "," + " ".join(f"{v:.3f}" for v in warm))
            print(f"{shape} {T:6} torch_align BLOCK_M {bm:3} cold ~{sorted(cold)[len(cold) // 2]:8.2f} us  "
                  f"warm ~{sorted(warm)[len(warm) // 2]:8.2f} us  launches {n:3}  equal to the reference",
                  flush=True)
    with open(args.samples, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"ch03 align: {len(lines) - 1} measurements written to {args.samples}"
          + (f", {failures} FAILED" if failures else ""), flush=True)

    if args.hashes:
        rows, bad = determinism(meta, tensors, 20 if args.quick else None, "cuda", device)
        failures += bad
        with open(args.hashes, "w") as f:
            f.write("\n".join([HASH_HEADER] + rows) + "\n")
        print(f"ch03 align: determinism rows written to {args.hashes}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
