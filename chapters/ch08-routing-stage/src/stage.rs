//! The routing stage on a device (`kernels/ch08_routing_stage.cu`): fp32 logits `[T, E]` and
//! the bias in; ids and weights `[T, k]`, chapter 3's layout, each expert's count and first slot
//! out.
//!
//! | arrangement | kernels | launches |
//! |---|---|---|
//! | [`Arrangement::OneBlock`] (up to [`ONE_BLOCK_MAX_ROWS`] rows and 512 pairs) | `stage_one_block_e{W}` (16 warps), or from 17 rows `stage_one_block_wide_e{W}` (32 warps) | 1 |
//! | [`Arrangement::TwoLaunches`] | `stage_route_count_e{W}`, then `stage_scatter` | 2 |
//!
//! W in 128, 256, 288, 320, 384, 512: the narrowest row width that holds E, as chapter 5's.

use crate::error::StageError;
use ch01_router::chain::{download, expect_bias, expect_len, BiasOwner, DeviceRouterError};
use ch01_router::config::{RouterConfig, Scoring};
use ch01_router::routing::Routing;
use ch03_align::device::align_on_device;
use ch03_align::layout::{capacity, check, max_tiles, Aligned};
use ch03_align::AlignError;
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

/// `kernels/ch08_routing_stage.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch08_routing_stage");

/// The launch geometry and limits, as `kernels/ch08_routing_stage.cu` and the chapter 5 and
/// chapter 3 headers it includes define them.
pub mod geometry {
    moe_kernels::kernel_constants!("ch08_routing_stage");
}
use geometry::*;

/// The row widths the kernels are compiled for, with their two entry points.
const WIDTHS: [(usize, [&str; 3]); 6] = {
    macro_rules! width {
        ($w:literal) => {
            (
                $w,
                [
                    concat!("stage_one_block_e", $w),
                    concat!("stage_one_block_wide_e", $w),
                    concat!("stage_route_count_e", $w),
                ],
            )
        };
    }
    [
        width!(128),
        width!(256),
        width!(288),
        width!(320),
        width!(384),
        width!(512),
    ]
};

/// The entry points for `experts` per row: the one block (16 warps), the wide one block (32
/// warps) and the two launches' first.
fn width_for(experts: usize) -> Option<[&'static str; 3]> {
    WIDTHS
        .iter()
        .find(|(w, _)| *w >= experts)
        .map(|&(_, names)| names)
}

/// Whether the one block for `rows` rows is the wide one: 16 warps up to 16 rows, then 32, so
/// that a warp routes one row up to 32 rows (past that, two or more in turn).
fn one_block_is_wide(rows: usize) -> bool {
    rows > STAGE_WARPS
}

// ANCHOR: arrangement
/// How the stage spreads a batch over the GPU. Both give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrangement {
    /// One block routes every row, a warp per row (16 warps up to 16 rows, then 32; rows 32
    /// apart in turn past 32), and its first 16 warps sort the pairs in shared memory: one
    /// launch, the ids never in memory before they are final. Up to 512 pairs (one per thread).
    OneBlock,
    /// A block per 16 rows routes and counts; then a block per chunk of rows sorts: two
    /// launches, as many warps routing as there are rows.
    TwoLaunches,
}

/// Up to how many rows [`Arrangement::OneBlock`] is the default: as many as the wide block has
/// warps, so that no warp routes a second row. The bench times both arrangements at every row
/// count; `ch08.csv` has the one block ahead of the two launches up to this count.
pub const ONE_BLOCK_MAX_ROWS: usize = STAGE_WIDE_WARPS;

/// The arrangement [`RoutingStage::new`] picks: one block up to [`ONE_BLOCK_MAX_ROWS`] rows (and
/// at most 512 pairs), else two launches.
pub fn arrangement_for(rows: usize, k: usize) -> Arrangement {
    if rows <= ONE_BLOCK_MAX_ROWS && rows * k <= STAGE_ONE_BLOCK_MAX_PAIRS {
        Arrangement::OneBlock
    } else {
        Arrangement::TwoLaunches
    }
}
// ANCHOR_END: arrangement

/// The two launches' split of `rows` rows: blocks of [`STAGE_ROWS_PER_BLOCK`] rows, grouped into
/// at most [`STAGE_MAX_CHUNKS`] chunks of whole blocks (every block of the second launch reads
/// every chunk's counts, so more chunks cost each of them more loads). Returns (blocks, blocks
/// per chunk, chunks).
pub fn split(rows: usize) -> (usize, usize, usize) {
    let blocks = rows.div_ceil(STAGE_ROWS_PER_BLOCK).max(1);
    let per_chunk = blocks.div_ceil(STAGE_MAX_CHUNKS);
    (blocks, per_chunk, blocks.div_ceil(per_chunk))
}

/// The outputs on the device. `sorted_ids`, `expert_ids` and `num_post` are chapter 3's
/// [`AlignBuffers`](ch03_align::device::AlignBuffers), as chapter 4's experts read them.
pub struct StageBuffers {
    /// `[T, k]` i32
    pub ids: DeviceBuffer<i32>,
    /// `[T, k]` f32
    pub weights: DeviceBuffer<f32>,
    /// `[capacity]` i32
    pub sorted_ids: DeviceBuffer<i32>,
    /// `[max_tiles]` i32
    pub expert_ids: DeviceBuffer<i32>,
    /// `[1]` i32
    pub num_post: DeviceBuffer<i32>,
    /// `[E]` i32: each expert's pairs
    pub counts: DeviceBuffer<i32>,
    /// `[E + 1]` i32: each expert's first slot, then the padded total
    pub offsets: DeviceBuffer<i32>,
}

impl StageBuffers {
    /// Buffers for `pairs` pairs of `experts` experts at `block_m`, filled with −2: a value no
    /// kernel writes (they write ids, pair indices, the placeholder `P`, −1 and counts), so a slot
    /// one forgot shows.
    pub fn alloc(
        device: &'static Device,
        pairs: usize,
        experts: usize,
        block_m: usize,
    ) -> Result<Self, StageError> {
        let (p, e, bm) = (pairs, experts, block_m);
        let filled = |n: usize| device.upload(&vec![-2i32; n]);
        Ok(StageBuffers {
            ids: filled(p)?,
            weights: device.upload(&vec![-2.0f32; p])?,
            sorted_ids: filled(capacity(p, e, bm))?,
            expert_ids: filled(max_tiles(p, e, bm))?,
            num_post: filled(1)?,
            counts: filled(e)?,
            offsets: filled(e + 1)?,
        })
    }

    /// Checks every buffer's length for `pairs` pairs of `experts` experts at `block_m`.
    pub fn check(
        &self,
        pairs: usize,
        experts: usize,
        block_m: usize,
    ) -> Result<(), DeviceRouterError> {
        let (p, e, bm) = (pairs, experts, block_m);
        for (what, got, expected) in [
            ("ids [T, k]", self.ids.len(), p),
            ("weights [T, k]", self.weights.len(), p),
            ("sorted_ids", self.sorted_ids.len(), capacity(p, e, bm)),
            ("expert_ids", self.expert_ids.len(), max_tiles(p, e, bm)),
            ("num_tokens_post_padded", self.num_post.len(), 1),
            ("counts [E]", self.counts.len(), e),
            ("offsets [E + 1]", self.offsets.len(), e + 1),
        ] {
            expect_len(what, got, expected)?;
        }
        Ok(())
    }
}

/// The two launches' scratch: per-chunk counts and the ticket the last block takes. Both are zero
/// between calls (allocated zeroed; the last block of `stage_scatter` zeroes them again).
struct Scratch {
    blocks: usize,
    blocks_per_chunk: usize,
    chunks: usize,
    chunk_counts: DeviceBuffer<i32>,
    ticket: DeviceBuffer<i32>,
}

/// The routing stage for one shape (rows, experts, k, BLOCK_M) on one device: kernels loaded and
/// scratch allocated up front, so [`RoutingStage::enqueue`] only launches.
pub struct RoutingStage {
    module: Arc<Module>,
    config: RouterConfig,
    rows: usize,
    experts: usize,
    block_m: usize,
    has_bias: bool,
    arrangement: Arrangement,
    scratch: Option<Scratch>,
}

// ANCHOR: limits
/// Checks `config`, the bias, E and BLOCK_M: chapter 5's router limits (chapter 1's rules, E ≤
/// 1024, k ≤ 32, 32 groups), chapter 3's BLOCK_M rule, and E ≤ [`STAGE_MAX_EXPERTS`] (one
/// expert per thread in the scan).
pub fn check_stage(
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    block_m: usize,
    bias: Option<&[f32]>,
) -> Result<(), StageError> {
    ch05_fused_router::fused::check_limits(config, experts, bias)?;
    check(&[], experts, block_m)?;
    if experts > STAGE_MAX_EXPERTS {
        return Err(DeviceRouterError::Limit {
            what: "experts (the stage's scan keeps one per thread)",
            limit: STAGE_MAX_EXPERTS,
            got: experts,
        }
        .into());
    }
    let pairs = rows.checked_mul(config.k).ok_or(AlignError::Limit {
        what: "pairs (T·k)",
        limit: usize::MAX,
        got: rows,
    })?;
    let limit = (i32::MAX as usize) / 2;
    if capacity(pairs, experts, block_m) > limit {
        return Err(AlignError::Limit {
            what: "padded slots",
            limit,
            got: capacity(pairs, experts, block_m),
        }
        .into());
    }
    Ok(())
}
// ANCHOR_END: limits

impl RoutingStage {
    /// Checks the shape ([`check_stage`]), loads the kernels and allocates the scratch, in the
    /// arrangement [`arrangement_for`] picks.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        rows: usize,
        experts: usize,
        block_m: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, StageError> {
        let a = arrangement_for(rows, config.k);
        Self::with_arrangement(device, config, rows, experts, block_m, bias, a)
    }

    /// As [`RoutingStage::new`], in the arrangement given: [`Arrangement::OneBlock`] past 512
    /// pairs is a [`DeviceRouterError::Limit`].
    pub fn with_arrangement(
        device: &'static Device,
        config: &RouterConfig,
        rows: usize,
        experts: usize,
        block_m: usize,
        bias: Option<&[f32]>,
        arrangement: Arrangement,
    ) -> Result<Self, StageError> {
        check_stage(config, rows, experts, block_m, bias)?;
        let pairs = rows * config.k;
        if arrangement == Arrangement::OneBlock && pairs > STAGE_ONE_BLOCK_MAX_PAIRS {
            return Err(DeviceRouterError::Limit {
                what: "pairs (T·k) of the one-block arrangement (one per thread)",
                limit: STAGE_ONE_BLOCK_MAX_PAIRS,
                got: pairs,
            }
            .into());
        }
        let scratch = match arrangement {
            Arrangement::OneBlock => None,
            Arrangement::TwoLaunches => {
                let (blocks, blocks_per_chunk, chunks) = split(rows);
                Some(Scratch {
                    blocks,
                    blocks_per_chunk,
                    chunks,
                    chunk_counts: device.zeros(chunks * experts)?,
                    ticket: device.zeros(1)?,
                })
            }
        };
        Ok(RoutingStage {
            module: device.load(&KERNELS)?,
            config: config.clone(),
            rows,
            experts,
            block_m,
            has_bias: bias.is_some(),
            arrangement,
            scratch,
        })
    }

    /// The arrangement this stage runs.
    pub fn arrangement(&self) -> Arrangement {
        self.arrangement
    }

    /// The kernels one call launches, in order (none for an empty batch).
    pub fn kernel_names(&self) -> Vec<&'static str> {
        if self.rows == 0 {
            return Vec::new();
        }
        let [one, wide, route] = width_for(self.experts).expect("experts checked in check_stage");
        match self.arrangement {
            Arrangement::OneBlock if one_block_is_wide(self.rows) => vec![wide],
            Arrangement::OneBlock => vec![one],
            Arrangement::TwoLaunches => vec![route, "stage_scatter"],
        }
    }

    /// Launches per call: 1 or 2 (0 for an empty batch).
    pub fn launches(&self) -> usize {
        self.kernel_names().len()
    }

    /// Output buffers of this stage's sizes ([`StageBuffers::alloc`]).
    pub fn alloc_outputs(&self, device: &'static Device) -> Result<StageBuffers, StageError> {
        StageBuffers::alloc(
            device,
            self.rows * self.config.k,
            self.experts,
            self.block_m,
        )
    }

    fn check_buffers(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &StageBuffers,
    ) -> Result<(), DeviceRouterError> {
        expect_len("logits [T, E]", logits.len(), self.rows * self.experts)?;
        out.check(self.rows * self.config.k, self.experts, self.block_m)?;
        expect_bias(self.has_bias, bias, self.experts, BiasOwner::Stage)
    }

    // ANCHOR: enqueue
    /// Queues the stage on `logits [T, E]` f32 and the bias (only launches: no allocation, copy
    /// or wait). An empty batch launches nothing and writes nothing. Every launch is a
    /// programmatic dependent (the first of the kernel that wrote the logits, the scatter of the
    /// route-and-count launch), as chapter 5's router is of its GEMM: each kernel waits before it
    /// reads or writes anything.
    pub fn enqueue(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &StageBuffers,
    ) -> Result<(), StageError> {
        self.check_buffers(logits, bias, out)?;
        if self.rows == 0 {
            return Ok(());
        }
        let c = &self.config;
        let (p, e, bm) = (self.rows * c.k, self.experts, self.block_m);
        let scoring = match c.scoring {
            Scoring::Softmax => FR_SCORING_SOFTMAX,
            Scoring::Sigmoid => FR_SCORING_SIGMOID,
            Scoring::SqrtSoftplus => FR_SCORING_SQRT_SOFTPLUS,
        } as i32;
        let (n_group, topk_group) = c.grouping.map_or((0, 0), |g| (g.n_group, g.topk_group));
        let bias = bias.map_or(KernelArg::Ptr(0), KernelArg::from);
        let (cap, tiles) = (capacity(p, e, bm) as i32, max_tiles(p, e, bm) as i32);
        // The router's arguments, as chapter 5's fused_router_e{W} takes them.
        let mut a = args![
            logits,
            bias,
            self.rows as i32,
            e as i32,
            c.k as i32,
            scoring,
            n_group as i32,
            topk_group as i32,
            i32::from(c.renormalize),
            c.routed_scaling
        ]
        .to_vec();
        let names = self.kernel_names();
        let threads = STAGE_THREADS as u32;
        match &self.scratch {
            None => {
                a.extend(args![
                    bm as i32,
                    cap,
                    tiles,
                    &out.ids,
                    &out.weights,
                    &out.sorted_ids,
                    &out.expert_ids,
                    &out.num_post,
                    &out.counts,
                    &out.offsets
                ]);
                let threads = if one_block_is_wide(self.rows) {
                    STAGE_WIDE_THREADS
                } else {
                    STAGE_THREADS
                } as u32;
                self.module
                    .launch(names[0], LaunchConfig::blocks(1, threads).dependent(), &a)?;
            }
            Some(s) => {
                a.extend(args![
                    s.blocks_per_chunk as i32,
                    cap,
                    tiles,
                    &out.ids,
                    &out.weights,
                    &out.sorted_ids,
                    &out.expert_ids,
                    &s.chunk_counts
                ]);
                self.module.launch(
                    names[0],
                    LaunchConfig::blocks(s.blocks as u32, threads).dependent(),
                    &a,
                )?;
                let per_chunk = (s.blocks_per_chunk * STAGE_ROWS_PER_BLOCK * c.k) as i32;
                self.module.launch(
                    names[1],
                    LaunchConfig::blocks(s.chunks as u32, threads).dependent(),
                    &args![
                        &out.ids,
                        p as i32,
                        e as i32,
                        bm as i32,
                        per_chunk,
                        &s.chunk_counts,
                        &s.ticket,
                        &out.sorted_ids,
                        &out.expert_ids,
                        &out.num_post,
                        &out.counts,
                        &out.offsets
                    ],
                )?;
            }
        }
        Ok(())
    }
    // ANCHOR_END: enqueue
}

/// Everything the stage writes, brought back to the host.
#[derive(Clone, Debug, PartialEq)]
pub struct StageOutput {
    pub routing: Routing,
    pub aligned: Aligned,
    /// `[E]`: each expert's pairs
    pub counts: Vec<i32>,
    /// `[E + 1]`: each expert's first slot, then the padded total
    pub offsets: Vec<i32>,
}

impl StageOutput {
    /// What an empty batch gives (nothing is launched, nothing written): the empty layout, every
    /// count and offset 0.
    pub fn empty(k: usize, experts: usize) -> Self {
        StageOutput {
            routing: Routing::empty(k),
            aligned: Aligned {
                sorted_ids: Vec::new(),
                expert_ids: Vec::new(),
                num_tokens_post_padded: 0,
            },
            counts: vec![0; experts],
            offsets: vec![0; experts + 1],
        }
    }
}

/// Brings a call's outputs back to the host.
pub fn download_stage(
    rows: usize,
    k: usize,
    out: &StageBuffers,
) -> Result<StageOutput, StageError> {
    Ok(StageOutput {
        routing: download(rows, k, &out.ids, &out.weights)?,
        aligned: Aligned {
            sorted_ids: out.sorted_ids.to_vec().map_err(DeviceRouterError::from)?,
            expert_ids: out.expert_ids.to_vec().map_err(DeviceRouterError::from)?,
            num_tokens_post_padded: out.num_post.to_vec().map_err(DeviceRouterError::from)?[0],
        },
        counts: out.counts.to_vec().map_err(DeviceRouterError::from)?,
        offsets: out.offsets.to_vec().map_err(DeviceRouterError::from)?,
    })
}

/// Host in, host out: uploads `logits [rows, experts]` and the bias, runs the stage in the
/// arrangement [`arrangement_for`] picks and brings everything back.
pub fn route_stage(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    block_m: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
) -> Result<StageOutput, StageError> {
    let a = arrangement_for(rows, config.k);
    route_stage_as(device, config, rows, experts, block_m, logits, bias, a)
}

/// As [`route_stage`], in the arrangement given.
#[allow(clippy::too_many_arguments)]
pub fn route_stage_as(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    block_m: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
    arrangement: Arrangement,
) -> Result<StageOutput, StageError> {
    let stage =
        RoutingStage::with_arrangement(device, config, rows, experts, block_m, bias, arrangement)?;
    expect_len("logits [T, E]", logits.len(), rows * experts)?;
    if rows == 0 {
        return Ok(StageOutput::empty(config.k, experts));
    }
    let out = stage.alloc_outputs(device)?;
    let logits = device.upload(logits).map_err(DeviceRouterError::from)?;
    let bias = bias
        .map(|b| device.upload(b))
        .transpose()
        .map_err(DeviceRouterError::from)?;
    stage.enqueue(&logits, bias.as_ref(), &out)?;
    download_stage(rows, config.k, &out)
}

// ANCHOR: pair
/// What the stage replaces, host in and host out: chapter 5's fused router on the logits, then
/// chapter 3's align on its ids. The tests' oracle for the stage, bit for bit.
pub fn pair_then_align(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    block_m: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
) -> Result<(Routing, Aligned), StageError> {
    let routing =
        ch05_fused_router::route_logits_fused(device, config, rows, experts, logits, bias)?;
    let ids: Vec<i64> = routing.ids.iter().map(|&i| i as i64).collect();
    let aligned = align_on_device(device, &ids, experts, block_m)?;
    Ok((routing, aligned))
}
// ANCHOR_END: pair

/// Each expert's count and first slot (the prefix sum of the counts padded to BLOCK_M, then the
/// total), computed on the host from a routing: what the stage's `counts` and `offsets` must hold.
pub fn counts_and_offsets(
    routing: &Routing,
    experts: usize,
    block_m: usize,
) -> (Vec<i32>, Vec<i32>) {
    let mut counts = vec![0i32; experts];
    for &e in &routing.ids {
        counts[e as usize] += 1;
    }
    let mut offsets = vec![0i32; experts + 1];
    for e in 0..experts {
        offsets[e + 1] =
            offsets[e] + (counts[e] as usize).div_ceil(block_m) as i32 * block_m as i32;
    }
    (counts, offsets)
}
