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

use crate::config::{RouterConfig, Scoring};
use crate::error::RouterError;
use crate::routing::Routing;
use moe_kernels::{args, Device, DeviceBuffer, KernelError, KernelSource, LaunchConfig, Module};
use std::fmt;
use std::sync::Arc;

// ANCHOR: kernel_source
/// `kernels/ch01_router.cu`, built for the GPU (NVRTC at run time) and for the emulator.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch01_router");
// ANCHOR_END: kernel_source

/// From this many rows on, the logits come from the tiled GEMM (`router_gemm_f32_tiled`), which
/// reuses each loaded value 64 times; below it, from the few-row GEMM, which spreads one row over
/// all experts x 4 warps. Two kernels, so the last bits of a token's logits depend on its batch.
pub const TILED_GEMM_FROM_ROWS: usize = 1024;

/// Up to this many rows, the few-row GEMM gives each expert its own block (the most loads in
/// flight for a cold gate weight); above it, 4 experts share a block and each hidden value a
/// thread loads (so the hidden rows are read from L2 a quarter as often). Both settings add in
/// the same order, so they give the same bits.
pub const ONE_EXPERT_PER_BLOCK_UP_TO_ROWS: usize = 8;

/// What can go wrong on the device path: a bad router configuration, a buffer of the wrong
/// shape, or the backend itself.
#[derive(Debug, Clone, PartialEq)]
pub enum ChainError {
    Router(RouterError),
    Shape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    Kernel(KernelError),
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainError::Router(e) => write!(f, "{e}"),
            ChainError::Shape {
                what,
                expected,
                got,
            } => {
                write!(f, "{what} has {got} elements, expected {expected}")
            }
            ChainError::Kernel(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ChainError {}

impl From<RouterError> for ChainError {
    fn from(e: RouterError) -> Self {
        ChainError::Router(e)
    }
}
impl From<KernelError> for ChainError {
    fn from(e: KernelError) -> Self {
        ChainError::Kernel(e)
    }
}

/// The sizes of one routing call: `rows` tokens of `hidden` numbers, `experts` experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateShape {
    pub rows: usize,
    pub hidden: usize,
    pub experts: usize,
}

fn expect_len(what: &'static str, got: usize, expected: usize) -> Result<(), ChainError> {
    if got == expected {
        Ok(())
    } else {
        Err(ChainError::Shape {
            what,
            expected,
            got,
        })
    }
}

/// The five-line router for one shape on one device, with its intermediate buffers allocated
/// up front, so that [`FiveLineChain::enqueue`] only launches kernels (which is what a CUDA
/// graph can capture).
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
    /// Launches still allowed in this call (for `enqueue_first`, the per-kernel breakdown).
    budget: std::cell::Cell<usize>,
}

impl FiveLineChain {
    /// Validates the configuration against the shape and allocates the intermediates.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: GateShape,
        bias: Option<&[f32]>,
    ) -> Result<Self, ChainError> {
        if shape.experts == 0 {
            return Err(RouterError::NoExperts.into());
        }
        config.validate(shape.experts, bias)?;
        if let Some(g) = config.grouping {
            // router_group_limit keeps its set of groups in one 64-bit mask.
            if g.n_group > 64 {
                return Err(ChainError::Shape {
                    what: "n_group (at most 64 in router_group_limit)",
                    expected: 64,
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
            budget: std::cell::Cell::new(usize::MAX),
        })
    }

    /// The shape this chain was built for.
    pub fn shape(&self) -> GateShape {
        self.shape
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

    /// Launches one kernel of the chain, unless this call's budget is spent.
    fn launch(
        &self,
        name: &str,
        cfg: LaunchConfig,
        args: &[moe_kernels::KernelArg],
    ) -> Result<(), ChainError> {
        let left = self.budget.get();
        if left == 0 {
            return Ok(());
        }
        self.budget.set(left - 1);
        Ok(self.module.launch(name, cfg, args)?)
    }

    /// [`FiveLineChain::enqueue`] stopped after its first `steps` launches: the benchmark times
    /// each prefix and takes differences, to show where the time goes.
    pub fn enqueue_first(
        &self,
        steps: usize,
        hidden: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
    ) -> Result<(), ChainError> {
        self.budget.set(steps);
        let r = self.enqueue(hidden, weight, bias, ids, weights);
        self.budget.set(usize::MAX);
        r
    }

    /// Queues the whole router: `hidden` [T, H] f32 and `weight` [E, H] f32 (the gate) and
    /// `bias` [E] f32 in; `ids` [T, k] i32 and `weights` [T, k] f32 out.
    pub fn enqueue(
        &self,
        hidden: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
    ) -> Result<(), ChainError> {
        let GateShape {
            rows,
            hidden: h,
            experts: e,
        } = self.shape;
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("gate weight [E, H]", weight.len(), e * h)?;
        if rows == 0 {
            return Ok(());
        }
        // ANCHOR: enqueue_gemm
        let args = args![
            hidden,
            weight,
            &self.logits,
            rows as i32,
            h as i32,
            e as i32
        ];
        if rows >= TILED_GEMM_FROM_ROWS {
            // 64 x 64 tiles of the logits, 256 threads each.
            let grid = (e.div_ceil(64) as u32, rows.div_ceil(64) as u32, 1);
            self.launch(
                "router_gemm_f32_tiled",
                LaunchConfig {
                    grid,
                    block: (256, 1, 1),
                    shared_bytes: 0,
                },
                &args,
            )?;
        } else {
            // Up to 8 rows and 1 or 4 experts per block of 4 warps.
            let (kernel, epb) = if rows <= ONE_EXPERT_PER_BLOCK_UP_TO_ROWS {
                ("router_gemm_f32", 1)
            } else {
                ("router_gemm_f32_x4", 4)
            };
            let grid = (e.div_ceil(epb) as u32, rows.div_ceil(8) as u32, 1);
            self.launch(
                kernel,
                LaunchConfig {
                    grid,
                    block: (128, 1, 1),
                    shared_bytes: 0,
                },
                &args,
            )?;
        }
        // ANCHOR_END: enqueue_gemm
        self.enqueue_after_gemm(&self.logits, bias, ids, weights)
    }

    /// Queues the router from logits already on the device: `logits` [T, E] f32.
    pub fn enqueue_from_logits(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
    ) -> Result<(), ChainError> {
        let GateShape {
            rows, experts: e, ..
        } = self.shape;
        expect_len("logits [T, E]", logits.len(), rows * e)?;
        if rows == 0 {
            return Ok(());
        }
        self.enqueue_after_gemm(logits, bias, ids, weights)
    }

    /// Steps 2 and 3: scores, keys, selection, weights, from `logits` [T, E].
    fn enqueue_after_gemm(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
    ) -> Result<(), ChainError> {
        let GateShape {
            rows, experts: e, ..
        } = self.shape;
        let k = self.config.k;
        let (t, ei, ki) = (rows as i32, e as i32, k as i32);
        let te = rows * e;
        expect_len("ids [T, k]", ids.len(), rows * k)?;
        expect_len("weights [T, k]", weights.len(), rows * k)?;
        match (bias, self.has_bias) {
            (Some(b), true) => expect_len("bias [E]", b.len(), e)?,
            (None, false) => {}
            (Some(_), false) => {
                return Err(ChainError::Shape {
                    what: "bias (the chain was built without one)",
                    expected: 0,
                    got: e,
                })
            }
            (None, true) => {
                return Err(ChainError::Shape {
                    what: "bias (the chain was built with one)",
                    expected: e,
                    got: 0,
                })
            }
        }
        let m = self;
        // ANCHOR: enqueue_rest
        match self.config.scoring {
            Scoring::Sigmoid => m.launch(
                "router_sigmoid",
                LaunchConfig::for_elements(te, 256),
                &args![logits, &self.scores, te as i32],
            )?,
            Scoring::SqrtSoftplus => m.launch(
                "router_sqrt_softplus",
                LaunchConfig::for_elements(te, 256),
                &args![logits, &self.scores, te as i32],
            )?,
            Scoring::Softmax => m.launch(
                "router_softmax",
                LaunchConfig::blocks(rows as u32, 256),
                &args![logits, &self.scores, t, ei],
            )?,
        }
        let mut keys = &self.scores;
        if let Some(b) = bias {
            m.launch(
                "router_bias_add",
                LaunchConfig::for_elements(te, 256),
                &args![&self.scores, b, &self.keys, t, ei],
            )?;
            keys = &self.keys;
        }
        if let Some(g) = self.config.grouping {
            m.launch(
                "router_group_limit",
                LaunchConfig::for_elements(rows, 128),
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
        // One warp per row, 4 rows per block; each warp's keys and flags in shared memory.
        let topk_shared = (4 * (e * 4 + e)).next_multiple_of(16) as u32;
        m.launch(
            "router_topk",
            LaunchConfig::blocks(rows.div_ceil(4) as u32, 128).with_shared(topk_shared),
            &args![keys, logits, ids, t, ei, ki],
        )?;
        m.launch(
            "router_gather",
            LaunchConfig::for_elements(rows * k, 256),
            &args![&self.scores, ids, weights, t, ei, ki],
        )?;
        let scale = self.config.routed_scaling;
        if self.config.renormalize {
            m.launch(
                "router_row_sum",
                LaunchConfig::for_elements(rows, 256),
                &args![weights, &self.sums, t, ki],
            )?;
            m.launch(
                "router_divide",
                LaunchConfig::for_elements(rows * k, 256),
                &args![weights, &self.sums, t, ki, scale],
            )?;
        } else if scale != 1.0 {
            m.launch(
                "router_scale",
                LaunchConfig::for_elements(rows * k, 256),
                &args![weights, (rows * k) as i32, scale],
            )?;
        }
        // ANCHOR_END: enqueue_rest
        Ok(())
    }
}

/// Host in, host out: routes `hidden` [T, H] through `weight` [E, H] on `device` and returns
/// ids and weights. Empty batches return an empty [`Routing`] without launching anything.
pub fn route_on_device(
    device: &'static Device,
    config: &RouterConfig,
    shape: GateShape,
    hidden: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, ChainError> {
    expect_len("hidden [T, H]", hidden.len(), shape.rows * shape.hidden)?;
    expect_len(
        "gate weight [E, H]",
        weight.len(),
        shape.experts * shape.hidden,
    )?;
    let hidden = device.upload(hidden)?;
    let weight = device.upload(weight)?;
    run_on_host_buffers(device, config, shape, bias, |chain, bias, ids, weights| {
        chain.enqueue(&hidden, &weight, bias, ids, weights)
    })
}

/// The host helpers' common part: builds the chain, uploads the bias, allocates the outputs,
/// runs `enqueue` and downloads ids and weights.
fn run_on_host_buffers(
    device: &'static Device,
    config: &RouterConfig,
    shape: GateShape,
    bias: Option<&[f32]>,
    enqueue: impl FnOnce(
        &FiveLineChain,
        Option<&DeviceBuffer<f32>>,
        &DeviceBuffer<i32>,
        &DeviceBuffer<f32>,
    ) -> Result<(), ChainError>,
) -> Result<Routing, ChainError> {
    let chain = FiveLineChain::new(device, config, shape, bias)?;
    let k = config.k;
    let bias = bias.map(|b| device.upload(b)).transpose()?;
    let ids = device.alloc::<i32>(shape.rows * k)?;
    let weights = device.alloc::<f32>(shape.rows * k)?;
    enqueue(&chain, bias.as_ref(), &ids, &weights)?;
    Ok(Routing {
        rows: shape.rows,
        k,
        ids: ids.to_vec()?.into_iter().map(|i| i as u32).collect(),
        weights: weights.to_vec()?,
    })
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
) -> Result<Routing, ChainError> {
    expect_len("logits [T, E]", logits.len(), rows * experts)?;
    let shape = GateShape {
        rows,
        hidden: 0,
        experts,
    };
    let logits = device.upload(logits)?;
    run_on_host_buffers(device, config, shape, bias, |chain, bias, ids, weights| {
        chain.enqueue_from_logits(&logits, bias, ids, weights)
    })
}
