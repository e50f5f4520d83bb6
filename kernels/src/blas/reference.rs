//! The emulator's library GEMM: the definition, in plain loops. Each output adds its products
//! in order, one `fmaf` per product, starting from 0 (or from `y` when accumulating), then
//! rounds once to the output type. Rows are shared out to the emulator's worker threads.

use super::call::{Dtype, GemmCall};

fn load(ptr: u64, i: usize, t: Dtype) -> f32 {
    // SAFETY (callers): `ptr` is a live emulator allocation holding at least i + 1 elements of `t`.
    unsafe {
        match t {
            Dtype::F32 => *(ptr as *const f32).add(i),
            Dtype::Bf16 => f32::from_bits((*(ptr as *const u16).add(i) as u32) << 16),
        }
    }
}

fn store(ptr: u64, i: usize, t: Dtype, v: f32) {
    unsafe {
        match t {
            Dtype::F32 => *(ptr as *mut f32).add(i) = v,
            Dtype::Bf16 => *(ptr as *mut half::bf16).add(i) = half::bf16::from_f32(v),
        }
    }
}

/// Runs `call` on host memory with `workers` threads.
///
/// # Safety
/// Every address in `call` must be a live host allocation large enough for the shape and
/// leading dimensions it describes, and `y` must not overlap `x` or `w`.
pub(crate) unsafe fn gemm(call: &GemmCall, workers: usize) {
    let c = *call;
    let rows_per = c.rows.div_ceil(workers.max(1)).max(1);
    std::thread::scope(|s| {
        for first in (0..c.rows).step_by(rows_per) {
            s.spawn(move || {
                for r in first..(first + rows_per).min(c.rows) {
                    for o in 0..c.out_features {
                        let mut acc = if c.accumulate {
                            load(c.y, r * c.ldy + o, c.output)
                        } else {
                            0.0
                        };
                        for k in 0..c.in_features {
                            let a = load(c.x, r * c.ldx + k, c.input);
                            let b = load(c.w, o * c.ldw + k, c.input);
                            acc = a.mul_add(b, acc);
                        }
                        store(c.y, r * c.ldy + o, c.output, acc);
                    }
                }
            });
        }
    });
}
