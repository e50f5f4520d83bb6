//! The one error type of the chapter's routers.
//!
//! Every variant carries the numbers that make it wrong, so a message read in a log says what to
//! fix without a debugger. `thiserror` is deliberately not a dependency: the `Display` below is
//! the whole of what it would generate.

use std::fmt;

/// Why a router refused its input. Checked before any arithmetic: shape first, then config.
#[derive(Clone, Debug, PartialEq)]
pub enum RouterError {
    /// The logits are not a `[T, E]` matrix.
    LogitsNot2d { dims: Vec<usize> },
    /// `k = 0` selects nothing; every MoE layer runs at least one expert per token.
    KZero,
    /// More experts requested per token than the layer has.
    KTooLarge { k: usize, experts: usize },
    /// The selection bias must hold exactly one value per expert.
    BiasLength { len: usize, experts: usize },
    /// A NaN or infinite bias would decide every selection by itself.
    BiasNotFinite { expert: usize, value: f32 },
    /// The selection bias is one value per expert: a `[E]` vector, not `[1, E]` or `[E, 1]`.
    BiasShape { dims: Vec<usize> },
    /// The routed scaling factor multiplies every weight: it must be finite and positive.
    BadScale { value: f32 },
    /// The file given is not a safetensors file.
    NotSafetensors { path: String, why: String },
    /// Grouped selection splits the experts into equal contiguous groups.
    GroupsDoNotDivide { n_group: usize, experts: usize },
    /// Cannot keep more groups than there are.
    TopkGroupTooLarge { topk_group: usize, n_group: usize },
    /// The kept groups hold fewer experts than `k` (`topk_group * per_group < k`).
    GroupsTooFewForK {
        topk_group: usize,
        per_group: usize,
        k: usize,
    },
    /// A layer with zero experts has nothing to route to.
    NoExperts,
    /// The routers take fp32 logits and an fp32 bias (chapter 9 shows what rounding costs).
    WrongDtype { what: &'static str, dtype: String },
    /// An error from candle's tensor operations, as text.
    Candle(String),
    /// A file could not be read or written, or its tensors are not what it must hold.
    Io(String),
}

impl fmt::Display for RouterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterError::LogitsNot2d { dims } => {
                write!(f, "logits must be a [T, E] matrix, got shape {dims:?}")
            }
            RouterError::KZero => write!(f, "k = 0: a router must select at least one expert"),
            RouterError::KTooLarge { k, experts } => {
                write!(f, "k = {k} exceeds the number of experts ({experts})")
            }
            RouterError::BiasLength { len, experts } => write!(
                f,
                "bias has {len} values but there are {experts} experts (one bias per expert)"
            ),
            RouterError::BiasNotFinite { expert, value } => {
                write!(f, "bias of expert {expert} is {value}, not a finite number")
            }
            RouterError::BiasShape { dims } => write!(
                f,
                "bias must be a [E] vector (one value per expert), got shape {dims:?}"
            ),
            RouterError::BadScale { value } => write!(
                f,
                "the routed scaling factor must be a finite number above 0, got {value}"
            ),
            RouterError::NotSafetensors { path, why } => {
                write!(f, "{path} is not a safetensors file: {why}")
            }
            RouterError::GroupsDoNotDivide { n_group, experts } => write!(
                f,
                "{experts} experts cannot be split into {n_group} equal groups"
            ),
            RouterError::TopkGroupTooLarge {
                topk_group,
                n_group,
            } => write!(
                f,
                "topk_group = {topk_group} exceeds the number of groups ({n_group})"
            ),
            RouterError::GroupsTooFewForK {
                topk_group,
                per_group,
                k,
            } => write!(
                f,
                "the {topk_group} kept groups of {per_group} experts hold {} experts, fewer than k = {k}",
                topk_group * per_group
            ),
            RouterError::NoExperts => write!(f, "the layer has no experts (E = 0)"),
            RouterError::WrongDtype { what, dtype } => {
                write!(f, "{what} must be f32, got {dtype}")
            }
            RouterError::Candle(msg) => write!(f, "candle: {msg}"),
            RouterError::Io(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for RouterError {}

impl From<candle_core::Error> for RouterError {
    fn from(e: candle_core::Error) -> Self {
        RouterError::Candle(e.to_string())
    }
}

impl From<std::io::Error> for RouterError {
    fn from(e: std::io::Error) -> Self {
        RouterError::Io(e.to_string())
    }
}
