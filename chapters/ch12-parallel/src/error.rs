//! The chapter's error: a split the layer cannot make, a rank or world that does not match, a
//! collective that failed, or chapter 2's [`MoeError`] from the layer underneath.

use ch02_grouped::MoeError;
use moe_kernels::KernelError;
use std::fmt;

/// Everything chapter 12's layers and communicators refuse, by name.
#[derive(Clone, Debug, PartialEq)]
pub enum ParallelError {
    /// A size that does not split evenly over the ranks: `what` names it (`experts`,
    /// `intermediate`, `shared expert intermediate`).
    Split {
        what: &'static str,
        size: usize,
        world: usize,
    },
    /// A world of no ranks.
    EmptyWorld,
    /// A rank outside `0..world`.
    RankOutOfRange { rank: usize, world: usize },
    /// A layer built for one world (or rank) handed a communicator of another.
    WorldMismatch {
        what: &'static str,
        layer: usize,
        communicator: usize,
    },
    /// A collective failed or its buffers do not match what it was told.
    Comm { op: &'static str, why: String },
    /// The layer underneath (chapters 2 to 6) refused or failed.
    Layer(MoeError),
}

impl fmt::Display for ParallelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParallelError::Split { what, size, world } => write!(
                f,
                "{what} = {size} does not split over {world} ranks (it must be a multiple of the world size)"
            ),
            ParallelError::EmptyWorld => write!(f, "a world of 0 ranks: it needs at least one"),
            ParallelError::RankOutOfRange { rank, world } => {
                write!(f, "rank {rank} is out of range for a world of {world} ranks (0..{world})")
            }
            ParallelError::WorldMismatch {
                what,
                layer,
                communicator,
            } => write!(
                f,
                "the layer was built for {what} {layer}, the communicator has {what} {communicator}"
            ),
            ParallelError::Comm { op, why } => write!(f, "{op} failed: {why}"),
            ParallelError::Layer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ParallelError {}

impl From<MoeError> for ParallelError {
    fn from(e: MoeError) -> Self {
        ParallelError::Layer(e)
    }
}

impl From<KernelError> for ParallelError {
    fn from(e: KernelError) -> Self {
        ParallelError::Layer(MoeError::Kernel(e))
    }
}

/// Checks `rank` against `world` (and `world` against 0).
pub fn check_rank(rank: usize, world: usize) -> Result<(), ParallelError> {
    if world == 0 {
        return Err(ParallelError::EmptyWorld);
    }
    if rank >= world {
        return Err(ParallelError::RankOutOfRange { rank, world });
    }
    Ok(())
}

/// Checks that `size` splits into `world` equal parts.
pub fn check_split(what: &'static str, size: usize, world: usize) -> Result<usize, ParallelError> {
    if world == 0 {
        return Err(ParallelError::EmptyWorld);
    }
    #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; the MSRV is 1.85
    if size % world != 0 {
        return Err(ParallelError::Split { what, size, world });
    }
    Ok(size / world)
}
