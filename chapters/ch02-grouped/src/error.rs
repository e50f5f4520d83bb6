//! The chapter's error type. Every variant names the tensor or field and carries the expected
//! and the found value, so a message read in a log says what to fix.

use ch01_router::chain::DeviceRouterError;
use ch01_router::RouterError;
use moe_kernels::KernelError;
use std::fmt;

/// Why a layer refused its weights or its input, or failed on its device.
#[derive(Clone, Debug, PartialEq)]
pub enum MoeError {
    /// A tensor of the wrong size: `what` names it with its shape, e.g. `w13 [E, 2I, H]`.
    Shape {
        what: String,
        expected: usize,
        got: usize,
    },
    /// A configuration field out of range, e.g. `hidden = 0`.
    Config {
        field: &'static str,
        expected: String,
        found: String,
    },
    /// The router refused its configuration or input (chapter 1's rules).
    Router(RouterError),
    /// The device router (chapter 1's chain) refused its input.
    DeviceRouter(DeviceRouterError),
    /// The runtime failed: an allocation, a launch, a copy, a GEMM.
    Kernel(KernelError),
    /// candle's tensor operations failed (the CPU grouped loop).
    Candle(String),
    /// A routing names an expert the layer does not have.
    IdOutOfRange {
        row: usize,
        slot: usize,
        id: u32,
        experts: usize,
    },
}

impl fmt::Display for MoeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoeError::Shape {
                what,
                expected,
                got,
            } => write!(f, "{what} has {got} elements, expected {expected}"),
            MoeError::Config {
                field,
                expected,
                found,
            } => write!(f, "config field `{field}` is {found}, expected {expected}"),
            MoeError::Router(e) => write!(f, "router: {e}"),
            MoeError::DeviceRouter(e) => write!(f, "router on the device: {e}"),
            MoeError::Kernel(e) => write!(f, "{e}"),
            MoeError::Candle(e) => write!(f, "candle: {e}"),
            MoeError::IdOutOfRange {
                row,
                slot,
                id,
                experts,
            } => write!(
                f,
                "routing row {row}, slot {slot} names expert {id}, but the layer has {experts} (ids 0..{experts})"
            ),
        }
    }
}

impl std::error::Error for MoeError {}

impl From<RouterError> for MoeError {
    fn from(e: RouterError) -> Self {
        MoeError::Router(e)
    }
}
impl From<DeviceRouterError> for MoeError {
    fn from(e: DeviceRouterError) -> Self {
        MoeError::DeviceRouter(e)
    }
}
impl From<KernelError> for MoeError {
    fn from(e: KernelError) -> Self {
        MoeError::Kernel(e)
    }
}
impl From<candle_core::Error> for MoeError {
    fn from(e: candle_core::Error) -> Self {
        MoeError::Candle(e.to_string())
    }
}

/// `Ok` when a buffer or vector holds `expected` elements, else [`MoeError::Shape`].
pub fn expect_len(what: &str, got: usize, expected: usize) -> Result<(), MoeError> {
    if got == expected {
        Ok(())
    } else {
        Err(MoeError::Shape {
            what: what.to_string(),
            expected,
            got,
        })
    }
}
