//! The communication a layer spread over several GPUs needs, behind one trait: which rank am I,
//! how many are we, a sum over every rank (tensor parallelism), and an exchange of
//! variable-length blocks between every pair of ranks (expert parallelism).
//!
//! Two implementations: [`crate::nccl::Nccl`], the real one, with NVIDIA's
//! collective library through cudarc's bindings, one process per GPU; and
//! [`crate::in_process::InProcess`], ranks as threads of one process on the emulator, which
//! exists only so that the tests and the example can check the layers' arithmetic without two
//! GPUs. It is not a runtime: it copies every block through the host.

use crate::error::ParallelError;
use half::bf16;
use moe_kernels::{Device, DeviceBuffer, DeviceRepr};

/// The element types the collectives move: bf16 hidden rows, f32 outputs and weights, i32 ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemKind {
    Bf16,
    F32,
    I32,
}

/// A type a collective can move (NCCL needs to be told which).
pub trait Element: DeviceRepr + Copy + Default + Send + Sync + 'static {
    const KIND: ElemKind;
}

impl Element for bf16 {
    const KIND: ElemKind = ElemKind::Bf16;
}
impl Element for f32 {
    const KIND: ElemKind = ElemKind::F32;
}
impl Element for i32 {
    const KIND: ElemKind = ElemKind::I32;
}

// ANCHOR: communicator
/// One rank's end of a group of `world` ranks. Every rank must make the same calls in the same
/// order (a collective waits for all of them), with sizes that agree.
pub trait Communicator {
    /// This rank, in `0..world`.
    fn rank(&self) -> usize;
    /// How many ranks the group has.
    fn world(&self) -> usize;
    /// The device this rank's buffers live on.
    fn device(&self) -> &'static Device;

    /// `buf` `[n]` f32 replaced on every rank by the sum over the ranks, added in rank order:
    /// `((0 + b₀) + b₁) + …`, so every rank gets the same bits and so does every implementation.
    fn all_reduce_sum(&self, buf: &mut DeviceBuffer<f32>) -> Result<(), ParallelError>;

    /// Each rank says how many elements it will send to each rank (`send[d]`); each gets back
    /// how many it will receive from each (`recv[s]`, what rank s said for it). The sizes of an
    /// all-to-all are host numbers, so they travel first.
    fn exchange_counts(&self, send: &[usize]) -> Result<Vec<usize>, ParallelError>;

    /// The all-to-all of variable-length blocks: `send` holds the blocks for ranks 0, 1, … one
    /// after another (`send_counts[d]` elements for rank d); `recv` receives the blocks from
    /// ranks 0, 1, … in that order (`recv_counts[s]` from rank s). With NCCL: grouped send/recv.
    fn all_to_all<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        recv_counts: &[usize],
    ) -> Result<(), ParallelError>;
}
// ANCHOR_END: communicator

/// Checks an all-to-all's sizes: one count per rank, and buffers that hold exactly their sums.
pub fn check_all_to_all(
    world: usize,
    send_len: usize,
    send_counts: &[usize],
    recv_len: usize,
    recv_counts: &[usize],
) -> Result<(), ParallelError> {
    let bad = |why: String| ParallelError::Comm {
        op: "all_to_all",
        why,
    };
    for (what, counts, len) in [
        ("send", send_counts, send_len),
        ("recv", recv_counts, recv_len),
    ] {
        if counts.len() != world {
            return Err(bad(format!(
                "{} {what} counts for a world of {world}",
                counts.len()
            )));
        }
        let total: usize = counts.iter().sum();
        if total != len {
            return Err(bad(format!(
                "the {what} buffer holds {len} elements, its counts sum to {total}"
            )));
        }
    }
    Ok(())
}
