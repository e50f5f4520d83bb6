//! Tensor parallelism: every rank holds a slice of every expert's intermediate dimension (and of
//! the shared expert's), runs chapter 6's whole layer on the same tokens with its slice, and an
//! all-reduce sums the ranks' partial outputs.
//!
//! What it gives, against chapter 6's layer on one GPU:
//! - the routing, bit for bit: the router's gate is whole on every rank;
//! - each expert's activations `SwiGLU(x · w13ᵀ)` for the rank's columns, bit for bit on the same
//!   path (a column's sum over H does not depend on which other columns a GEMM computes);
//! - the output within [`TP_TOLERANCE`]: the down projection's sum over I is split into R sums
//!   of I/R terms, each weighted, summed over k and shared, then added across ranks. One GPU
//!   adds the same products in one fp32 sum per pair; R ranks round R partial sums. A different
//!   order of fp32 additions, nothing else.

use crate::comm::Communicator;
use crate::error::{check_rank, check_split, ParallelError};
use crate::shard::tensor_slice;
use ch02_grouped::compare::Tolerance;
use ch02_grouped::layer::{rows_of, LayerOutput};
use ch02_grouped::MoeWeights;
use ch04_fused_moe::FusedDevice;
use ch06_layer::{AssembledLayer, LayerWorkspace};
use half::bf16;
use moe_kernels::{Device, DeviceBuffer};

// ANCHOR: tp_tolerance
/// Tensor parallelism against one GPU on the same path and tile configuration, max |difference|
/// over the rms of the output: fp32 sums in another order (R partial dot products of I/R terms,
/// each rounded and weighted, then added across ranks), nothing else. Worst measured over the
/// regimes on the emulator (`tests/tensor.rs` prints it): 4.8e-6, `gpt_oss_sizes_few_tokens` on
/// 4 ranks (I = 1408 cut into four sums of 352), tiled path. The tolerance is four times that,
/// and far below a wrong expert or weight (of the order of the rms itself). With each side
/// choosing its own path the difference is chapter 4's between sum orders
/// ([`ch04_fused_moe::ACROSS_SUM_ORDERS`]).
pub const TP_TOLERANCE: Tolerance = Tolerance(2e-5);
// ANCHOR_END: tp_tolerance

/// One rank of a tensor-parallel layer.
pub struct TensorParallel {
    rank: usize,
    world: usize,
    layer: AssembledLayer,
}

impl TensorParallel {
    /// Rank `rank` of `world`: chapter 6's layer on this rank's slice of `weights`
    /// ([`tensor_slice`]). A typed error when I or the shared expert's I does not split, or the
    /// rank is out of range.
    pub fn new(
        device: &'static Device,
        weights: &MoeWeights,
        rank: usize,
        world: usize,
    ) -> Result<Self, ParallelError> {
        check_rank(rank, world)?;
        let slice = tensor_slice(weights, rank, world)?;
        Ok(TensorParallel {
            rank,
            world,
            layer: AssembledLayer::new(device, &slice)?,
        })
    }

    /// A rank whose slice is made on the device (chapter 6's `patterned_with_bias` on the
    /// config with I/R, seed `seed + rank`): the bench's production shapes, too big to cut on
    /// the host. Timing only: the slices are not cut from one layer.
    pub fn patterned_on_device(
        device: &'static Device,
        config: &ch02_grouped::MoeConfig,
        seed: u64,
        bias: Option<&[f32]>,
        rank: usize,
        world: usize,
    ) -> Result<Self, ParallelError> {
        check_rank(rank, world)?;
        let local = check_split("intermediate", config.intermediate, world)?;
        let shared = match config.shared {
            Some(s) => Some(ch02_grouped::SharedExpert {
                intermediate: check_split("shared expert intermediate", s.intermediate, world)?,
                ..s
            }),
            None => None,
        };
        let slice = ch02_grouped::MoeConfig {
            intermediate: local,
            shared,
            ..config.clone()
        };
        Ok(TensorParallel {
            rank,
            world,
            layer: AssembledLayer::patterned_with_bias(device, &slice, seed + rank as u64, bias)?,
        })
    }

    /// The same rank with chapter 4's experts changed by `f` (a path, a tile configuration).
    pub fn map_experts(
        mut self,
        f: impl FnOnce(FusedDevice) -> Result<FusedDevice, ch02_grouped::MoeError>,
    ) -> Result<Self, ParallelError> {
        self.layer = self.layer.map_experts(f)?;
        Ok(self)
    }

    /// This rank's chapter 6 layer (its slice of the weights).
    pub fn layer(&self) -> &AssembledLayer {
        &self.layer
    }

    /// Checks that `comm` is this layer's rank of this layer's world.
    fn check_comm(&self, comm: &impl Communicator) -> Result<(), ParallelError> {
        crate::expert::check_comm(self.rank, self.world, comm)
    }

    // ANCHOR: tp_enqueue
    /// Queues this rank's partial layer on `hidden` `[T, H]` bf16 into `out` `[T, H]` f32 (the
    /// same tokens on every rank), then sums `out` over the ranks: afterwards every rank holds
    /// the layer's output.
    pub fn enqueue(
        &self,
        comm: &impl Communicator,
        ws: &LayerWorkspace,
        hidden: &DeviceBuffer<bf16>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), ParallelError> {
        self.check_comm(comm)?;
        self.layer.enqueue(ws, hidden, out)?; // chapter 6, on this rank's columns of I
        comm.all_reduce_sum(out) // Σ over ranks, in rank order
    }
    // ANCHOR_END: tp_enqueue

    /// [`Self::enqueue`] from host f32 (rounded to bf16, as chapter 6's `forward`), with the
    /// routing downloaded: every rank returns the same output.
    pub fn forward(
        &self,
        comm: &impl Communicator,
        hidden: &[f32],
    ) -> Result<LayerOutput, ParallelError> {
        self.check_comm(comm)?;
        let c = ch02_grouped::MoeLayer::config(&self.layer);
        let rows = rows_of(c, hidden)?;
        let dev = self.layer.device();
        let ws = self.layer.workspace(rows)?;
        let x: Vec<bf16> = hidden.iter().map(|&v| bf16::from_f32(v)).collect();
        let x = dev.upload(&x)?;
        let mut out = dev.alloc::<f32>(hidden.len())?;
        self.enqueue(comm, &ws, &x, &mut out)?;
        Ok(LayerOutput {
            routing: ws.routing(c.router.k)?,
            out: out.to_vec()?,
        })
    }
}
