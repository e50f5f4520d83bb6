"""Merges several peers' samples files and output files into one of each, so that one bench run
(`bench ch04 --peers S.csv --peer-outputs O.safetensors`) reads every peer: tools/gpu/run's
"bench ch04" stage runs ch04_grouped_mm.py and engines_moe.py, each writing its own files and
its own log, then merges them here. Standard library only.

    python3 tools/peers/merge_peers.py --samples OUT.csv --outputs OUT.safetensors \\
        A.csv A.safetensors [B.csv B.safetensors ...]
    python3 tools/peers/merge_peers.py --samples OUT.csv A.csv [B.csv ...]
                                  samples only (chapter 5's peers write no outputs)

Each (samples, outputs) pair (each samples file, without --outputs) is taken only when its files
exist and are not empty (a peer that failed before writing leaves the others' rows). Samples
files must share their header; output files must not repeat a tensor name. Exits 1 when no
peer's files were usable.
"""

import argparse
import json
import os
import struct
import sys


def read_raw(path):
    """(header without metadata, data) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, data[8 + n:]


def merge_outputs(paths, out):
    header, blobs, offset = {}, [], 0
    for p in paths:
        h, body = read_raw(p)
        for name, t in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            if name in header:
                sys.exit(f"merge_peers: {name} is in more than one output file ({p})")
            a, b = t["data_offsets"]
            header[name] = {"dtype": t["dtype"], "shape": t["shape"],
                            "data_offsets": [offset, offset + (b - a)]}
            blobs.append(body[a:b])
            offset += b - a
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    return len(header)


def merge_samples(paths, out):
    head, lines = None, []
    for p in paths:
        with open(p) as f:
            rows = [r for r in f.read().splitlines() if r]
        if not rows:
            continue
        if head is None:
            head = rows[0]
        elif rows[0] != head:
            sys.exit(f"merge_peers: {p}'s header is not the others': {rows[0]}")
        lines.extend(rows[1:])
    with open(out, "w") as f:
        f.write("\n".join([head or ""] + lines) + "\n")
    return len(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", required=True, help="the merged samples file")
    ap.add_argument("--outputs", help="the merged outputs file (then the inputs are pairs)")
    ap.add_argument("inputs", nargs="+", help="SAMPLES OUTPUTS pairs, or SAMPLES files alone")
    args = ap.parse_args()
    if args.outputs and len(args.inputs) % 2:
        sys.exit("merge_peers: with --outputs, give the inputs as SAMPLES OUTPUTS pairs")
    pairs = (list(zip(args.inputs[::2], args.inputs[1::2])) if args.outputs
             else [(s, None) for s in args.inputs])
    there = lambda f: f is None or (os.path.isfile(f) and os.path.getsize(f) > 0)  # noqa: E731
    usable = [(s, o) for s, o in pairs if there(s) and there(o)]
    for s, o in pairs:
        if (s, o) not in usable:
            print(f"merge_peers: {s}{' / ' + o if o else ''} missing or empty: left out",
                  flush=True)
    if not usable:
        sys.exit("merge_peers: no peer wrote its files")
    n = merge_samples([s for s, _ in usable], args.samples)
    said = f"merge_peers: {n} measurements from {len(usable)} peers into {args.samples}"
    if args.outputs:
        m = merge_outputs([o for _, o in usable], args.outputs)
        said += f", {m} outputs into {args.outputs}"
    print(said, flush=True)


if __name__ == "__main__":
    main()
