//! The fused layer on a device: chapter 1's router, then the kernels of
//! `kernels/ch04_fused_moe.cu` on one of two paths, all queued without looking at the routing on
//! the host.
//!
//! The tiled path (tensor cores, tiles of chapter 3's sorted pairs), one call, whatever the
//! routing:
//!
//! | step | kernel | launches |
//! |---|---|---|
//! | route (in [`MoeLayer::forward`]) | chapter 1's chain | 6 to 9 |
//! | `xb = bf16(hidden)` | `fused_to_bf16` | 1 |
//! | sort and pad the pairs | chapter 3's `DeviceAlign` | 1 for a small batch, 2 above |
//! | `act = SwiGLU(xb · w13[e]ᵀ)` per tile | `fused_gemm1_swiglu` | 1 |
//! | `y = weight · (act · w2[e]ᵀ)` per tile | `fused_gemm2` | 1 |
//! | the shared expert, if any | `fused_gemm1_swiglu`, `fused_gemm2` (+ `fused_gate_logit`) | 2 or 3 |
//! | `out[t] = Σⱼ y[t·k + j]` (+ shared) | `fused_combine` | 1 |
//!
//! The decode path (few pairs per expert; [`choose_path`]) reads the routing's ids directly, so
//! it needs neither chapter 3's layout nor a bf16 copy of the input:
//!
//! | step | kernel | launches |
//! |---|---|---|
//! | `act = SwiGLU(bf16(x) · w13[e]ᵀ)` per pair, the shared expert's rows and gate logit too | `decode_gemm1_swiglu` | 1 |
//! | `out[t] = Σⱼ weightⱼ · (actⱼ · w2[eⱼ]ᵀ)` (+ shared) | `decode_gemm2_sum` | 1 |
//!
//! The grouped decode path ([`Path::DecodeGrouped`], only when asked for:
//! [`FusedDevice::with_path`]) runs the same arithmetic a tile of pairs of one expert at a time, so
//! each expert's weights are read once per group of up to 8 of its pairs instead of once per pair;
//! the same bits as the decode path:
//!
//! | step | kernel | launches |
//! |---|---|---|
//! | `xb = bf16(hidden)` | `fused_to_bf16` | 1 |
//! | sort and pad the pairs, BLOCK_M = 8 | chapter 3's `DeviceAlign` | 1 for a small batch, 2 above |
//! | `act = SwiGLU(xb · w13[e]ᵀ)` per tile (the shared expert's tokens in tiles after them) | `decode_grouped_gemm1_swiglu` | 1 |
//! | `y = weight · (act · w2[e]ᵀ)` per tile (and the shared expert's) | `decode_grouped_gemm2` | 1 |
//! | `out[t] = Σⱼ y[t·k + j]` (+ shared) | `fused_combine` | 1 |
//!
//! Less fused, for the fusion figure ([`Fusion`]; the same bits within a path): with
//! [`Fusion::SwiGlu`] the decode path's GEMM 2 writes `y` per pair (`decode_gemm2`) and
//! `fused_combine` sums over k (3 launches); with [`Fusion::Unfused`] either path's GEMM 1 writes
//! gate|up (`fused_gemm1_gateup`, `decode_gemm1_gateup` or `decode_grouped_gemm1_gateup`) and
//! `fused_swiglu` follows (one more per expert kind, the shared expert's included). The grouped
//! decode path with [`Fusion::SwiGluSumK`] runs the decode path's `decode_gemm2_sum` after its
//! grouped GEMM 1 (no `y`, no combine; w2 read once per pair).
//!
//! The grids are sized for the most tiles (or pairs) any routing can need; a tile past the padded
//! total, which the kernel reads from the device, returns at once. So the launches, their grids
//! and every buffer depend only on the batch size: a CUDA graph captured for one batch size
//! serves every routing. Which path, [`Fusion`], [`TileConfig`] and [`DecodeGeometry`] a batch
//! gets is the layer's [`BatchPlan`] ([`FusedDevice::plan_for`]); the `with_*` methods override
//! each, for the tests and the bench.
//!
//! The hidden states may come in f32 or already in bf16 ([`FusedDevice::enqueue_experts_from`],
//! [`Hidden`]): from bf16 the tiled and grouped decode paths skip `fused_to_bf16`, and the decode
//! path runs GEMM 1's `_bf16` entry points; the same bits either way.
//!
//! Only bf16: the kernels multiply on bf16 tensor cores. A layer built for [`Dtype::F32`] is a
//! typed error ([`MoeError::Config`] naming `dtype`); chapter 2's layers are the f32 path.

use crate::choose::{
    choose_path, default_fusion, default_tile, portable_tile, tuned_table, DecodeGeometry, Fusion,
    Path, TileConfig,
};
use crate::fill::{fill_device, router_gate, tensor_scale, tensor_seed, Tensor};
use ch01_router::chain::{
    download, DeviceMatrix, DeviceRouter, FiveLineChain, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::Routing;
use ch02_grouped::error::expect_len;
use ch02_grouped::layer::{experts_rows, rows_of, LayerOutput, MoeLayer};
use ch02_grouped::weights::{check_sizes, SharedSizes, WeightSizes};
use ch02_grouped::{Dtype, MoeConfig, MoeError, MoeWeights};
use ch03_align::device::{AlignBuffers, DeviceAlign};
use ch03_align::{capacity, choose_block_m, max_tiles, AlignError};
use half::bf16;
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod enqueue;
mod plan;
mod workspace;
pub use enqueue::{Hidden, Layout};
pub use plan::BatchPlan;
pub use workspace::FusedWorkspace;

/// `kernels/ch04_fused_moe.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch04_fused_moe");

// The launch geometry lives in crate::geometry (choose.rs reads it too); its old path stays.
pub use crate::geometry;
pub use crate::geometry::BLOCK_MS;
use geometry::{
    DECODE_GROUP, DECODE_GROUP_MAX_THREADS, FUSED_BN1, FUSED_BN2, FUSED_ELEMENTWISE_THREADS,
    FUSED_THREADS, FUSED_TO_BF16_VALUES, FUSED_WARPS, WG_TMA_BOX,
};

/// CUDA's limit on `gridDim.y`: the column blocks of a GEMM.
const MAX_GRID_Y: usize = 65_535;

/// The shared expert on the device: one more expert that every token runs.
pub struct SharedDevice {
    pub inter: usize,
    /// `[2Is, H]` bf16
    pub w13: DeviceBuffer<bf16>,
    /// `[H, Is]` bf16
    pub w2: DeviceBuffer<bf16>,
    /// `[H]` bf16, Qwen2-MoE's gate.
    pub gate: Option<DeviceBuffer<bf16>>,
}

/// A layer's expert weights already on the device, in bf16 (for [`FusedDevice::from_device`]).
pub struct DeviceWeights {
    /// `[E, 2I, H]` bf16
    pub w13: DeviceBuffer<bf16>,
    /// `[E, H, I]` bf16
    pub w2: DeviceBuffer<bf16>,
    pub shared: Option<SharedDevice>,
}

/// What every variant of one layer shares: the weights on the device.
struct Weights {
    /// The router's gate `[E, H]` and bias `[E]`, f32 (the router computes in f32).
    gate: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    experts: DeviceWeights,
    /// Version 7's tensor maps (sm_90a GPUs, H and I multiples of 8): 16 u64 (128 bytes) for
    /// each of w13 `[E·2I, H]`, w2 `[E·H, I]` and the shared expert's w13 and w2 (zeros when
    /// there is none), their boxes 64 rows × 64 bf16 ([`TensorMap`]).
    maps: Option<DeviceBuffer<u64>>,
}

/// Which weight tensor's map a version 7 launch reads (its index in [`Weights::maps`]).
#[derive(Clone, Copy, Debug)]
enum TensorMap {
    W13 = 0,
    W2 = 1,
    SharedW13 = 2,
    SharedW2 = 3,
}

/// The first of a layer's widths (H, I, the shared expert's I) whose bf16 rows are not whole
/// 16-byte copies, which versions 4 to 11 need (wgmma's staged rows, TMA's row strides).
fn width_not_16_bytes(c: &MoeConfig) -> Option<(&'static str, usize)> {
    [
        ("hidden", c.hidden),
        ("intermediate", c.intermediate),
        (
            "shared intermediate",
            c.shared.map_or(8, |s| s.intermediate),
        ),
    ]
    .into_iter()
    .find(|(_, n)| n % 8 != 0)
}

/// The four tensor maps of [`Weights::maps`], or None where no version 7 configuration can run.
/// Their boxes are the kernel's: WG_TMA_BOX rows of WG_TMA_BOX bf16 (one swizzled 128-byte row).
fn encode_maps(
    device: &'static Device,
    c: &MoeConfig,
    experts: &DeviceWeights,
) -> Result<Option<DeviceBuffer<u64>>, MoeError> {
    if !device.runs_hopper() || width_not_16_bytes(c).is_some() {
        return Ok(None);
    }
    let (h, i, e) = (c.hidden, c.intermediate, c.experts);
    let (br, bc) = (WG_TMA_BOX as u32, WG_TMA_BOX as u32);
    let mut all = vec![0u64; 64];
    let mut put = |at: TensorMap, map: [u64; 16]| {
        all[16 * at as usize..][..16].copy_from_slice(&map);
    };
    put(
        TensorMap::W13,
        device.tensor_map_bf16(&experts.w13, e * 2 * i, h, br, bc)?,
    );
    put(
        TensorMap::W2,
        device.tensor_map_bf16(&experts.w2, e * h, i, br, bc)?,
    );
    if let Some(s) = &experts.shared {
        put(
            TensorMap::SharedW13,
            device.tensor_map_bf16(&s.w13, 2 * s.inter, h, br, bc)?,
        );
        put(
            TensorMap::SharedW2,
            device.tensor_map_bf16(&s.w2, h, s.inter, br, bc)?,
        );
    }
    Ok(Some(device.upload(&all)?))
}

/// Numbers the fused layers of a process, so that a workspace is only used by its layer.
static NEXT_LAYER_ID: AtomicU64 = AtomicU64::new(0);

/// The fused layer: its weights uploaded once, in bf16; no host copy kept. A clone shares the
/// weights (so the `with_*` variants of one layer cost no memory) and gets its own workspaces.
pub struct FusedDevice {
    device: &'static Device,
    id: u64,
    config: MoeConfig,
    bias_host: Option<Vec<f32>>,
    module: Arc<Module>,
    weights: Arc<Weights>,
    /// BLOCK_M chosen by the caller instead of chapter 3's rule (tests try every tile height).
    block_m: Option<usize>,
    path: Option<Path>,
    fusion: Option<Fusion>,
    tile: Option<TileConfig>,
    decode: Option<DecodeGeometry>,
    /// Whether the measured table may override the rules.
    tuned: bool,
    /// Versions 4 to 8 in the grouped order ([`TileConfig::grid`]).
    grouped: bool,
    /// The tiled path's `y` in bf16 ([`Self::with_bf16_y`]).
    bf16_y: bool,
}

impl Clone for FusedDevice {
    fn clone(&self) -> Self {
        FusedDevice {
            device: self.device,
            id: NEXT_LAYER_ID.fetch_add(1, Ordering::Relaxed),
            config: self.config.clone(),
            bias_host: self.bias_host.clone(),
            module: self.module.clone(),
            weights: self.weights.clone(),
            block_m: self.block_m,
            path: self.path,
            fusion: self.fusion,
            tile: self.tile,
            decode: self.decode,
            tuned: self.tuned,
            grouped: self.grouped,
            bf16_y: self.bf16_y,
        }
    }
}

/// Chapter 3's errors in the layer's error type.
fn align_error(e: AlignError) -> MoeError {
    match e {
        AlignError::Kernel(k) => MoeError::Kernel(k),
        AlignError::Limit { what, limit, got } => MoeError::Config {
            field: what,
            expected: format!("at most {limit}"),
            found: got.to_string(),
        },
        other => MoeError::Config {
            field: "alignment",
            expected: "a layout chapter 3 can build".into(),
            found: other.to_string(),
        },
    }
}

/// A size as a kernel's `int`: every size is checked below 2³¹ first.
fn int(v: usize) -> KernelArg {
    KernelArg::I32(v as i32)
}

/// A buffer or a null pointer.
fn opt<T: moe_kernels::DeviceRepr>(b: Option<&DeviceBuffer<T>>) -> KernelArg {
    b.map_or(KernelArg::Ptr(0), KernelArg::from)
}

/// The error for a workspace that lacks a buffer its plan needs (`expected` names it).
fn no_buffer(expected: String) -> MoeError {
    MoeError::Config {
        field: "workspace",
        expected,
        found: "none".into(),
    }
}

fn upload_bf16(dev: &Device, v: &[f32]) -> Result<DeviceBuffer<bf16>, MoeError> {
    let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
    Ok(dev.upload(&b)?)
}

/// The column blocks of each GEMM are the grid's y dimension: checked for the default tile
/// configuration, whose blocks are the narrowest.
fn check_widths(c: &MoeConfig) -> Result<(), MoeError> {
    let mut widths = vec![
        ("intermediate", c.intermediate, FUSED_BN1),
        ("hidden", c.hidden, FUSED_BN2),
    ];
    if let Some(s) = c.shared {
        widths.push(("shared expert intermediate", s.intermediate, FUSED_BN1));
    }
    for (field, n, bn) in widths {
        if n.div_ceil(bn) > MAX_GRID_Y {
            return Err(MoeError::Config {
                field,
                expected: format!(
                    "at most {} (gridDim.y of {bn}-column blocks)",
                    MAX_GRID_Y * bn
                ),
                found: n.to_string(),
            });
        }
    }
    Ok(())
}

impl FusedDevice {
    /// Uploads `weights` to `device` in bf16. `dtype` must be [`Dtype::Bf16`].
    pub fn new(
        device: &'static Device,
        weights: &MoeWeights,
        dtype: Dtype,
    ) -> Result<Self, MoeError> {
        weights.validate()?;
        if dtype != Dtype::Bf16 {
            return Err(MoeError::Config {
                field: "dtype",
                expected: "bf16 (the fused kernels multiply on bf16 tensor cores; chapter 2's layers compute in f32)".into(),
                found: dtype.to_string(),
            });
        }
        let c = &weights.config;
        check_widths(c)?;
        let shared = match (&c.shared, &weights.shared) {
            (Some(s), Some(sw)) => Some(SharedDevice {
                inter: s.intermediate,
                w13: upload_bf16(device, &sw.w13)?,
                w2: upload_bf16(device, &sw.w2)?,
                gate: match &sw.gate {
                    Some(g) => Some(upload_bf16(device, g)?),
                    None => None,
                },
            }),
            _ => None,
        };
        let experts = DeviceWeights {
            w13: upload_bf16(device, &weights.w13)?,
            w2: upload_bf16(device, &weights.w2)?,
            shared,
        };
        Self::assemble(device, c, &weights.gate, weights.bias.as_deref(), experts)
    }

    /// A layer from expert weights already on `device` in bf16 (made there by
    /// [`Self::patterned_on_device`], say), with the router's `gate` [E, H] and `bias` `[E]` from
    /// the host. Checks every size against `config`.
    pub fn from_device(
        device: &'static Device,
        config: &MoeConfig,
        gate: &[f32],
        bias: Option<&[f32]>,
        weights: DeviceWeights,
    ) -> Result<Self, MoeError> {
        check_sizes(
            config,
            bias,
            &WeightSizes {
                gate: gate.len(),
                w13: weights.w13.len(),
                w2: weights.w2.len(),
                shared: weights.shared.as_ref().map(|w| SharedSizes {
                    w13: w.w13.len(),
                    w2: w.w2.len(),
                    gate: w.gate.as_ref().map(|g| g.len()),
                }),
            },
        )?;
        // The one field the sizes do not imply: the shared expert's width, kept beside its
        // buffers.
        if let (Some(s), Some(w)) = (config.shared, &weights.shared) {
            if w.inter != s.intermediate {
                return Err(MoeError::Config {
                    field: "shared expert",
                    expected: format!("intermediate {}", s.intermediate),
                    found: format!("intermediate {}", w.inter),
                });
            }
        }
        check_widths(config)?;
        Self::assemble(device, config, gate, bias, weights)
    }

    // ANCHOR: patterned_on_device
    /// A layer of `config` whose expert weights are made on the device by `fused_fill_bf16`
    /// ([`crate::fill`]: seed `seed`, ±1/√(fan-in)), with chapter 1's generator for the router's
    /// gate and no bias. No host copy of the experts ever exists: a GLM-sized layer (3.6 G
    /// weights) fills in a fraction of a second on the GPU. [`crate::fill::host_weights`] gives
    /// the same values on the host for the experts a test compares.
    pub fn patterned_on_device(
        device: &'static Device,
        config: &MoeConfig,
        seed: u64,
    ) -> Result<Self, MoeError> {
        config.validate(None)?;
        check_widths(config)?;
        let module = device.load(&KERNELS)?;
        let filled = |t: Tensor, n: usize| -> Result<DeviceBuffer<bf16>, MoeError> {
            let b = device.alloc::<bf16>(n)?;
            fill_device(
                &module,
                &b,
                0,
                tensor_seed(seed, t),
                tensor_scale(config, t),
            )?;
            Ok(b)
        };
        let h = config.hidden;
        let shared = match config.shared {
            Some(s) => Some(SharedDevice {
                inter: s.intermediate,
                w13: filled(Tensor::SharedW13, 2 * s.intermediate * h)?,
                w2: filled(Tensor::SharedW2, h * s.intermediate)?,
                gate: match s.gated {
                    true => Some(filled(Tensor::SharedGate, h)?),
                    false => None,
                },
            }),
            None => None,
        };
        let weights = DeviceWeights {
            w13: filled(Tensor::W13, config.w13_len())?,
            w2: filled(Tensor::W2, config.w2_len())?,
            shared,
        };
        Self::from_device(device, config, &router_gate(config, seed), None, weights)
    }
    // ANCHOR_END: patterned_on_device

    fn assemble(
        device: &'static Device,
        config: &MoeConfig,
        gate: &[f32],
        bias: Option<&[f32]>,
        experts: DeviceWeights,
    ) -> Result<Self, MoeError> {
        let maps = encode_maps(device, config, &experts)?;
        Ok(FusedDevice {
            device,
            id: NEXT_LAYER_ID.fetch_add(1, Ordering::Relaxed),
            config: config.clone(),
            bias_host: bias.map(<[f32]>::to_vec),
            module: device.load(&KERNELS)?,
            weights: Arc::new(Weights {
                gate: device.upload(gate)?,
                bias: match bias {
                    Some(b) => Some(device.upload(b)?),
                    None => None,
                },
                experts,
                maps,
            }),
            block_m: None,
            path: None,
            fusion: None,
            tile: None,
            decode: None,
            tuned: true,
            grouped: true,
            bf16_y: false,
        })
    }

    /// The same layer with every routed GEMM tiled by `block_m` rows (16, 32, 64 or 128) instead
    /// of chapter 3's rule (on the grouped decode path: instead of `DECODE_GROUP`, a tile then
    /// taking several passes of 8 pairs): the output must not change by a bit (a row's sums do
    /// not depend on where in a tile it sits).
    pub fn with_block_m(mut self, block_m: usize) -> Result<Self, MoeError> {
        if !BLOCK_MS.contains(&block_m) {
            return Err(MoeError::Config {
                field: "BLOCK_M",
                expected: format!("one of {BLOCK_MS:?}"),
                found: block_m.to_string(),
            });
        }
        self.block_m = Some(block_m);
        Ok(self)
    }

    /// The same layer on `path` whatever the batch, instead of [`choose_path`] and the table.
    pub fn with_path(mut self, path: Path) -> Self {
        self.path = Some(path);
        self
    }

    /// The same layer with `fusion` instead of the path's default ([`default_fusion`]). A
    /// batch whose path cannot run it ([`Fusion::SwiGluSumK`] on the tiled path) is refused by
    /// [`Self::workspace`] with a typed error.
    pub fn with_fusion(mut self, fusion: Fusion) -> Self {
        self.fusion = Some(fusion);
        self
    }

    /// The same layer with the tiled path's tiles in `tile` (one of
    /// [`crate::choose::TILE_CONFIGS`], or on an sm_90a GPU or the emulator one of
    /// [`crate::choose::HOPPER_CONFIGS`]) instead of the rule and the table: the same bits
    /// within versions 1 to 3 (versions 4 to 11 too: chapter 4's GPU test checks it).
    pub fn with_tile(mut self, tile: TileConfig) -> Result<Self, MoeError> {
        if TileConfig::parse(&tile.name()) != Some(tile) {
            return Err(MoeError::Config {
                field: "tile configuration",
                expected: format!(
                    "one of {} (and, on an sm_90a GPU or the emulator, {})",
                    crate::choose::TILE_CONFIGS.map(|c| c.name()).join(", "),
                    crate::choose::HOPPER_CONFIGS.map(|c| c.name()).join(", ")
                ),
                found: tile.name(),
            });
        }
        self.hopper_ok(tile)?;
        self.tile = Some(tile);
        Ok(self)
    }

    /// Whether this layer can run `tile` here: a version 4 to 11 configuration needs an sm_90a GPU
    /// or the emulator ([`Device::runs_hopper`]) and 16-byte rows in both GEMMs (H, I and the shared expert's I
    /// multiples of 8).
    fn hopper_ok(&self, tile: TileConfig) -> Result<(), MoeError> {
        if !tile.is_hopper() {
            return Ok(());
        }
        if !self.device.runs_hopper() {
            return Err(MoeError::Config {
                field: "tile configuration",
                expected: format!(
                    "a version 1-3 configuration on this device ({}): {} uses Hopper's wgmma, sm_90a GPUs and the emulator only",
                    self.device.describe(),
                    tile.name()
                ),
                found: tile.name(),
            });
        }
        if let Some((what, n)) = width_not_16_bytes(&self.config) {
            return Err(MoeError::Config {
                field: "tile configuration",
                expected: format!(
                    "{what} a multiple of 8 for {} (wgmma's rows are 16-byte copies), or a version 1-3 configuration",
                    tile.name()
                ),
                found: format!("{what} {n}"),
            });
        }
        Ok(())
    }

    /// The same layer with the decode kernels launched as `geometry`: the same bits. Columns per
    /// warp are raised where a grid would pass CUDA's 65,535 column blocks.
    pub fn with_decode_geometry(mut self, geometry: DecodeGeometry) -> Result<Self, MoeError> {
        if !geometry.is_valid() {
            return Err(MoeError::Config {
                field: "decode geometry",
                expected: "1 to 32 warps, at least one column per warp".into(),
                found: geometry.name(),
            });
        }
        self.decode = Some(geometry);
        Ok(self)
    }

    /// Versions 4 to 8 launched in the grouped order (the engines' GROUP_SIZE_M:
    /// [`TileConfig::grid`]; the default), or on the plain grid of tiles × column blocks: the
    /// same bits; `bench ch04` times the plain grid as `fused_ungrouped`.
    pub fn with_grouped_order(mut self, grouped: bool) -> Self {
        self.grouped = grouped;
        self
    }

    // ANCHOR: bf16_y
    /// The tiled path's per-pair output `y = weight · (act · w2ᵀ)` rounded to bf16 before the
    /// sum over k (`true`), as the engines' kernels store it, or kept in f32 (`false`, the
    /// default). In bf16, GEMM 2 writes half the bytes and `fused_combine` reads half: at 4,096
    /// Qwen3 tokens, 134 MB less each way. The sum is still fp32 and in slot order; each term
    /// carries one more rounding (at most 2⁻⁸ of its size). The decode paths keep f32: their y
    /// is a few rows, or none at all (`decode_gemm2_sum`).
    pub fn with_bf16_y(mut self, bf16_y: bool) -> Self {
        self.bf16_y = bf16_y;
        self
    }
    // ANCHOR_END: bf16_y

    /// The same layer without the measured table: the rules alone decide.
    pub fn without_tuned_table(mut self) -> Self {
        self.tuned = false;
        self
    }

    pub fn device(&self) -> &'static Device {
        self.device
    }

    /// The router of chapter 1 for a batch of `rows` tokens.
    fn router(&self, rows: usize) -> Result<FiveLineChain, MoeError> {
        let c = &self.config;
        let shape = GateShape {
            rows,
            hidden: c.hidden,
            experts: c.experts,
        };
        Ok(FiveLineChain::new(
            self.device,
            &c.router,
            shape,
            self.bias_host.as_deref(),
        )?)
    }

    /// The launches of a whole [`MoeLayer::forward`] for `rows` tokens: the router's, then
    /// [`Self::launches`].
    pub fn forward_launches(&self, rows: usize) -> Result<usize, MoeError> {
        if rows == 0 {
            return Ok(0);
        }
        Ok(self.router(rows)?.launches_per_call() + self.launches(&self.workspace(rows)?))
    }
}

impl MoeLayer for FusedDevice {
    fn name(&self) -> &'static str {
        "fused-device"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Bf16
    }
    fn config(&self) -> &MoeConfig {
        &self.config
    }

    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError> {
        let rows = experts_rows(&self.config, hidden, routing)?;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let (k, experts) = (routing.k, self.config.experts);
        if let Some((p, &id)) = routing
            .ids
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= experts)
        {
            return Err(MoeError::IdOutOfRange {
                row: p / k,
                slot: p % k,
                id,
                experts,
            });
        }
        let dev = self.device;
        let ws = self.workspace(rows)?;
        let ids: Vec<i32> = routing.ids.iter().map(|&e| e as i32).collect();
        let (x, ids, w) = (
            dev.upload(hidden)?,
            dev.upload(&ids)?,
            dev.upload(&routing.weights)?,
        );
        let out = dev.alloc::<f32>(hidden.len())?;
        self.enqueue_experts(&ws, &x, &ids, &w, &out)?;
        Ok(out.to_vec()?)
    }

    // ANCHOR: fused_forward
    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let c = &self.config;
        let rows = rows_of(c, hidden)?;
        if rows == 0 {
            return Ok(LayerOutput {
                routing: Routing::empty(c.router.k),
                out: Vec::new(),
            });
        }
        let dev = self.device;
        let x = dev.upload(hidden)?;
        let ids = dev.alloc::<i32>(rows * c.router.k)?;
        let weights = dev.alloc::<f32>(rows * c.router.k)?;
        let ws = self.workspace(rows)?;
        let out = dev.alloc::<f32>(rows * c.hidden)?;
        // Route on the device, and hand the ids straight to the experts: unlike chapter 2, the
        // routing never visits the host on the way.
        self.router(rows)?.enqueue(
            &GateInputs {
                hidden: DeviceMatrix::F32(&x),
                weight: DeviceMatrix::F32(&self.weights.gate),
                bias: self.weights.bias.as_ref(),
            },
            &RouterOutputs {
                ids: &ids,
                weights: &weights,
            },
        )?;
        self.enqueue_experts(&ws, &x, &ids, &weights, &out)?;
        Ok(LayerOutput {
            routing: download(rows, c.router.k, &ids, &weights)?,
            out: out.to_vec()?,
        })
    }
    // ANCHOR_END: fused_forward
}
