//! The five-line router on a device: one plain kernel per operation, each a separate launch
//! (`kernels/ch01_router.cu`). This is the baseline that every later chapter beats.
//!
//! | step | kernel | launches |
//! |---|---|---|
//! | `logits = hidden @ Wᵀ` | `router_gemm_f32` (≤ 8 rows), `router_gemm_f32_x4` (< 1024), `router_gemm_f32_tiled` | 1 |
//! | `scores = σ(logits)` / softmax / √softplus | `router_sigmoid`, `router_softmax`, `router_sqrt_softplus` | 1 |
//! | `keys = scores + bias` | `router_bias_add` | 1 with a bias |
//! | grouped selection (DeepSeek-V3) | `router_group_limit` | 1 with groups |
//! | `ids = topk(keys, k)` | `router_topk` | 1 |
//! | `weights = scores.gather(ids)` | `router_gather` | 1 |
//! | `weights /= weights.sum() + 1e-20` | `router_row_sum`, `router_divide` | 2 when renormalising |
//! | `weights *= scale` (no renormalisation) | `router_scale` | 1 when scale ≠ 1 |
//!
//! So the GLM-like sigmoid + bias router launches 7 kernels and the Qwen3-like softmax router 6.
//! Each kernel has one launching function below, which takes its grid and block from the
//! constants the `.cu` file defines ([`geometry`]), so no launch shape is written twice.

use crate::config::{RouterConfig, Scoring};
pub use crate::device_router::{
    download, expect_bias, expect_len, route_logits_with, route_on_device, BiasOwner, DeviceMatrix,
    DeviceRouter, DeviceRouterError, GateDtype, GateInputs, GateShape, RouterOutputs,
};
use crate::error::RouterError;
use crate::routing::Routing;
use moe_kernels::{args, Device, DeviceBuffer, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

// ANCHOR: kernel_source
/// `kernels/ch01_router.cu`, built for the GPU (NVRTC at run time) and for the emulator.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch01_router");
// ANCHOR_END: kernel_source

/// The launch geometry, as `kernels/ch01_router.cu` defines it (`GEMM_ROWS`, `GEMM_TILE`, …).
pub mod geometry {
    moe_kernels::kernel_constants!("ch01_router");
}
use geometry::*;

/// From this many rows on, the logits come from the tiled GEMM (`router_gemm_f32_tiled`), which
/// reuses each loaded value 64 times; below it, from the few-row GEMM, which spreads one row over
/// all experts x 4 warps. Two kernels, so the last bits of a token's logits depend on its batch.
pub const TILED_GEMM_FROM_ROWS: usize = GEMM_TILED_FROM_ROWS;

/// Up to this many rows, the few-row GEMM gives each expert its own block (the most loads in
/// flight for a cold gate weight); above it, 4 experts share a block and each hidden value a
/// thread loads (so the hidden rows are read from L2 a quarter as often). Both settings add in
/// the same order, so they give the same bits.
pub const ONE_EXPERT_PER_BLOCK_UP_TO_ROWS: usize = GEMM_X4_FROM_ROWS - 1;

/// The five-line router for one shape on one device, with its intermediate buffers allocated
/// up front, so that [`DeviceRouter::enqueue`] only launches kernels (which is what a CUDA graph
/// can capture). It takes fp32 hidden states and gate weight.
pub struct FiveLineChain {
    module: Arc<Module>,
    config: RouterConfig,
    shape: GateShape,
    has_bias: bool,
    logits: DeviceBuffer<f32>, // [T, E]
    scores: DeviceBuffer<f32>, // [T, E]
    keys: DeviceBuffer<f32>,   // [T, E] scores + bias
    masked: DeviceBuffer<f32>, // [T, E] keys with dropped groups set to NaN
    sums: DeviceBuffer<f32>,   // [T]
}

fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig::for_elements(n, ELEMENTWISE_THREADS as u32)
}

/// The launch of `router_topk` for `rows` rows of `experts` keys: one warp per row, each warp's
/// keys and "used" flags in dynamic shared memory.
pub fn topk_launch(rows: usize, experts: usize) -> LaunchConfig {
    let shared = (TOPK_ROWS_PER_BLOCK * (experts * 4 + experts)).next_multiple_of(16) as u32;
    LaunchConfig::blocks(
        rows.div_ceil(TOPK_ROWS_PER_BLOCK) as u32,
        32 * TOPK_ROWS_PER_BLOCK as u32,
    )
    .with_shared(shared)
}

impl FiveLineChain {
    /// Validates the configuration against the shape and allocates the intermediates.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: GateShape,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        if shape.experts == 0 {
            return Err(RouterError::NoExperts.into());
        }
        config.validate(shape.experts, bias)?;
        if let Some(g) = config.grouping {
            if g.n_group > GROUP_LIMIT_MAX_GROUPS {
                return Err(DeviceRouterError::Limit {
                    what: "n_group (router_group_limit keeps its groups in one 64-bit mask)",
                    limit: GROUP_LIMIT_MAX_GROUPS,
                    got: g.n_group,
                });
            }
        }
        let te = shape.rows * shape.experts;
        Ok(FiveLineChain {
            module: device.load(&KERNELS)?,
            config: config.clone(),
            shape,
            has_bias: bias.is_some(),
            logits: device.alloc(te)?,
            scores: device.alloc(te)?,
            keys: device.alloc(te)?,
            masked: device.alloc(te)?,
            sums: device.alloc(shape.rows)?,
        })
    }

    /// The kernels one call launches, in order (the table in the module docs).
    pub fn launch_names(&self) -> Vec<&'static str> {
        let c = &self.config;
        let rows = self.shape.rows;
        let mut v = vec![if rows >= TILED_GEMM_FROM_ROWS {
            "router_gemm_f32_tiled"
        } else if rows > ONE_EXPERT_PER_BLOCK_UP_TO_ROWS {
            "router_gemm_f32_x4"
        } else {
            "router_gemm_f32"
        }];
        v.push(match c.scoring {
            Scoring::Sigmoid => "router_sigmoid",
            Scoring::SqrtSoftplus => "router_sqrt_softplus",
            Scoring::Softmax => "router_softmax",
        });
        if self.has_bias {
            v.push("router_bias_add");
        }
        if c.grouping.is_some() {
            v.push("router_group_limit");
        }
        v.extend(["router_topk", "router_gather"]);
        if c.renormalize {
            v.extend(["router_row_sum", "router_divide"]);
        } else if c.routed_scaling != 1.0 {
            v.push("router_scale");
        }
        v
    }

    /// How many kernels one call launches.
    pub fn launches_per_call(&self) -> usize {
        self.launch_names().len()
    }

    // ANCHOR: enqueue_gemm
    /// `logits [T, E] = hidden [T, H] · weight [E, H]ᵀ`, by the GEMM that suits the row count.
    fn gemm(
        &self,
        hidden: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
    ) -> Result<(), DeviceRouterError> {
        let GateShape {
            rows,
            hidden: h,
            experts: e,
        } = self.shape;
        let args = args![
            hidden,
            weight,
            &self.logits,
            rows as i32,
            h as i32,
            e as i32
        ];
        if rows >= TILED_GEMM_FROM_ROWS {
            // One block per GEMM_TILE x GEMM_TILE tile of the logits.
            let grid = (
                e.div_ceil(GEMM_TILE) as u32,
                rows.div_ceil(GEMM_TILE) as u32,
                1,
            );
            let cfg = LaunchConfig {
                grid,
                block: (GEMM_TILED_THREADS as u32, 1, 1),
                shared_bytes: 0,
                dependent: false,
            };
            self.module.launch("router_gemm_f32_tiled", cfg, &args)?;
        } else {
            // GEMM_ROWS rows and 1 or 4 experts per block of GEMM_WARPS warps.
            let (kernel, epb) = if rows <= ONE_EXPERT_PER_BLOCK_UP_TO_ROWS {
                ("router_gemm_f32", 1)
            } else {
                ("router_gemm_f32_x4", 4)
            };
            let cfg = LaunchConfig {
                grid: (e.div_ceil(epb) as u32, rows.div_ceil(GEMM_ROWS) as u32, 1),
                block: (32 * GEMM_WARPS as u32, 1, 1),
                shared_bytes: 0,
                dependent: false,
            };
            self.module.launch(kernel, cfg, &args)?;
        }
        Ok(())
    }
    // ANCHOR_END: enqueue_gemm

    /// Queues the router from logits already on the device: `logits` [T, E] f32 (every step of
    /// the chain after the GEMM).
    pub fn enqueue_from_logits(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let GateShape {
            rows, experts: e, ..
        } = self.shape;
        expect_len("logits [T, E]", logits.len(), rows * e)?;
        self.check_outputs(bias, outputs)?;
        if rows == 0 {
            return Ok(());
        }
        self.after_gemm(logits, bias, outputs)
    }

    fn check_outputs(
        &self,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let GateShape {
            rows, experts: e, ..
        } = self.shape;
        let k = self.config.k;
        expect_len("ids [T, k]", outputs.ids.len(), rows * k)?;
        expect_len("weights [T, k]", outputs.weights.len(), rows * k)?;
        match (bias, self.has_bias) {
            (Some(b), true) => expect_len("bias [E]", b.len(), e),
            (None, false) => Ok(()),
            (Some(_), false) => Err(DeviceRouterError::Shape {
                what: "bias (the chain was built without one)",
                expected: 0,
                got: e,
            }),
            (None, true) => Err(DeviceRouterError::Shape {
                what: "bias (the chain was built with one)",
                expected: e,
                got: 0,
            }),
        }
    }

    /// Steps 2 and 3: scores, keys, selection, weights, from `logits` [T, E].
    fn after_gemm(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let GateShape {
            rows, experts: e, ..
        } = self.shape;
        let k = self.config.k;
        let (t, ei, ki) = (rows as i32, e as i32, k as i32);
        let te = rows * e;
        let m = &self.module;
        let (ids, weights) = (out.ids, out.weights);
        // ANCHOR: enqueue_rest
        match self.config.scoring {
            Scoring::Sigmoid => m.launch(
                "router_sigmoid",
                elementwise(te),
                &args![logits, &self.scores, te as i32],
            )?,
            Scoring::SqrtSoftplus => m.launch(
                "router_sqrt_softplus",
                elementwise(te),
                &args![logits, &self.scores, te as i32],
            )?,
            Scoring::Softmax => m.launch(
                "router_softmax",
                LaunchConfig::blocks(rows as u32, SOFTMAX_THREADS as u32),
                &args![logits, &self.scores, t, ei],
            )?,
        }
        let mut keys = &self.scores;
        if let Some(b) = bias {
            m.launch(
                "router_bias_add",
                elementwise(te),
                &args![&self.scores, b, &self.keys, t, ei],
            )?;
            keys = &self.keys;
        }
        if let Some(g) = self.config.grouping {
            m.launch(
                "router_group_limit",
                LaunchConfig::for_elements(rows, GROUP_LIMIT_THREADS as u32),
                &args![
                    keys,
                    logits,
                    &self.masked,
                    t,
                    ei,
                    g.n_group as i32,
                    g.topk_group as i32
                ],
            )?;
            keys = &self.masked;
        }
        m.launch(
            "router_topk",
            topk_launch(rows, e),
            &args![keys, logits, ids, t, ei, ki],
        )?;
        m.launch(
            "router_gather",
            elementwise(rows * k),
            &args![&self.scores, ids, weights, t, ei, ki],
        )?;
        let scale = self.config.routed_scaling;
        if self.config.renormalize {
            m.launch(
                "router_row_sum",
                elementwise(rows),
                &args![weights, &self.sums, t, ki],
            )?;
            m.launch(
                "router_divide",
                elementwise(rows * k),
                &args![weights, &self.sums, t, ki, scale],
            )?;
        } else if scale != 1.0 {
            m.launch(
                "router_scale",
                elementwise(rows * k),
                &args![weights, (rows * k) as i32, scale],
            )?;
        }
        // ANCHOR_END: enqueue_rest
        Ok(())
    }
}

impl DeviceRouter for FiveLineChain {
    fn name(&self) -> &'static str {
        "chain"
    }

    fn shape(&self) -> GateShape {
        self.shape
    }

    fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// `hidden` [T, H] f32 and `weight` [E, H] f32 (the gate) and `bias` `[E]` f32 in; `ids`
    /// [T, k] i32 and `weights` [T, k] f32 out.
    fn enqueue(
        &self,
        inputs: &GateInputs<'_>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let (DeviceMatrix::F32(hidden), DeviceMatrix::F32(weight)) = (inputs.hidden, inputs.weight)
        else {
            let bad = if inputs.hidden.dtype() != GateDtype::F32 {
                ("hidden states", inputs.hidden.dtype())
            } else {
                ("gate weight", inputs.weight.dtype())
            };
            return Err(DeviceRouterError::Dtype {
                router: "chain",
                what: bad.0,
                got: bad.1,
            });
        };
        let GateShape {
            rows,
            hidden: h,
            experts: e,
        } = self.shape;
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("gate weight [E, H]", weight.len(), e * h)?;
        self.check_outputs(inputs.bias, outputs)?;
        if rows == 0 {
            return Ok(());
        }
        self.gemm(hidden, weight)?;
        self.after_gemm(&self.logits, inputs.bias, outputs)
    }
}

/// Host in, host out, through the chain: routes `hidden` [T, H] through `weight` [E, H] on
/// `device` and returns ids and weights. Empty batches return an empty [`Routing`] without
/// launching anything.
pub fn route_with_chain(
    device: &'static Device,
    config: &RouterConfig,
    shape: GateShape,
    hidden: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, DeviceRouterError> {
    let chain = FiveLineChain::new(device, config, shape, bias)?;
    route_on_device(&chain, device, GateDtype::F32, hidden, weight, bias)
}

/// Host in, host out, from logits: routes `logits` [T, E] on `device` with every step of the
/// chain after the GEMM (the `--input` path of the example).
pub fn route_logits_on_device(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, DeviceRouterError> {
    expect_len("logits [T, E]", logits.len(), rows * experts)?;
    let shape = GateShape {
        rows,
        hidden: 0,
        experts,
    };
    let chain = FiveLineChain::new(device, config, shape, bias)?;
    route_logits_with(
        device,
        rows,
        experts,
        config.k,
        logits,
        bias,
        &|logits, bias, outputs| chain.enqueue_from_logits(logits, bias, outputs),
    )
}
