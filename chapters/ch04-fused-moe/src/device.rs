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
//! Only bf16: the kernels multiply on bf16 tensor cores. A layer built for [`Dtype::F32`] is a
//! typed error ([`MoeError::Config`] naming `dtype`); chapter 2's layers are the f32 path.

use crate::choose::{
    choose_path, default_fusion, default_tile, tuned_table, DecodeGeometry, Fusion, Path,
    TileConfig,
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
use ch03_align::{choose_block_m, max_tiles, AlignError};
use half::bf16;
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `kernels/ch04_fused_moe.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch04_fused_moe");

/// The launch-geometry constants of `ch04_fused_moe.cu`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch04_fused_moe");
}
use geometry::{
    DECODE_GROUP, DECODE_GROUP_MAX_THREADS, FUSED_BN1, FUSED_BN2, FUSED_ELEMENTWISE_THREADS,
    FUSED_THREADS, FUSED_TO_BF16_VALUES, FUSED_WARPS, WG_TMA_BOX,
};

/// The tile heights the kernels support: chapter 3's choices for BLOCK_M.
pub const BLOCK_MS: [usize; 4] = [16, 32, 64, 128];

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
    if !device.has_sm90a() || width_not_16_bytes(c).is_some() {
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
        }
    }
}

// ANCHOR: batch_plan
/// What runs a batch of T tokens: the path, the fusion, and the launch shapes. It depends on T
/// and the layer's shape (and the layer's overrides), never on the routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    pub path: Path,
    pub fusion: Fusion,
    /// The tiled path's tile configuration.
    pub tile: TileConfig,
    /// The tile height of chapter 3's layout: the tiled path's tiles, or the grouped decode
    /// path's groups (`DECODE_GROUP`, 8, unless [`FusedDevice::with_block_m`] says otherwise);
    /// 0 on the decode path (no layout).
    pub block_m: usize,
    /// The decode path's launch geometry.
    pub decode: DecodeGeometry,
}
// ANCHOR_END: batch_plan

/// What one call for a batch of T tokens needs beyond the weights: its plan, the alignment and
/// its outputs (tiled path), and the intermediate buffers. It depends on T only, never on the
/// routing.
pub struct FusedWorkspace {
    layer: u64,
    rows: usize,
    plan: BatchPlan,
    /// Chapter 3's bookkeeping and its outputs: the tiled and grouped decode paths.
    align: Option<(DeviceAlign, AlignBuffers)>,
    /// `[T, H]` the hidden states in bf16: the tiled and grouped decode paths (the decode
    /// kernels round as they load; the grouped ones read each row once per column and pair,
    /// from L1, and bf16 halves those bytes).
    xb: Option<DeviceBuffer<bf16>>,
    /// `[T·k, 2I]` bf16 gate | up: [`Fusion::Unfused`] only.
    gateup: Option<DeviceBuffer<bf16>>,
    /// `[T·k, I]` bf16, SwiGLU of each pair
    act: DeviceBuffer<bf16>,
    /// `[T·k, H]` f32, each pair's weighted down projection: not with [`Fusion::SwiGluSumK`].
    y: Option<DeviceBuffer<f32>>,
    shared: Option<SharedWorkspace>,
}

/// The shared expert's part of a workspace. On the tiled path every token is a pair of the one
/// shared expert, laid out as chapter 3 would lay out T pairs of expert 0 (the identity, padded
/// to BLOCK_M); the decode kernels give it the rows after the routed pairs, the grouped decode
/// kernels the tiles after the routed tiles (tokens in order, BLOCK_M per tile).
struct SharedWorkspace {
    layout: Option<SharedLayout>,
    /// `[T, 2Is]` bf16: [`Fusion::Unfused`] only.
    gateup: Option<DeviceBuffer<bf16>>,
    /// `[T, Is]` bf16
    act: DeviceBuffer<bf16>,
    /// `[T, H]` f32: not with [`Fusion::SwiGluSumK`].
    y: Option<DeviceBuffer<f32>>,
    /// `[T]` f32, the gate's logit
    gate: Option<DeviceBuffer<f32>>,
}

struct SharedLayout {
    block_m: usize,
    tiles: usize,
    sorted_ids: DeviceBuffer<i32>,
    expert_ids: DeviceBuffer<i32>,
    num_post: DeviceBuffer<i32>,
}

impl FusedWorkspace {
    /// The tile height of the routed experts' layout (0 on the decode path: no layout).
    pub fn block_m(&self) -> usize {
        self.plan.block_m
    }
    /// The batch size it was built for.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// What runs this batch.
    pub fn plan(&self) -> BatchPlan {
        self.plan
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

/// What one [`FusedDevice::enqueue_experts`] works on: its buffers, and the batch's sizes T, k,
/// H, I, E and P = T·k.
#[derive(Clone, Copy)]
struct Batch<'a> {
    hidden: &'a DeviceBuffer<f32>,
    ids: &'a DeviceBuffer<i32>,
    weights: &'a DeviceBuffer<f32>,
    out: &'a DeviceBuffer<f32>,
    rows: usize,
    k: usize,
    h: usize,
    i: usize,
    e: usize,
    pairs: usize,
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
    /// [`crate::choose::TILE_CONFIGS`], or on an sm_90a GPU one of
    /// [`crate::choose::HOPPER_CONFIGS`]) instead of the rule and the table: the same bits
    /// within versions 1 to 3 (versions 4 to 11 too: chapter 4's GPU test checks it).
    pub fn with_tile(mut self, tile: TileConfig) -> Result<Self, MoeError> {
        if TileConfig::parse(&tile.name()) != Some(tile) {
            return Err(MoeError::Config {
                field: "tile configuration",
                expected: format!(
                    "one of {} (and, on an sm_90a GPU, {})",
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
    /// ([`Device::has_sm90a`]) and 16-byte rows in both GEMMs (H, I and the shared expert's I
    /// multiples of 8).
    fn hopper_ok(&self, tile: TileConfig) -> Result<(), MoeError> {
        if !tile.is_hopper() {
            return Ok(());
        }
        if !self.device.has_sm90a() {
            return Err(MoeError::Config {
                field: "tile configuration",
                expected: format!(
                    "a version 1-3 configuration on this device ({}): {} uses Hopper's wgmma, sm_90a GPUs only",
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

    /// The same layer without the measured table: the rules alone decide.
    pub fn without_tuned_table(mut self) -> Self {
        self.tuned = false;
        self
    }

    pub fn device(&self) -> &'static Device {
        self.device
    }

    /// The tile height for `pairs` pairs: the caller's, else chapter 3's rule.
    pub fn block_m_for(&self, pairs: usize) -> usize {
        self.block_m
            .unwrap_or_else(|| choose_block_m(pairs, self.config.experts))
    }

    // ANCHOR: plan_for
    /// What runs a batch of `rows` tokens: each of the caller's overrides, else the measured
    /// table's bucket for this shape ([`tuned_table`]: path, fusion, tile, BLOCK_M where it names
    /// one, decode geometry), else the rules ([`choose_path`], [`default_fusion`], chapter 3's
    /// BLOCK_M, [`default_tile`], [`DecodeGeometry::DEFAULT`]).
    pub fn plan_for(&self, rows: usize) -> Result<BatchPlan, MoeError> {
        let c = &self.config;
        let (k, h, i, e) = (c.router.k, c.hidden, c.intermediate, c.experts);
        let tuned = self
            .tuned
            .then(|| tuned_table().lookup(h, i, e, k, rows))
            .flatten()
            .map(|r| r.choice);
        let path = self
            .path
            .or(tuned.map(|t| t.path))
            .unwrap_or_else(|| choose_path(rows, k, e));
        let tuned_for = |p: Path| tuned.filter(|t| t.path == p);
        let fusion = self
            .fusion
            .or(tuned_for(path).map(|t| t.fusion))
            .unwrap_or(default_fusion(path));
        if !fusion.runs_on(path) {
            return Err(MoeError::Config {
                field: "fusion",
                expected: format!(
                    "unfused or swiglu on the {path} path (a tile holds pairs of one expert, never the k pairs of one token)"
                ),
                found: fusion.to_string(),
            });
        }
        let pairs = rows * k;
        let (block_m, tile) = match path {
            Path::Tiled => {
                // A measured row naming a version 4 to 11 configuration counts only where it can run.
                let tuned_tile = tuned_for(Path::Tiled).filter(|t| self.hopper_ok(t.tile).is_ok());
                let tile = self
                    .tile
                    .or(tuned_tile.map(|t| t.tile))
                    .unwrap_or_else(|| default_tile(h, i));
                let block_m = match tile.required_block_m() {
                    Some(need) => {
                        if let Some(asked) = self.block_m.filter(|&b| b != need) {
                            return Err(MoeError::Config {
                                field: "BLOCK_M",
                                expected: format!("{need} for {tile} (64 rows per warpgroup)"),
                                found: asked.to_string(),
                            });
                        }
                        need
                    }
                    None => self
                        .block_m
                        .or(tuned_tile.and_then(|t| t.block_m))
                        .unwrap_or_else(|| self.block_m_for(pairs)),
                };
                (block_m, tile)
            }
            Path::Decode => (0, self.tile.unwrap_or(TileConfig::DEFAULT)),
            Path::DecodeGrouped => (
                self.block_m.unwrap_or(DECODE_GROUP),
                self.tile.unwrap_or(TileConfig::DEFAULT),
            ),
        };
        let decode_path = if path.is_decode() { path } else { Path::Decode };
        let mut decode = self
            .decode
            .or(tuned_for(decode_path).map(|t| t.decode))
            .unwrap_or(DecodeGeometry::DEFAULT);
        if path == Path::DecodeGrouped && decode.stream {
            return Err(MoeError::Config {
                field: "decode geometry",
                expected: "no streamed weights (_na) on the decode_grouped path: its warps read a tile's weight rows again from L1".into(),
                found: decode.name(),
            });
        }
        if path == Path::DecodeGrouped && decode.threads() > DECODE_GROUP_MAX_THREADS {
            return Err(MoeError::Config {
                field: "decode geometry",
                expected: format!(
                    "at most {} warps on the decode_grouped path (its kernels' launch bounds)",
                    DECODE_GROUP_MAX_THREADS / 32
                ),
                found: decode.name(),
            });
        }
        // Keep every decode grid within CUDA's gridDim.y (the bits do not depend on it).
        let widest = [h, i, c.shared.map_or(0, |s| s.intermediate)]
            .into_iter()
            .max()
            .unwrap_or(0);
        decode.cols_per_warp = decode
            .cols_per_warp
            .max(widest.div_ceil(decode.warps * MAX_GRID_Y));
        Ok(BatchPlan {
            path,
            fusion,
            tile,
            block_m,
            decode,
        })
    }
    // ANCHOR_END: plan_for

    /// Allocates what one call for a batch of `rows` tokens needs.
    pub fn workspace(&self, rows: usize) -> Result<FusedWorkspace, MoeError> {
        let c = &self.config;
        let dev = self.device;
        let (k, h, i) = (c.router.k, c.hidden, c.intermediate);
        // The decode grids hold T·k pair rows and T shared rows: both within an i32.
        let pairs = rows
            .checked_mul(k)
            .filter(|&p| p.checked_add(rows).is_some_and(|n| n <= i32::MAX as usize));
        let Some(pairs) = pairs else {
            return Err(MoeError::Config {
                field: "tokens x k",
                expected: format!("at most {} (with the tokens added)", i32::MAX),
                found: format!("{rows} x {k}"),
            });
        };
        let plan = self.plan_for(rows)?;
        let tiled = plan.path == Path::Tiled;
        let unfused = plan.fusion == Fusion::Unfused;
        let sum_k = plan.fusion == Fusion::SwiGluSumK;
        // Chapter 3's layout and the bf16 input: the tiled and the grouped decode paths.
        let laid_out = plan.path != Path::Decode;
        let align = match laid_out {
            true => {
                let a =
                    DeviceAlign::new(dev, pairs, c.experts, plan.block_m).map_err(align_error)?;
                let out = a.alloc_outputs(dev).map_err(align_error)?;
                Some((a, out))
            }
            false => None,
        };
        let shared = match &self.weights.experts.shared {
            Some(s) => {
                let layout = match tiled {
                    true => {
                        // Versions 4 to 11's tiles are 64 rows per warpgroup, the shared expert's too.
                        let bm = plan
                            .tile
                            .required_block_m()
                            .unwrap_or_else(|| choose_block_m(rows, 1));
                        let tiles = rows.div_ceil(bm);
                        let mut sorted: Vec<i32> = (0..rows as i32).collect();
                        sorted.resize(tiles * bm, rows as i32); // the placeholder: T
                        Some(SharedLayout {
                            block_m: bm,
                            tiles,
                            sorted_ids: dev.upload(&sorted)?,
                            expert_ids: dev.upload(&vec![0i32; tiles])?,
                            num_post: dev.upload(&[(tiles * bm) as i32])?,
                        })
                    }
                    false => None,
                };
                Some(SharedWorkspace {
                    layout,
                    gateup: match unfused {
                        true => Some(dev.alloc(rows * 2 * s.inter)?),
                        false => None,
                    },
                    act: dev.alloc(rows * s.inter)?,
                    y: match sum_k {
                        true => None,
                        false => Some(dev.alloc(rows * h)?),
                    },
                    gate: match s.gate {
                        Some(_) => Some(dev.alloc(rows)?),
                        None => None,
                    },
                })
            }
            None => None,
        };
        Ok(FusedWorkspace {
            layer: self.id,
            rows,
            plan,
            align,
            xb: match laid_out {
                true => Some(dev.alloc(rows * h)?),
                false => None,
            },
            gateup: match unfused {
                true => Some(dev.alloc(pairs * 2 * i)?),
                false => None,
            },
            act: dev.alloc(pairs * i)?,
            y: match sum_k {
                true => None,
                false => Some(dev.alloc(pairs * h)?),
            },
            shared,
        })
    }

    /// The launches [`Self::enqueue_experts`] makes for `ws`: this chapter's kernels and, on the
    /// tiled and grouped decode paths, chapter 3's (1 or 2, by the number of pairs). It depends
    /// on the batch size, never on the routing.
    pub fn launches(&self, ws: &FusedWorkspace) -> usize {
        if ws.rows == 0 {
            return 0;
        }
        ws.align.as_ref().map_or(0, |(a, _)| a.launches()) + self.kernel_names(ws).len()
    }

    /// This chapter's kernels among those launches, in order (`family::kernel`): on the tiled and
    /// grouped decode paths chapter 3's come between `fused_to_bf16` and the first GEMM.
    pub fn kernel_names(&self, ws: &FusedWorkspace) -> Vec<String> {
        if ws.rows == 0 {
            return Vec::new();
        }
        let f = |n: &str| format!("ch04_fused_moe::{n}");
        let plan = ws.plan;
        let shared = self.weights.experts.shared.as_ref();
        let gated = shared.is_some_and(|s| s.gate.is_some());
        let mut v = Vec::new();
        match plan.path {
            Path::Tiled => {
                let t = |n: &str| f(&plan.tile.kernel(n));
                let expert = |v: &mut Vec<String>| match plan.fusion {
                    Fusion::Unfused => {
                        v.extend([t("fused_gemm1_gateup"), f("fused_swiglu"), t("fused_gemm2")])
                    }
                    _ => v.extend([t("fused_gemm1_swiglu"), t("fused_gemm2")]),
                };
                v.push(f("fused_to_bf16"));
                expert(&mut v);
                if shared.is_some() {
                    expert(&mut v);
                    if gated {
                        v.push(f("fused_gate_logit"));
                    }
                }
                v.push(f("fused_combine"));
            }
            Path::Decode => {
                // The geometry's entry points (`_na`: the weights streamed).
                let d = |n: &str| f(&plan.decode.kernel(n));
                match plan.fusion {
                    Fusion::Unfused => {
                        v.extend([d("decode_gemm1_gateup"), f("fused_swiglu")]);
                        if shared.is_some() {
                            v.push(f("fused_swiglu"));
                        }
                        v.extend([d("decode_gemm2"), f("fused_combine")]);
                    }
                    Fusion::SwiGlu => v.extend([
                        d("decode_gemm1_swiglu"),
                        d("decode_gemm2"),
                        f("fused_combine"),
                    ]),
                    Fusion::SwiGluSumK => {
                        v.extend([d("decode_gemm1_swiglu"), d("decode_gemm2_sum")])
                    }
                }
            }
            Path::DecodeGrouped => {
                v.push(f("fused_to_bf16"));
                match plan.fusion {
                    Fusion::Unfused => {
                        v.extend([f("decode_grouped_gemm1_gateup"), f("fused_swiglu")]);
                        if shared.is_some() {
                            v.push(f("fused_swiglu"));
                        }
                    }
                    _ => v.push(f("decode_grouped_gemm1_swiglu")),
                }
                match plan.fusion {
                    Fusion::SwiGluSumK => v.push(f("decode_gemm2_sum")),
                    _ => v.extend([f("decode_grouped_gemm2"), f("fused_combine")]),
                }
            }
        }
        v
    }

    // ANCHOR: gemm_launches
    /// `act [P, I] = SwiGLU(x[p / k] · w13[e]ᵀ)` for the pairs of every tile of a layout
    /// ([`Fusion::Unfused`]: `gateup [P, 2I] = x[p / k] · w13[e]ᵀ`, no SwiGLU).
    #[allow(clippy::too_many_arguments)]
    fn gemm1(
        &self,
        plan: &BatchPlan,
        x: &DeviceBuffer<bf16>,
        w13: &DeviceBuffer<bf16>,
        layout: (&DeviceBuffer<i32>, &DeviceBuffer<i32>, &DeviceBuffer<i32>),
        tiles: usize,
        out: &DeviceBuffer<bf16>,
        (pairs, k, inter, experts, block_m): (usize, usize, usize, usize, usize),
        map: TensorMap,
    ) -> Result<(), MoeError> {
        let h = self.config.hidden;
        let tile = plan.tile;
        let (col_blocks, name) = match plan.fusion {
            Fusion::Unfused => (
                (2 * inter).div_ceil(tile.bn()),
                tile.kernel("fused_gemm1_gateup"),
            ),
            _ => (
                inter.div_ceil(tile.bn1()),
                tile.kernel("fused_gemm1_swiglu"),
            ),
        };
        let mut cfg = LaunchConfig::blocks(1, tile.threads() as u32)
            .with_shared(tile.shared_bytes(block_m) as u32);
        (cfg.grid.0, cfg.grid.1) = tile.grid(tiles, col_blocks, self.multiprocessors());
        let (sorted, expert_ids, num_post) = layout;
        self.module.launch(
            &name,
            cfg,
            &args![
                x,
                w13,
                sorted,
                expert_ids,
                num_post,
                out,
                int(pairs),
                int(k),
                int(h),
                int(inter),
                int(experts),
                int(block_m)
            ]
            .into_iter()
            .chain(self.map_arg(tile, map)?)
            .collect::<Vec<_>>(),
        )?;
        Ok(())
    }

    /// `y [P, H] = weight[p] · (act[p] · w2[e]ᵀ)` (no weight: null) for every tile of a layout.
    #[allow(clippy::too_many_arguments)]
    fn gemm2(
        &self,
        tile: TileConfig,
        act: &DeviceBuffer<bf16>,
        w2: &DeviceBuffer<bf16>,
        layout: (&DeviceBuffer<i32>, &DeviceBuffer<i32>, &DeviceBuffer<i32>),
        tiles: usize,
        weight: KernelArg,
        y: &DeviceBuffer<f32>,
        (pairs, inter, experts, block_m): (usize, usize, usize, usize),
        map: TensorMap,
    ) -> Result<(), MoeError> {
        let h = self.config.hidden;
        let mut cfg = LaunchConfig::blocks(1, tile.threads() as u32)
            .with_shared(tile.shared_bytes(block_m) as u32);
        (cfg.grid.0, cfg.grid.1) = tile.grid(tiles, h.div_ceil(tile.bn()), self.multiprocessors());
        let (sorted, expert_ids, num_post) = layout;
        self.module.launch(
            &tile.kernel("fused_gemm2"),
            cfg,
            &args![
                act,
                w2,
                sorted,
                expert_ids,
                num_post,
                weight,
                y,
                int(pairs),
                int(h),
                int(inter),
                int(experts),
                int(block_m)
            ]
            .into_iter()
            .chain(self.map_arg(tile, map)?)
            .collect::<Vec<_>>(),
        )?;
        Ok(())
    }
    // ANCHOR_END: gemm_launches

    /// Version 7's last argument: the address of `map` in device memory (other versions: none).
    /// The device's multiprocessors: version 10's grid (1 on the emulator, which runs no
    /// version 10).
    fn multiprocessors(&self) -> usize {
        self.device.multiprocessors().unwrap_or(1)
    }

    fn map_arg(&self, tile: TileConfig, map: TensorMap) -> Result<Option<KernelArg>, MoeError> {
        if !tile.tma() {
            return Ok(None);
        }
        let maps = self.weights.maps.as_ref().ok_or_else(|| MoeError::Config {
            field: "tile configuration",
            expected: "an sm_90a GPU and H and I multiples of 8 (the tensor maps of version 7)"
                .into(),
            found: tile.name(),
        })?;
        Ok(Some(KernelArg::Ptr(maps.device_ptr() + 128 * map as u64)))
    }

    /// `act [rows, I] = SwiGLU(gateup [rows, 2I])`: the unfused layer's elementwise kernel.
    fn swiglu(
        &self,
        gateup: &DeviceBuffer<bf16>,
        act: &DeviceBuffer<bf16>,
        rows: usize,
        inter: usize,
    ) -> Result<(), MoeError> {
        self.module.launch(
            "fused_swiglu",
            LaunchConfig::for_elements(rows * inter, FUSED_ELEMENTWISE_THREADS as u32),
            &args![gateup, act, rows as i64, int(inter)],
        )?;
        Ok(())
    }

    /// `xb = bf16(hidden)`, `n` values: [`FUSED_TO_BF16_VALUES`] a thread.
    fn to_bf16(
        &self,
        hidden: &DeviceBuffer<f32>,
        xb: &DeviceBuffer<bf16>,
        n: usize,
    ) -> Result<(), MoeError> {
        self.module.launch(
            "fused_to_bf16",
            LaunchConfig::for_elements(
                n.div_ceil(FUSED_TO_BF16_VALUES),
                FUSED_ELEMENTWISE_THREADS as u32,
            ),
            &args![hidden, xb, n as i64],
        )?;
        Ok(())
    }

    /// `out[t] = Σⱼ y[t·k + j]` (+ the shared expert's `shared_y[t]`, times the sigmoid of
    /// `shared_gate[t]` when gated), j in order: the last kernel of both paths but a fused sum.
    fn combine(
        &self,
        b: Batch,
        y: &DeviceBuffer<f32>,
        shared_y: KernelArg,
        shared_gate: KernelArg,
    ) -> Result<(), MoeError> {
        let (rows, h) = (b.rows, b.h);
        self.module.launch(
            "fused_combine",
            // A dependent launch: it waits for the down projection's y in the kernel.
            LaunchConfig::for_elements(rows * h, FUSED_ELEMENTWISE_THREADS as u32).dependent(),
            &args![y, shared_y, shared_gate, b.out, int(rows), int(h), int(b.k)],
        )?;
        Ok(())
    }

    // ANCHOR: enqueue_experts
    /// Queues the experts: `hidden` [T, H] f32 and the routing on the device (`ids` [T, k] i32,
    /// each in `0..E`, and `weights` [T, k] f32) in, `out` [T, H] f32 out. Only launches: no
    /// allocation, no copy, no synchronisation. Ids outside `0..E` are skipped by the kernels
    /// (never read or written out of bounds); [`MoeLayer::experts`] refuses them first.
    pub fn enqueue_experts(
        &self,
        ws: &FusedWorkspace,
        hidden: &DeviceBuffer<f32>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.layer != self.id {
            return Err(MoeError::Config {
                field: "workspace",
                expected: "one built by this layer's FusedDevice::workspace".into(),
                found: "a workspace built by another layer".into(),
            });
        }
        let c = &self.config;
        let (rows, k, h) = (ws.rows, c.router.k, c.hidden);
        let pairs = rows * k;
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("ids [T, k]", ids.len(), pairs)?;
        expect_len("weights [T, k]", weights.len(), pairs)?;
        expect_len("out [T, H]", out.len(), rows * h)?;
        if rows == 0 {
            return Ok(());
        }
        let (i, e) = (c.intermediate, c.experts);
        let b = Batch {
            hidden,
            ids,
            weights,
            out,
            rows,
            k,
            h,
            i,
            e,
            pairs,
        };
        match ws.plan.path {
            Path::Tiled => self.enqueue_tiled(ws, b),
            Path::Decode | Path::DecodeGrouped => self.enqueue_decode(ws, b),
        }
    }

    /// The tiled path: chapter 3's layout, then one launch per GEMM for every expert at once.
    fn enqueue_tiled(&self, ws: &FusedWorkspace, b: Batch) -> Result<(), MoeError> {
        let (rows, k, h, i, e, pairs) = (b.rows, b.k, b.h, b.i, b.e, b.pairs);
        let (m, plan, w) = (&self.module, &ws.plan, &self.weights.experts);
        let missing = |what: &str| no_buffer(format!("{what} (a workspace of the tiled path)"));
        let xb = ws.xb.as_ref().ok_or_else(|| missing("xb"))?;
        let (align, a) = ws.align.as_ref().ok_or_else(|| missing("a layout"))?;
        let y = ws.y.as_ref().ok_or_else(|| missing("y"))?;
        // 1. The hidden states in bf16, once for every expert that reads them.
        self.to_bf16(b.hidden, xb, rows * h)?;
        // 2. Chapter 3: the pairs sorted by expert, each expert's run padded to BLOCK_M.
        align.enqueue(b.ids, a).map_err(align_error)?;
        let layout = (&a.sorted_ids, &a.expert_ids, &a.num_post);
        let tiles = max_tiles(pairs, e, plan.block_m);
        // 3. Every expert's SwiGLU(x · w13ᵀ) (unfused: gate|up, then SwiGLU), then its weighted
        //    down projection, one launch each.
        let first = ws.gateup.as_ref().unwrap_or(&ws.act);
        self.gemm1(
            plan,
            xb,
            &w.w13,
            layout,
            tiles,
            first,
            (pairs, k, i, e, plan.block_m),
            TensorMap::W13,
        )?;
        if let Some(g) = &ws.gateup {
            self.swiglu(g, &ws.act, pairs, i)?;
        }
        let wt = KernelArg::from(b.weights);
        self.gemm2(
            plan.tile,
            &ws.act,
            &w.w2,
            layout,
            tiles,
            wt,
            y,
            (pairs, i, e, plan.block_m),
            TensorMap::W2,
        )?;
        // 4. The shared expert: the same kernels, every token a pair of the one expert.
        let (mut shared_y, mut shared_gate) = (KernelArg::Ptr(0), KernelArg::Ptr(0));
        if let (Some(s), Some(sw)) = (&w.shared, &ws.shared) {
            let l = sw
                .layout
                .as_ref()
                .ok_or_else(|| missing("a shared layout"))?;
            let sy = sw.y.as_ref().ok_or_else(|| missing("the shared y"))?;
            let layout = (&l.sorted_ids, &l.expert_ids, &l.num_post);
            let first = sw.gateup.as_ref().unwrap_or(&sw.act);
            self.gemm1(
                plan,
                xb,
                &s.w13,
                layout,
                l.tiles,
                first,
                (rows, 1, s.inter, 1, l.block_m),
                TensorMap::SharedW13,
            )?;
            if let Some(g) = &sw.gateup {
                self.swiglu(g, &sw.act, rows, s.inter)?;
            }
            let none = KernelArg::Ptr(0);
            self.gemm2(
                plan.tile,
                &sw.act,
                &s.w2,
                layout,
                l.tiles,
                none,
                sy,
                (rows, s.inter, 1, l.block_m),
                TensorMap::SharedW2,
            )?;
            shared_y = KernelArg::from(sy);
            if let (Some(g), Some(logit)) = (&s.gate, &sw.gate) {
                m.launch(
                    "fused_gate_logit",
                    LaunchConfig::blocks(rows.div_ceil(FUSED_WARPS) as u32, FUSED_THREADS as u32),
                    &args![xb, g, logit, int(rows), int(h)],
                )?;
                shared_gate = KernelArg::from(logit);
            }
        }
        // 5. out[t] = Σⱼ y[t·k + j] (+ shared), j in order.
        self.combine(b, y, shared_y, shared_gate)
    }
    // ANCHOR_END: enqueue_experts

    // ANCHOR: enqueue_decode
    /// The decode path: the pairs indexed directly (no layout), each pair's expert rows read
    /// once; by default two launches in all, the shared expert included. The grouped decode path:
    /// the input in bf16 and chapter 3's layout first, then the same arithmetic a tile of pairs
    /// of one expert per block (the shared expert's tokens in tiles after the routed ones).
    fn enqueue_decode(&self, ws: &FusedWorkspace, b: Batch) -> Result<(), MoeError> {
        let (rows, k, h, i, e, pairs) = (b.rows, b.k, b.h, b.i, b.e, b.pairs);
        let (m, plan, w) = (&self.module, &ws.plan, &self.weights.experts);
        let g = plan.decode;
        let sw = ws.shared.as_ref();
        let s = w.shared.as_ref().filter(|_| sw.is_some());
        let (is, shared_rows) = s.map_or((0, 0), |s| (s.inter, rows));
        let logit = sw.and_then(|sw| sw.gate.as_ref());
        // Every decode GEMM: one block per row of `blocks` (pairs, tokens, or tiles) and slice of
        // `cols` columns; its buffers, then the same sizes (and the grouped kernels' BLOCK_M
        // and routed tiles).
        let sizes = [rows, k, h, i, e, is, g.cols_per_warp].map(int);
        // `dependent`: a programmatic dependent launch (the down projections: scheduled while
        // GEMM 1 runs, they wait for its act). The kernel is the geometry's (`_na`: the weights
        // streamed).
        let launch_as =
            |name: &str, blocks: usize, cols: usize, buffers: &[KernelArg], dependent| {
                let mut cfg = LaunchConfig::blocks(blocks as u32, g.threads() as u32);
                cfg.grid.1 = cols.div_ceil(g.cols()) as u32;
                cfg.dependent = dependent;
                m.launch(&g.kernel(name), cfg, &[buffers, &sizes[..]].concat())
            };
        let launch = |name: &str, blocks: usize, cols: usize, buffers: &[KernelArg]| {
            launch_as(name, blocks, cols, buffers, false)
        };
        // The grouped path: x in bf16 and the layout, then its tiles (routed, then shared).
        let grouped = match plan.path {
            Path::DecodeGrouped => {
                let missing = |what: &str| {
                    no_buffer(format!("{what} (a workspace of the decode_grouped path)"))
                };
                let xb = ws.xb.as_ref().ok_or_else(|| missing("xb"))?;
                let (align, a) = ws.align.as_ref().ok_or_else(|| missing("a layout"))?;
                self.to_bf16(b.hidden, xb, rows * h)?;
                align.enqueue(b.ids, a).map_err(align_error)?;
                let tiles = max_tiles(pairs, e, plan.block_m);
                let blocks = tiles + shared_rows.div_ceil(plan.block_m);
                let layout = args![&a.sorted_ids, &a.expert_ids, &a.num_post];
                Some((xb, layout, blocks, [int(plan.block_m), int(tiles)]))
            }
            _ => None,
        };
        let launch_grouped = |name: &str, cols: usize, buffers: &[KernelArg]| {
            let (_, _, blocks, extra) = grouped.as_ref().expect("the grouped path");
            let mut cfg = LaunchConfig::blocks(*blocks as u32, g.threads() as u32);
            cfg.grid.1 = cols.div_ceil(g.cols()) as u32;
            m.launch(name, cfg, &[buffers, &sizes[..], &extra[..]].concat())
        };
        // 1. SwiGLU(bf16(x) · w13ᵀ) of every pair, then of every token through the shared expert
        //    (unfused: gate|up, then SwiGLU).
        let unfused = plan.fusion == Fusion::Unfused;
        let (first, shared_first) = match unfused {
            true => (ws.gateup.as_ref(), sw.and_then(|sw| sw.gateup.as_ref())),
            false => (Some(&ws.act), sw.map(|sw| &sw.act)),
        };
        let gemm1_out = args![
            opt(s.map(|s| &s.w13)),
            opt(s.and_then(|s| s.gate.as_ref())),
            opt(logit),
            opt(first),
            opt(shared_first)
        ];
        match &grouped {
            None => launch(
                if unfused {
                    "decode_gemm1_gateup"
                } else {
                    "decode_gemm1_swiglu"
                },
                pairs + shared_rows,
                i.max(is),
                &[&args![b.hidden, b.ids, &w.w13][..], &gemm1_out[..]].concat(),
            )?,
            Some((xb, layout, _, _)) => launch_grouped(
                if unfused {
                    "decode_grouped_gemm1_gateup"
                } else {
                    "decode_grouped_gemm1_swiglu"
                },
                i.max(is),
                &[
                    &args![*xb][..],
                    &layout[..],
                    &args![&w.w13][..],
                    &gemm1_out[..],
                ]
                .concat(),
            )?,
        }
        if unfused {
            if let Some(gu) = &ws.gateup {
                self.swiglu(gu, &ws.act, pairs, i)?;
            }
            if let (Some(s), Some(sw)) = (s, sw) {
                if let Some(gu) = &sw.gateup {
                    self.swiglu(gu, &sw.act, rows, s.inter)?;
                }
            }
        }
        let down_in = args![
            &ws.act,
            b.ids,
            b.weights,
            &w.w2,
            opt(sw.map(|sw| &sw.act)),
            opt(s.map(|s| &s.w2))
        ];
        // 2. The down projection: with the sum over k (and the shared expert) fused, one block
        //    per token and slice of H (on both decode paths); else one per pair, or per tile,
        //    then fused_combine.
        if plan.fusion == Fusion::SwiGluSumK {
            launch_as(
                "decode_gemm2_sum",
                rows,
                h,
                &[&down_in[..], &args![opt(logit), b.out]].concat(),
                true,
            )?;
            return Ok(());
        }
        let y =
            ws.y.as_ref()
                .ok_or_else(|| no_buffer("y (a workspace of an unfused sum)".into()))?;
        let shared_y = opt(sw.and_then(|sw| sw.y.as_ref()));
        match &grouped {
            None => launch_as(
                "decode_gemm2",
                pairs + shared_rows,
                h,
                &[&down_in[..], &args![y, shared_y]].concat(),
                true,
            )?,
            Some((_, layout, _, _)) => launch_grouped(
                "decode_grouped_gemm2",
                h,
                &[
                    &args![&ws.act][..],
                    &layout[..],
                    &args![
                        b.weights,
                        &w.w2,
                        opt(sw.map(|sw| &sw.act)),
                        opt(s.map(|s| &s.w2))
                    ],
                    &args![y, shared_y],
                ]
                .concat(),
            )?,
        }
        self.combine(b, y, shared_y, opt(logit))
    }
    // ANCHOR_END: enqueue_decode

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
