//! The chapter's error type: the router's errors (chapter 1's rules, chapter 5's limits, a
//! buffer of the wrong size, the runtime) and the layout's (chapter 3's BLOCK_M rule and sizes).

use ch01_router::chain::DeviceRouterError;
use ch01_router::RouterError;
use ch03_align::AlignError;
use moe_kernels::KernelError;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum StageError {
    /// The router's side: its configuration, the bias, E, k, a buffer's size, the runtime.
    Router(DeviceRouterError),
    /// The layout's side: BLOCK_M, a size past what the layout's i32 slots hold.
    Align(AlignError),
}

impl fmt::Display for StageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageError::Router(e) => write!(f, "{e}"),
            StageError::Align(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StageError {}

impl From<DeviceRouterError> for StageError {
    fn from(e: DeviceRouterError) -> Self {
        StageError::Router(e)
    }
}

impl From<RouterError> for StageError {
    fn from(e: RouterError) -> Self {
        StageError::Router(e.into())
    }
}

impl From<AlignError> for StageError {
    fn from(e: AlignError) -> Self {
        StageError::Align(e)
    }
}

impl From<KernelError> for StageError {
    fn from(e: KernelError) -> Self {
        StageError::Router(e.into())
    }
}
