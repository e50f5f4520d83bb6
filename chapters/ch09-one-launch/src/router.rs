//! The one-launch router on a device (`kernels/ch09_one_launch.cu`): bf16 hidden states and gate
//! weight (and the fp32 bias) in; ids, weights and chapter 3's layout out, in one kernel.
//!
//! | kernel | grid | what |
//! |---|---|---|
//! | `one_launch_r{1,4,16}_e{W}` | (⌈E / 2⌉, ⌈T / R⌉), 256 threads | chapter 5's tiny GEMM per block; the last block of a row group routes it; the last of those sorts every pair |
//!
//! R is the smallest of 1, 4 and 16 that holds min(T, 16) rows; W the narrowest of 128, 256,
//! 288, 320, 384 and 512 that holds E.

use ch01_router::chain::{expect_bias, expect_len, BiasOwner, DeviceRouterError, GateShape};
use ch01_router::config::{RouterConfig, Scoring};
use ch03_align::layout::{capacity, max_tiles};
use ch05_fused_router::tiny_gemm;
use ch08_routing_stage::stage::{check_stage, download_stage, StageBuffers, StageOutput};
use ch08_routing_stage::StageError;
use half::bf16;
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

/// `kernels/ch09_one_launch.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch09_one_launch");

/// The launch geometry and limits, as `kernels/ch09_one_launch.cu` and the headers it includes
/// define them.
pub mod geometry {
    moe_kernels::kernel_constants!("ch09_one_launch");
}
use geometry::*;

/// The block heights the kernel is compiled for (rows of one row group).
pub const HEIGHTS: [usize; 3] = [1, 4, 16];
/// The row widths (experts per row, at most).
pub const WIDTHS: [usize; 6] = [128, 256, 288, 320, 384, 512];

/// The block height for `rows` rows: the smallest that holds min(rows, 16).
pub fn block_rows(rows: usize) -> usize {
    let want = rows.clamp(1, 16);
    *HEIGHTS
        .iter()
        .find(|&&h| h >= want)
        .expect("16 is a height")
}

/// The entry point for `rows` rows of `experts` experts (None past 512 experts).
pub fn kernel_for(rows: usize, experts: usize) -> Option<String> {
    let w = WIDTHS.iter().find(|&&w| w >= experts)?;
    Some(format!("one_launch_r{}_e{w}", block_rows(rows)))
}

/// The one-launch router for one shape on one device: the kernel loaded, the logits' scratch and
/// the two tickets allocated (zero, and left zero by every call), so [`OneLaunch::enqueue`] only
/// launches.
pub struct OneLaunch {
    module: Arc<Module>,
    config: RouterConfig,
    shape: GateShape,
    block_m: usize,
    has_bias: bool,
    /// `[T, E]` f32: the logits of the last call
    logits: DeviceBuffer<f32>,
    /// `[row groups]`: the blocks of each row group that finished their logits
    group_tickets: DeviceBuffer<u32>,
    /// `[1]`: the row groups that finished routing
    grid_ticket: DeviceBuffer<u32>,
}

impl OneLaunch {
    /// Checks the shape (chapter 8's checks, and chapter 5's tiny GEMM's: H a multiple of 8),
    /// loads the kernel and allocates the scratch.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: GateShape,
        block_m: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, StageError> {
        check_stage(config, shape.rows, shape.experts, block_m, bias)?;
        tiny_gemm::check_hidden(shape.hidden)?;
        let groups = shape.rows.div_ceil(block_rows(shape.rows)).max(1);
        Ok(OneLaunch {
            module: device.load(&KERNELS)?,
            config: config.clone(),
            shape,
            block_m,
            has_bias: bias.is_some(),
            logits: device.alloc(shape.rows * shape.experts)?,
            group_tickets: device.zeros(groups)?,
            grid_ticket: device.zeros(1)?,
        })
    }

    /// The kernel one call launches (none for an empty batch).
    pub fn kernel(&self) -> Option<String> {
        match self.shape.rows {
            0 => None,
            r => kernel_for(r, self.shape.experts),
        }
    }

    /// Launches per call: 1 (0 for an empty batch).
    pub fn launches(&self) -> usize {
        usize::from(self.shape.rows > 0)
    }

    /// The `[T, E]` f32 logits of the last call: the tests compare them with chapter 5's.
    pub fn logits(&self) -> &DeviceBuffer<f32> {
        &self.logits
    }

    /// Output buffers of this router's sizes (chapter 8's [`StageBuffers::alloc`]).
    pub fn alloc_outputs(&self, device: &'static Device) -> Result<StageBuffers, StageError> {
        let (p, e) = (self.shape.rows * self.config.k, self.shape.experts);
        StageBuffers::alloc(device, p, e, self.block_m)
    }

    fn check(
        &self,
        hidden: &DeviceBuffer<bf16>,
        gate: &DeviceBuffer<bf16>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &StageBuffers,
    ) -> Result<(), DeviceRouterError> {
        let GateShape {
            rows,
            hidden: h,
            experts: e,
        } = self.shape;
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("gate weight [E, H]", gate.len(), e * h)?;
        out.check(rows * self.config.k, e, self.block_m)?;
        expect_bias(self.has_bias, bias, e, BiasOwner::Router)
    }

    // ANCHOR: enqueue
    /// Queues the one launch: `hidden [T, H]` and `gate [E, H]` bf16 and the bias in, `out` out.
    /// An empty batch launches nothing and writes nothing.
    pub fn enqueue(
        &self,
        hidden: &DeviceBuffer<bf16>,
        gate: &DeviceBuffer<bf16>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &StageBuffers,
    ) -> Result<(), StageError> {
        self.check(hidden, gate, bias, out)?;
        let Some(kernel) = self.kernel() else {
            return Ok(());
        };
        let c = &self.config;
        let GateShape {
            rows,
            hidden: h,
            experts: e,
        } = self.shape;
        let (p, bm) = (rows * c.k, self.block_m);
        let scoring = match c.scoring {
            Scoring::Softmax => FR_SCORING_SOFTMAX,
            Scoring::Sigmoid => FR_SCORING_SIGMOID,
            Scoring::SqrtSoftplus => FR_SCORING_SQRT_SOFTPLUS,
        } as i32;
        let (n_group, topk_group) = c.grouping.map_or((0, 0), |g| (g.n_group, g.topk_group));
        let height = block_rows(rows);
        let grid = (e.div_ceil(TINY_EXPERTS_PER_BLOCK), rows.div_ceil(height));
        let mut cfg = LaunchConfig::blocks(grid.0 as u32, ONE_THREADS as u32);
        cfg.grid.1 = grid.1 as u32;
        let bias = bias.map_or(KernelArg::Ptr(0), KernelArg::from);
        self.module.launch(
            &kernel,
            cfg,
            &args![
                hidden,
                gate,
                bias,
                rows as i32,
                h as i32,
                e as i32,
                c.k as i32,
                scoring,
                n_group as i32,
                topk_group as i32,
                i32::from(c.renormalize),
                c.routed_scaling,
                bm as i32,
                capacity(p, e, bm) as i32,
                max_tiles(p, e, bm) as i32,
                &self.logits,
                &self.group_tickets,
                &self.grid_ticket,
                &out.ids,
                &out.weights,
                &out.sorted_ids,
                &out.expert_ids,
                &out.num_post,
                &out.counts,
                &out.offsets
            ],
        )?;
        Ok(())
    }
    // ANCHOR_END: enqueue
}

/// Host in, host out: `hidden [rows, H]` and `gate [E, H]` rounded to bf16 (as an engine holds
/// them), the bias; returns everything the kernel wrote and the logits it computed.
#[allow(clippy::too_many_arguments)]
pub fn route_one_launch(
    device: &'static Device,
    config: &RouterConfig,
    shape: GateShape,
    block_m: usize,
    hidden: &[f32],
    gate: &[f32],
    bias: Option<&[f32]>,
) -> Result<(StageOutput, Vec<f32>), StageError> {
    let r = OneLaunch::new(device, config, shape, block_m, bias)?;
    expect_len("hidden [T, H]", hidden.len(), shape.rows * shape.hidden)?;
    expect_len(
        "gate weight [E, H]",
        gate.len(),
        shape.experts * shape.hidden,
    )?;
    if shape.rows == 0 {
        return Ok((StageOutput::empty(config.k, shape.experts), Vec::new()));
    }
    let up = |v: &[f32]| {
        let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
        device.upload(&b)
    };
    let (x, w) = (up(hidden)?, up(gate)?);
    let b = bias.map(|b| device.upload(b)).transpose()?;
    let out = r.alloc_outputs(device)?;
    r.enqueue(&x, &w, b.as_ref(), &out)?;
    let logits = r.logits.to_vec()?;
    Ok((download_stage(shape.rows, config.k, &out)?, logits))
}
