//! The safe wrappers of `kernels/ch12_parallel.cu`: each checks its buffers and queues one
//! kernel (a grid-stride loop of [`CH12_THREADS`]-thread blocks; nothing is launched for no
//! values).

use crate::error::ParallelError;
use ch02_grouped::error::expect_len;
use half::bf16;
use moe_kernels::{args, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};

/// `kernels/ch12_parallel.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch12_parallel");

/// Threads per block of every kernel of the family (its `CH12_THREADS`).
pub const CH12_THREADS: u32 = 256;

fn int(v: usize) -> KernelArg {
    KernelArg::I32(v as i32)
}

/// `ch12_gather_rows(x [T, H] bf16, rows [n] i32, out [n, H] bf16, T, n, H)`: `out[i] =
/// x[rows[i]]`.
pub fn gather_rows(
    module: &Module,
    x: &DeviceBuffer<bf16>,
    rows: &DeviceBuffer<i32>,
    out: &DeviceBuffer<bf16>,
    hidden: usize,
) -> Result<(), ParallelError> {
    let (t, n) = (x.len() / hidden.max(1), rows.len());
    expect_len("x [T, H]", x.len(), t * hidden)?;
    expect_len("out [n, H]", out.len(), n * hidden)?;
    if n * hidden == 0 {
        return Ok(());
    }
    module.launch(
        "ch12_gather_rows",
        LaunchConfig::for_elements(n * hidden, CH12_THREADS),
        &args![x, rows, out, int(t), int(n), int(hidden)],
    )?;
    Ok(())
}

/// `ch12_combine(y [n, H] f32, at [T, k] i32, shared [T, H] f32 or null, out [T, H] f32, n, T,
/// H, k)`: `out[t] = ((0 + y[at[t,0]]) + y[at[t,1]]) + … + shared[t]`.
pub fn combine(
    module: &Module,
    y: &DeviceBuffer<f32>,
    at: &DeviceBuffer<i32>,
    shared: Option<&DeviceBuffer<f32>>,
    out: &DeviceBuffer<f32>,
    (rows, hidden, k): (usize, usize, usize),
) -> Result<(), ParallelError> {
    let n = y.len() / hidden.max(1);
    expect_len("y [n, H]", y.len(), n * hidden)?;
    expect_len("at [T, k]", at.len(), rows * k)?;
    expect_len("out [T, H]", out.len(), rows * hidden)?;
    if let Some(s) = shared {
        expect_len("shared [T, H]", s.len(), rows * hidden)?;
    }
    if rows * hidden == 0 {
        return Ok(());
    }
    module.launch(
        "ch12_combine",
        LaunchConfig::for_elements(rows * hidden, CH12_THREADS),
        &args![
            y,
            at,
            shared.map_or(KernelArg::Ptr(0), KernelArg::from),
            out,
            int(n),
            int(rows),
            int(hidden),
            int(k)
        ],
    )?;
    Ok(())
}

/// `ch12_sum_ranks(parts [R, n] f32, out [n] f32, n, R)`: `out[i] = ((0 + p₀[i]) + p₁[i]) + …`.
pub fn sum_ranks(
    module: &Module,
    parts: &DeviceBuffer<f32>,
    out: &DeviceBuffer<f32>,
    ranks: usize,
) -> Result<(), ParallelError> {
    let n = out.len();
    expect_len("parts [R, n]", parts.len(), ranks * n)?;
    if n == 0 {
        return Ok(());
    }
    module.launch(
        "ch12_sum_ranks",
        LaunchConfig::for_elements(n, CH12_THREADS),
        &args![parts, out, n as i64, int(ranks)],
    )?;
    Ok(())
}
