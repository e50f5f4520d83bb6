//! The router's logits, `[T, E] = hidden [T, H] · gate [E, H]ᵀ`, summed three ways from the same
//! bf16 hidden states and bf16 gate weight.
//!
//! Every product of two bf16 numbers is exact in fp32 (8 significant bits times 8 fit in 24), so
//! a fused multiply-add and a multiply then add give the same bits here: the only rounding is
//! in the additions, and the order of the additions is all that distinguishes one fp32 GEMM from
//! another. The fp64 sum of the same exact products is the reference (its own rounding, a few
//! units in the 16th digit, is far below anything measured here).
//!
//! The loops are blocked by rows (a block of rows shares each gate row while it is in cache) and
//! run along the experts innermost (each expert's sum is its own variable, so the compiler can
//! vectorise across experts without changing any one sum's order).

use ch05_fused_router::tiny_gemm::{geometry::TINY_THREADS, SLICE};

/// Rows that share one pass over the gate weight.
const BLOCK_ROWS: usize = 8;
/// Lanes of a warp.
const WARP: usize = 32;

/// A router's gate weight, bf16 values held in f32, in both layouts.
#[derive(Clone, Debug)]
pub struct Gate {
    pub hidden: usize,
    pub experts: usize,
    /// `[E, H]` as a checkpoint stores it.
    pub rows: Vec<f32>,
    /// `[H, E]`: what the blocked loops read.
    transposed: Vec<f32>,
}

impl Gate {
    /// `w` is `[experts, hidden]`; every value is rounded to bf16 first.
    pub fn new(w: &[f32], hidden: usize, experts: usize) -> Gate {
        assert_eq!(w.len(), hidden * experts, "gate [E, H]");
        let rows: Vec<f32> = w.iter().map(|&v| bf16(v)).collect();
        let mut transposed = vec![0f32; hidden * experts];
        for e in 0..experts {
            for h in 0..hidden {
                transposed[h * experts + e] = rows[e * hidden + h];
            }
        }
        Gate {
            hidden,
            experts,
            rows,
            transposed,
        }
    }

    /// Gate row `h` of the transposed layout: the `[E]` weights that multiply hidden element `h`.
    fn column(&self, h: usize) -> &[f32] {
        &self.transposed[h * self.experts..(h + 1) * self.experts]
    }
}

/// `x` rounded to bf16 (nearest even), back in f32.
pub fn bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// The row count of `x` `[T, H]`.
fn rows_of(gate: &Gate, x: &[f32]) -> usize {
    assert_eq!(x.len() % gate.hidden, 0, "hidden [T, H]");
    x.len() / gate.hidden
}

// ANCHOR: reference
/// The reference: each logit the fp64 sum of its `H` exact products. `x` `[T, H]` holds bf16
/// values; returns `[T, E]` f64.
pub fn logits_f64(gate: &Gate, x: &[f32]) -> Vec<f64> {
    let (h, e, t) = (gate.hidden, gate.experts, rows_of(gate, x));
    let mut out = vec![0f64; t * e];
    for r0 in (0..t).step_by(BLOCK_ROWS) {
        let nb = BLOCK_ROWS.min(t - r0);
        let acc = &mut out[r0 * e..(r0 + nb) * e]; // [nb, E]
        for j in 0..h {
            let w = gate.column(j);
            for r in 0..nb {
                let xv = x[(r0 + r) * h + j];
                for (a, &wv) in acc[r * e..(r + 1) * e].iter_mut().zip(w) {
                    *a += (xv * wv) as f64; // the product is exact in f32
                }
            }
        }
    }
    out
}
// ANCHOR_END: reference

// ANCHOR: sequential
/// fp32, each logit's products added in order along H: what one thread with one accumulator
/// does (a plain CPU loop, or a GEMM that gives each output to one thread and never splits H).
pub fn logits_f32_sequential(gate: &Gate, x: &[f32]) -> Vec<f32> {
    let (h, e, t) = (gate.hidden, gate.experts, rows_of(gate, x));
    let mut out = vec![0f32; t * e];
    for r0 in (0..t).step_by(BLOCK_ROWS) {
        let nb = BLOCK_ROWS.min(t - r0);
        let acc = &mut out[r0 * e..(r0 + nb) * e]; // [nb, E]
        for j in 0..h {
            let w = gate.column(j);
            for r in 0..nb {
                let xv = x[(r0 + r) * h + j];
                for (a, &wv) in acc[r * e..(r + 1) * e].iter_mut().zip(w) {
                    *a += xv * wv;
                }
            }
        }
    }
    out
}
// ANCHOR_END: sequential

// ANCHOR: tiny_gemm_order
/// fp32 in the order of chapter 5's tiny GEMM on CUDA cores (`tiny_gemm` in
/// `kernels/ch05_tiny_gemm.cu`): thread `i` of 256 adds the products of its 16-byte slices
/// `i, i + 256, i + 512, …` (8 products each) into one accumulator; each warp adds its 32 lanes
/// with `__shfl_xor_sync` at offsets 16, 8, 4, 2, 1; then the 8 warps' sums are added in warp
/// order. The kernel's bits for one row, on the emulator and on the GPU.
pub fn logits_f32_tiny_gemm(gate: &Gate, x: &[f32]) -> Vec<f32> {
    let (h, e, t) = (gate.hidden, gate.experts, rows_of(gate, x));
    assert_eq!(h % SLICE, 0, "the tiny GEMM reads whole 16-byte slices");
    let slices = h / SLICE;
    let warps = TINY_THREADS / WARP;
    let mut out = vec![0f32; t * e];
    for r0 in (0..t).step_by(BLOCK_ROWS) {
        let nb = BLOCK_ROWS.min(t - r0);
        let row_len = nb * e;
        let mut lanes = vec![0f32; WARP * row_len]; // [lane][nb, E]
        let mut warp_sums = vec![0f32; warps * row_len]; // [warp][nb, E]
        for warp in 0..warps {
            lanes.fill(0.0);
            // ANCHOR: tiny_thread
            for lane in 0..WARP {
                let acc = &mut lanes[lane * row_len..(lane + 1) * row_len];
                let mut s = warp * WARP + lane;
                while s < slices {
                    for j in s * SLICE..(s + 1) * SLICE {
                        let w = gate.column(j);
                        for r in 0..nb {
                            let xv = x[(r0 + r) * h + j];
                            for (a, &wv) in acc[r * e..(r + 1) * e].iter_mut().zip(w) {
                                *a += xv * wv;
                            }
                        }
                    }
                    s += TINY_THREADS;
                }
            }
            // ANCHOR_END: tiny_thread
            // The xor tree: after the round at `off`, lane l holds v[l] + v[l ^ off]; lane 0's
            // value needs lanes 0..off of each round (l ^ off = l + off for l < off).
            let mut off = WARP / 2;
            while off > 0 {
                let (low, high) = lanes.split_at_mut(off * row_len);
                for (a, &b) in low.iter_mut().zip(&high[..off * row_len]) {
                    *a += b;
                }
                off /= 2;
            }
            warp_sums[warp * row_len..(warp + 1) * row_len].copy_from_slice(&lanes[..row_len]);
        }
        let dst = &mut out[r0 * e..(r0 + nb) * e];
        dst.copy_from_slice(&warp_sums[..row_len]);
        for w in 1..warps {
            for (d, &v) in dst
                .iter_mut()
                .zip(&warp_sums[w * row_len..(w + 1) * row_len])
            {
                *d += v;
            }
        }
    }
    out
}
// ANCHOR_END: tiny_gemm_order

/// One logit in the tiny GEMM's order, written as the kernel's threads compute it, one product
/// at a time: the independent check of [`logits_f32_tiny_gemm`].
pub fn tiny_gemm_one(x: &[f32], w: &[f32]) -> f32 {
    let slices = x.len() / SLICE;
    let mut lane_acc = vec![0f32; TINY_THREADS];
    for (i, acc) in lane_acc.iter_mut().enumerate() {
        let mut s = i;
        while s < slices {
            for j in s * SLICE..(s + 1) * SLICE {
                *acc += x[j] * w[j];
            }
            s += TINY_THREADS;
        }
    }
    let mut partial = Vec::new();
    for warp in lane_acc.chunks(WARP) {
        partial.push(xor_tree_lane0(warp));
    }
    let mut v = partial[0];
    for p in &partial[1..] {
        v += p;
    }
    v
}

// ANCHOR: xor_tree
/// What lane 0 holds after a warp's `v += __shfl_xor_sync(mask, v, off)` for off = 16, 8, 4,
/// 2, 1, every lane doing the same: `lanes` are the 32 values before the first round.
pub fn xor_tree_lane0(lanes: &[f32]) -> f32 {
    assert_eq!(lanes.len(), WARP);
    let mut v = lanes.to_vec();
    let mut off = WARP / 2;
    while off > 0 {
        let before = v.clone();
        for (l, x) in v.iter_mut().enumerate() {
            *x = before[l] + before[l ^ off];
        }
        off /= 2;
    }
    v[0]
}
// ANCHOR_END: xor_tree
