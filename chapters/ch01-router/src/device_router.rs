//! The interface every router that runs on a device implements: chapter 1's chain of plain
//! kernels, chapter 5's fused router, later chapters' one-launch routers. It takes device
//! buffers and only queues launches (so a CUDA graph can capture it), and one test body
//! ([`crate::conformance`]) checks every implementation on every regime and backend.

use crate::config::RouterConfig;
use crate::error::RouterError;
use crate::routing::Routing;
use half::bf16;
use moe_kernels::{Device, DeviceBuffer, KernelError};
use std::fmt;

/// The sizes of one routing call: `rows` tokens of `hidden` numbers, `experts` experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateShape {
    pub rows: usize,
    pub hidden: usize,
    pub experts: usize,
}

/// The element type of a router's hidden states and gate weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateDtype {
    /// fp32, as chapter 1's chain computes.
    F32,
    /// bf16, as engines store activations and weights (chapter 5's tiny GEMM).
    Bf16,
}

/// A `[rows, cols]` matrix on a device, in either element type.
#[derive(Clone, Copy)]
pub enum DeviceMatrix<'a> {
    F32(&'a DeviceBuffer<f32>),
    Bf16(&'a DeviceBuffer<bf16>),
}

impl DeviceMatrix<'_> {
    pub fn dtype(&self) -> GateDtype {
        match self {
            DeviceMatrix::F32(_) => GateDtype::F32,
            DeviceMatrix::Bf16(_) => GateDtype::Bf16,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            DeviceMatrix::F32(b) => b.len(),
            DeviceMatrix::Bf16(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A router's inputs on the device: `hidden` [T, H], `weight` [E, H] (the gate), `bias` `[E]`.
#[derive(Clone, Copy)]
pub struct GateInputs<'a> {
    pub hidden: DeviceMatrix<'a>,
    pub weight: DeviceMatrix<'a>,
    pub bias: Option<&'a DeviceBuffer<f32>>,
}

/// A router's outputs on the device: `ids` [T, k] i32 and `weights` [T, k] f32.
#[derive(Clone, Copy)]
pub struct RouterOutputs<'a> {
    pub ids: &'a DeviceBuffer<i32>,
    pub weights: &'a DeviceBuffer<f32>,
}

/// What can go wrong on the device path: a bad router configuration, a buffer of the wrong
/// shape or type, or the backend itself.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceRouterError {
    Router(RouterError),
    Shape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// An input in an element type this router does not take.
    Dtype {
        router: &'static str,
        what: &'static str,
        got: GateDtype,
    },
    /// A size past what the kernels support (named, with the limit).
    Limit {
        what: &'static str,
        limit: usize,
        got: usize,
    },
    /// A size the kernels take only in whole steps of `of` (named, with the reason).
    NotMultiple {
        what: &'static str,
        of: usize,
        why: &'static str,
        got: usize,
    },
    /// A size that must not be zero (named, with what a zero would do).
    Zero {
        what: &'static str,
        why: &'static str,
    },
    Kernel(KernelError),
}

impl fmt::Display for DeviceRouterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRouterError::Router(e) => write!(f, "{e}"),
            DeviceRouterError::Shape {
                what,
                expected,
                got,
            } => write!(f, "{what} has {got} elements, expected {expected}"),
            DeviceRouterError::Dtype { router, what, got } => {
                write!(f, "the {router} router does not take {what} in {got:?}")
            }
            DeviceRouterError::Limit { what, limit, got } => {
                write!(
                    f,
                    "{what} is {got}, more than the kernels support ({limit})"
                )
            }
            DeviceRouterError::NotMultiple { what, of, why, got } => {
                write!(f, "{what} must be a multiple of {of} ({why}), got {got}")
            }
            DeviceRouterError::Zero { what, why } => write!(f, "{what} is 0: {why}"),
            DeviceRouterError::Kernel(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DeviceRouterError {}

impl From<RouterError> for DeviceRouterError {
    fn from(e: RouterError) -> Self {
        DeviceRouterError::Router(e)
    }
}
impl From<KernelError> for DeviceRouterError {
    fn from(e: KernelError) -> Self {
        DeviceRouterError::Kernel(e)
    }
}

/// Checks that a buffer holds `expected` elements.
pub fn expect_len(
    what: &'static str,
    got: usize,
    expected: usize,
) -> Result<(), DeviceRouterError> {
    if got == expected {
        Ok(())
    } else {
        Err(DeviceRouterError::Shape {
            what,
            expected,
            got,
        })
    }
}

/// Which kernel a bias error names: a router (chapters 5, 9 and 11) or chapter 8's routing stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasOwner {
    Router,
    Stage,
}

/// The bias handed to a kernel built with one (`built_with`) or without: `[E]` f32 when it was,
/// absent when it was not; the error names `owner`.
pub fn expect_bias(
    built_with: bool,
    bias: Option<&DeviceBuffer<f32>>,
    experts: usize,
    owner: BiasOwner,
) -> Result<(), DeviceRouterError> {
    match bias {
        Some(b) if built_with => expect_len("bias [E]", b.len(), experts),
        None if !built_with => Ok(()),
        _ => Err(DeviceRouterError::Shape {
            what: match (owner, built_with) {
                (BiasOwner::Router, true) => "bias (the router was built with one)",
                (BiasOwner::Router, false) => "bias (the router was built without one)",
                (BiasOwner::Stage, true) => "bias (the stage was built with one)",
                (BiasOwner::Stage, false) => "bias (the stage was built without one)",
            },
            expected: if built_with { experts } else { 0 },
            got: bias.map_or(0, |b| b.len()),
        }),
    }
}

// ANCHOR: device_router
/// A router built for one shape on one device, with whatever intermediate buffers it needs
/// allocated up front, so that [`DeviceRouter::enqueue`] only launches kernels.
pub trait DeviceRouter {
    /// A short name for messages and tables (`chain`, `fused`).
    fn name(&self) -> &'static str;
    /// The shape it was built for.
    fn shape(&self) -> GateShape;
    /// Its configuration.
    fn config(&self) -> &RouterConfig;
    /// Queues the whole router: checks every buffer's length and type, then only launches.
    fn enqueue(
        &self,
        inputs: &GateInputs<'_>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError>;
}
// ANCHOR_END: device_router

/// Host in, host out: uploads `hidden` [T, H] and `weight` [E, H] (in the router's element
/// type: values are rounded to bf16 for a bf16 router), runs `router` on `device`, and
/// downloads ids and weights. An empty batch returns an empty [`Routing`].
pub fn route_on_device(
    router: &dyn DeviceRouter,
    device: &'static Device,
    dtype: GateDtype,
    hidden: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, DeviceRouterError> {
    let GateShape {
        rows,
        hidden: h,
        experts,
    } = router.shape();
    let k = router.config().k;
    expect_len("hidden [T, H]", hidden.len(), rows * h)?;
    expect_len("gate weight [E, H]", weight.len(), experts * h)?;
    let to_bf16 = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let (h32, w32, h16, w16);
    let inputs_hidden;
    let inputs_weight;
    match dtype {
        GateDtype::F32 => {
            h32 = device.upload(hidden)?;
            w32 = device.upload(weight)?;
            inputs_hidden = DeviceMatrix::F32(&h32);
            inputs_weight = DeviceMatrix::F32(&w32);
        }
        GateDtype::Bf16 => {
            h16 = device.upload(&to_bf16(hidden))?;
            w16 = device.upload(&to_bf16(weight))?;
            inputs_hidden = DeviceMatrix::Bf16(&h16);
            inputs_weight = DeviceMatrix::Bf16(&w16);
        }
    }
    let bias = bias.map(|b| device.upload(b)).transpose()?;
    let ids = device.alloc::<i32>(rows * k)?;
    let weights = device.alloc::<f32>(rows * k)?;
    router.enqueue(
        &GateInputs {
            hidden: inputs_hidden,
            weight: inputs_weight,
            bias: bias.as_ref(),
        },
        &RouterOutputs {
            ids: &ids,
            weights: &weights,
        },
    )?;
    download(rows, k, &ids, &weights)
}

/// What a router that starts from logits queues: `(logits [T, E], bias [E], outputs)`.
pub type EnqueueFromLogits<'a> = &'a dyn Fn(
    &DeviceBuffer<f32>,
    Option<&DeviceBuffer<f32>>,
    &RouterOutputs<'_>,
) -> Result<(), DeviceRouterError>;

/// Host in, host out, from logits: uploads `logits` [rows, experts] f32 and `bias` `[E]` f32,
/// allocates ids and weights for `k` picks a row, queues `enqueue` and downloads the routing
/// (chapter 1's chain after its GEMM, chapter 5's fused kernel).
pub fn route_logits_with(
    device: &'static Device,
    rows: usize,
    experts: usize,
    k: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
    enqueue: EnqueueFromLogits<'_>,
) -> Result<Routing, DeviceRouterError> {
    expect_len("logits [T, E]", logits.len(), rows * experts)?;
    let logits = device.upload(logits)?;
    let bias = bias.map(|b| device.upload(b)).transpose()?;
    let ids = device.alloc::<i32>(rows * k)?;
    let weights = device.alloc::<f32>(rows * k)?;
    enqueue(
        &logits,
        bias.as_ref(),
        &RouterOutputs {
            ids: &ids,
            weights: &weights,
        },
    )?;
    download(rows, k, &ids, &weights)
}

/// Brings a routing's ids and weights back to the host: how every `route_*` helper ends.
pub fn download(
    rows: usize,
    k: usize,
    ids: &DeviceBuffer<i32>,
    weights: &DeviceBuffer<f32>,
) -> Result<Routing, DeviceRouterError> {
    Ok(Routing {
        rows,
        k,
        ids: ids.to_vec()?.into_iter().map(|i| i as u32).collect(),
        weights: weights.to_vec()?,
    })
}
