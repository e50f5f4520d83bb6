//! Deterministic bf16 weights made where they are used: on the device by `fused_fill_bf16`, on
//! the host by its twin [`fill_value`], the same bits either way. A GLM-sized layer (288 experts,
//! H 4096, I 1024) holds 3.6 G expert weights: 14.5 GB in f32 on the host through
//! [`MoeWeights`] and chapter 2's generator, single-threaded, before
//! the upload converts them again. Filled on the device it takes a fraction of a second
//! ([`crate::FusedDevice::patterned_on_device`]), and the host makes only the slices a test
//! compares ([`host_weights`]: the experts it names, zeros elsewhere, in parallel chunks).
//!
//! Each tensor has its own seed, `seed·100 + salt` as chapter 2's `MoeWeights::patterned`
//! numbers them (gate 1, w13 2, w2 3, shared w13 5, shared w2 6, shared gate 7), and its own
//! scale: ±1/√(fan-in) for the expert matrices, ±2/√H for the router's gate.

use ch01_router::inputs::patterned;
use ch02_grouped::{MoeConfig, MoeError, MoeWeights, SharedWeights};
use half::bf16;
use moe_kernels::{args, DeviceBuffer, KernelArg, LaunchConfig, Module};

/// The tensors of a layer, each with its own salt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tensor {
    Gate = 1,
    W13 = 2,
    W2 = 3,
    SharedW13 = 5,
    SharedW2 = 6,
    SharedGate = 7,
}

/// The seed of `tensor` in the layer of seed `seed`.
pub fn tensor_seed(seed: u64, tensor: Tensor) -> u64 {
    seed.wrapping_mul(100).wrapping_add(tensor as u64)
}

/// The scale of `tensor` in a layer of `config`: ±1/√(fan-in) for the expert matrices (so
/// activations keep their size through the layer), ±2/√H for the router's gate.
pub fn tensor_scale(config: &MoeConfig, tensor: Tensor) -> f32 {
    let fan_in = match tensor {
        Tensor::W2 => config.intermediate,
        Tensor::SharedW2 => config.shared.map_or(1, |s| s.intermediate),
        _ => config.hidden,
    };
    let s = 1.0 / (fan_in.max(1) as f32).sqrt();
    if tensor == Tensor::Gate {
        2.0 * s
    } else {
        s
    }
}

// ANCHOR: fill_value
/// Element `index` of a filled tensor: the kernel's arithmetic, step for step (splitmix64 of
/// `seed + (index + 1)·φ`, its top 24 bits as u in [0, 1), exactly; `(2u − 1)·scale` in f32,
/// then bf16 to nearest even).
pub fn fill_value(seed: u64, index: u64, scale: f32) -> bf16 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = (z >> 40) as u32 as f32 * (1.0 / 16_777_216.0);
    bf16::from_f32((2.0 * u - 1.0) * scale)
}
// ANCHOR_END: fill_value

/// Elements `offset .. offset + out.len()` of a filled tensor, as f32, in parallel chunks.
pub fn fill_host_f32(seed: u64, offset: usize, scale: f32, out: &mut [f32]) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = out.len().div_ceil(threads).max(1 << 16);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let start = offset + c * chunk;
                for (i, v) in part.iter_mut().enumerate() {
                    *v = fill_value(seed, (start + i) as u64, scale).to_f32();
                }
            });
        }
    });
}

/// Fills all of `buf` on its device with `fused_fill_bf16` (element i of the tensor at `offset +
/// i`). Only launches.
pub fn fill_device(
    module: &Module,
    buf: &DeviceBuffer<bf16>,
    offset: usize,
    seed: u64,
    scale: f32,
) -> Result<(), MoeError> {
    if buf.is_empty() {
        return Ok(());
    }
    // Grid-stride: enough blocks to fill the GPU, not one per element.
    let blocks = buf.len().div_ceil(256).min(8192) as u32;
    module.launch(
        "fused_fill_bf16",
        LaunchConfig::blocks(blocks, 256),
        &args![
            buf,
            buf.len() as i64,
            offset as i64,
            KernelArg::U64(seed),
            KernelArg::F32(scale)
        ],
    )?;
    Ok(())
}

/// The layer of seed `seed` on the host, in f32 (the bf16 values exactly), with only the routed
/// experts in `experts` filled and the others zero: what chapter 2's layers need to be compared
/// with a layer filled on the device, on a routing that only reaches those experts. The zeros
/// cost nothing until written (the allocator hands out zeroed pages), so a 288-expert layer's
/// 14.5 GB mostly stays virtual. The gate and the shared expert are filled whole.
pub fn host_weights(config: &MoeConfig, seed: u64, experts: std::ops::Range<usize>) -> MoeWeights {
    let (h, i, e) = (config.hidden, config.intermediate, config.experts);
    let (n13, n2) = (2 * i * h, h * i);
    let mut w13 = vec![0.0f32; e * n13];
    let mut w2 = vec![0.0f32; e * n2];
    let (s13, s2) = (
        tensor_scale(config, Tensor::W13),
        tensor_scale(config, Tensor::W2),
    );
    let (start, end) = (experts.start.min(e), experts.end.min(e));
    fill_host_f32(
        tensor_seed(seed, Tensor::W13),
        start * n13,
        s13,
        &mut w13[start * n13..end * n13],
    );
    fill_host_f32(
        tensor_seed(seed, Tensor::W2),
        start * n2,
        s2,
        &mut w2[start * n2..end * n2],
    );
    let whole = |t: Tensor, n: usize| {
        let mut v = vec![0.0f32; n];
        fill_host_f32(tensor_seed(seed, t), 0, tensor_scale(config, t), &mut v);
        v
    };
    let shared = config.shared.map(|s| SharedWeights {
        w13: whole(Tensor::SharedW13, 2 * s.intermediate * h),
        w2: whole(Tensor::SharedW2, h * s.intermediate),
        gate: s.gated.then(|| whole(Tensor::SharedGate, h)),
    });
    MoeWeights {
        config: config.clone(),
        gate: router_gate(config, seed),
        bias: None,
        w13,
        w2,
        shared,
    }
}

/// The router's gate `[E, H]` f32 of the layer of seed `seed` (chapter 1's generator: small, and
/// the router computes in f32).
pub fn router_gate(config: &MoeConfig, seed: u64) -> Vec<f32> {
    patterned(
        config.experts * config.hidden,
        tensor_seed(seed, Tensor::Gate),
        tensor_scale(config, Tensor::Gate),
    )
}
