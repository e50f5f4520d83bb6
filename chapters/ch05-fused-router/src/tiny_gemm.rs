//! The tiny GEMM (`kernels/ch05_tiny_gemm.cu`): `logits [T, E] f32 = hidden [T, H] bf16 ·
//! gate [E, H] bf16ᵀ`, fp32 accumulation, for few rows.
//!
//! One safe wrapper, [`enqueue`], checks every length and size and then only launches. Any T
//! runs: up to 7 rows on CUDA cores (`tiny_gemm_r{1,2,4,8,16}`), from 8 on tensor cores
//! (`tiny_gemm_tc`), [`GemmForm`]. Within a form a row's logits have the same bits whatever the
//! batch around it, on the emulator and on the GPU; the two forms sum in different orders.

use ch01_router::chain::{expect_len, DeviceRouterError};
use half::bf16;
use moe_kernels::{args, DeviceBuffer, KernelSource, LaunchConfig, Module};

/// `kernels/ch05_tiny_gemm.cu`, built for the GPU (NVRTC at run time) and for the emulator.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch05_tiny_gemm");

/// The launch geometry, as `kernels/ch05_tiny_gemm.cu` defines it (`TINY_THREADS`, …).
pub mod geometry {
    moe_kernels::kernel_constants!("ch05_tiny_gemm");
}
use geometry::*;

/// The bf16 elements of one 16-byte slice: H must be a multiple of this.
pub const SLICE: usize = 8;

/// The block heights the kernel is compiled for, smallest first, with their entry points.
const HEIGHTS: [(usize, &str); 5] = [
    (1, "tiny_gemm_r1"),
    (2, "tiny_gemm_r2"),
    (4, "tiny_gemm_r4"),
    (8, "tiny_gemm_r8"),
    (16, "tiny_gemm_r16"),
];

// ANCHOR: gemm_form
/// Which kernel computes the logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmForm {
    /// `tiny_gemm_r{1,2,4,8,16}`: two experts per block, one fmaf per product; the gate weight
    /// spread over E / 2 blocks, the form for few rows.
    CudaCores,
    /// `tiny_gemm_tc`: 16 experts × 16 tokens per block on tensor cores (mma.sync m16n8k16).
    TensorCores,
}

/// The form [`enqueue`] runs for `rows` rows: CUDA cores up to 7, tensor cores from
/// `TC_FROM_ROWS` (8) on (see the constant in `kernels/ch05_tiny_gemm.cu` for why).
pub fn form_for(rows: usize) -> GemmForm {
    if rows >= TC_FROM_ROWS {
        GemmForm::TensorCores
    } else {
        GemmForm::CudaCores
    }
}
// ANCHOR_END: gemm_form

/// The entry point and the launch for `rows` rows of `experts` experts in `form`. CUDA cores: the smallest block height that holds
/// `min(rows, 16)` rows, 2 experts per block along x, blocks of that height along y. Tensor
/// cores: 16 experts along x, 16 tokens along y, 8 warps.
pub fn launch(form: GemmForm, rows: usize, experts: usize) -> (&'static str, LaunchConfig) {
    if form == GemmForm::TensorCores {
        let cfg = LaunchConfig {
            grid: (
                experts.div_ceil(TC_EXPERTS) as u32,
                rows.div_ceil(8 * TC_TILES) as u32,
                1,
            ),
            block: (32 * TC_WARPS as u32, 1, 1),
            shared_bytes: 0,
            dependent: false,
        };
        return ("tiny_gemm_tc", cfg);
    }
    let want = rows.clamp(1, TINY_ROWS);
    let (height, name) = *HEIGHTS
        .iter()
        .find(|(h, _)| *h >= want)
        .expect("TINY_ROWS is the last height");
    let cfg = LaunchConfig {
        grid: (
            experts.div_ceil(TINY_EXPERTS_PER_BLOCK) as u32,
            rows.div_ceil(height) as u32,
            1,
        ),
        block: (TINY_THREADS as u32, 1, 1),
        shared_bytes: 0,
        dependent: false,
    };
    (name, cfg)
}

/// Checks the sizes the kernel takes: H a whole number of 16-byte slices, and not none (with
/// H = 0 every logit would be 0 and the routing the lowest ids, a result that means nothing).
pub fn check_hidden(hidden: usize) -> Result<(), DeviceRouterError> {
    if hidden == 0 {
        return Err(DeviceRouterError::Zero {
            what: "the hidden size",
            why: "every logit would be 0, and every row routed to the lowest ids",
        });
    }
    // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace's MSRV is 1.85).
    #[allow(clippy::manual_is_multiple_of)]
    if hidden % SLICE == 0 {
        Ok(())
    } else {
        Err(DeviceRouterError::NotMultiple {
            what: "the hidden size",
            of: SLICE,
            why: "the tiny GEMM loads whole 16-byte slices of bf16",
            got: hidden,
        })
    }
}

// ANCHOR: enqueue
/// Queues `logits [rows, experts] = hidden [rows, h] · gate [experts, h]ᵀ` on `module` (this
/// family, loaded on the buffers' device), in [`form_for`]'s form. Kernels:
/// `tiny_gemm_r{1,2,4,8,16}` and `tiny_gemm_tc`, each `(const bf16* hidden, const bf16* gate,
/// float* logits, int T, int H, int E)`; grid and blocks by [`launch`]. An empty batch
/// launches nothing.
pub fn enqueue(
    module: &Module,
    hidden: &DeviceBuffer<bf16>,
    gate: &DeviceBuffer<bf16>,
    logits: &DeviceBuffer<f32>,
    rows: usize,
    h: usize,
    experts: usize,
) -> Result<(), DeviceRouterError> {
    let form = form_for(rows);
    enqueue_as(form, module, hidden, gate, logits, rows, h, experts)
}

/// As [`enqueue`], in the form given.
#[allow(clippy::too_many_arguments)]
pub fn enqueue_as(
    form: GemmForm,
    module: &Module,
    hidden: &DeviceBuffer<bf16>,
    gate: &DeviceBuffer<bf16>,
    logits: &DeviceBuffer<f32>,
    rows: usize,
    h: usize,
    experts: usize,
) -> Result<(), DeviceRouterError> {
    check_hidden(h)?;
    expect_len("hidden [T, H]", hidden.len(), rows * h)?;
    expect_len("gate weight [E, H]", gate.len(), experts * h)?;
    expect_len("logits [T, E]", logits.len(), rows * experts)?;
    if rows == 0 || experts == 0 {
        return Ok(());
    }
    let (name, cfg) = launch(form, rows, experts);
    module.launch(
        name,
        cfg,
        &args![hidden, gate, logits, rows as i32, h as i32, experts as i32],
    )?;
    Ok(())
}
// ANCHOR_END: enqueue
