//! The chapter's error type: every variant names what is wrong, with the numbers.

use moe_kernels::KernelError;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum AlignError {
    /// A pair names an expert outside `0..experts` (negative ids included).
    IdOutOfRange {
        pair: usize,
        id: i64,
        experts: usize,
    },
    /// BLOCK_M must be a power of two from 1 to 1024 (tiles of the expert kernel).
    BlockM { value: usize },
    /// The layer has no experts.
    NoExperts,
    /// A size past what the kernels support.
    Limit {
        what: &'static str,
        limit: usize,
        got: usize,
    },
    /// A buffer of the wrong length.
    Shape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// The runtime failed.
    Kernel(KernelError),
}

impl fmt::Display for AlignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlignError::IdOutOfRange { pair, id, experts } => {
                write!(f, "pair {pair} names expert {id}, outside 0..{experts}")
            }
            AlignError::BlockM { value } => write!(
                f,
                "BLOCK_M is {value}, expected a power of two from 1 to 1024"
            ),
            AlignError::NoExperts => write!(f, "the layer has no experts (E = 0)"),
            AlignError::Limit { what, limit, got } => {
                write!(
                    f,
                    "{what} is {got}, more than the kernels support ({limit})"
                )
            }
            AlignError::Shape {
                what,
                expected,
                got,
            } => write!(f, "{what} has {got} elements, expected {expected}"),
            AlignError::Kernel(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AlignError {}

impl From<KernelError> for AlignError {
    fn from(e: KernelError) -> Self {
        AlignError::Kernel(e)
    }
}
