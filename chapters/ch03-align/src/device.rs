//! The kernel on a device: one launch up to `ALIGN_ONE_BLOCK_MAX_PAIRS` pairs, two above.

use crate::error::AlignError;
use crate::layout::{capacity, check, max_tiles, Aligned};
use moe_kernels::{args, Device, DeviceBuffer, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

/// `kernels/ch03_align_block_size.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch03_align_block_size");

/// The launch-geometry constants of `ch03_align_block_size.cu`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch03_align_block_size");
}
use geometry::{
    ALIGN_MAX_BLOCKS, ALIGN_MAX_EXPERTS, ALIGN_MIN_PAIRS_PER_BLOCK, ALIGN_ONE_BLOCK_MAX_PAIRS,
    ALIGN_THREADS,
};

/// The order of the pairs inside an expert's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Ascending pair order: the chapter's kernel, the same bits on every run.
    Stable,
    /// The order in which threads reach an atomic cursor, as vLLM and SGLang scatter: the same
    /// pairs in every run, not always in the same order. Kept only to measure what
    /// [`Order::Stable`] costs.
    Arrival,
}

/// The outputs on the device, sized by [`capacity`] and [`max_tiles`].
pub struct AlignBuffers {
    pub sorted_ids: DeviceBuffer<i32>,
    pub expert_ids: DeviceBuffer<i32>,
    pub num_post: DeviceBuffer<i32>,
}

/// The bookkeeping for one shape (pairs, experts, BLOCK_M) on one device, with its scratch
/// buffer allocated up front, so that [`DeviceAlign::enqueue`] only launches.
pub struct DeviceAlign {
    module: Arc<Module>,
    pairs: usize,
    experts: usize,
    block_m: usize,
    order: Order,
    /// The two-launch path's per-block counts [B, E].
    scratch: Option<Scratch>,
}

struct Scratch {
    blocks: usize,
    per_block: usize,
    blk_counts: DeviceBuffer<i32>,
}

/// The two-launch path's split of `pairs` into blocks: at least `ALIGN_MIN_PAIRS_PER_BLOCK`
/// pairs per block and at most `ALIGN_MAX_BLOCKS` blocks (every block reads all blocks' counts,
/// so more blocks cost each of them more loads). Returns (blocks, pairs per block).
pub fn split(pairs: usize) -> (usize, usize) {
    let per_block = pairs
        .div_ceil(ALIGN_MAX_BLOCKS)
        .max(ALIGN_MIN_PAIRS_PER_BLOCK)
        .next_multiple_of(ALIGN_THREADS);
    (pairs.div_ceil(per_block), per_block)
}

impl DeviceAlign {
    /// Checks the shape and allocates what the two-launch path needs.
    pub fn new(
        device: &'static Device,
        pairs: usize,
        experts: usize,
        block_m: usize,
    ) -> Result<Self, AlignError> {
        Self::with_order(device, pairs, experts, block_m, Order::Stable)
    }

    /// [`DeviceAlign::new`] with the order of the pairs inside a run chosen.
    pub fn with_order(
        device: &'static Device,
        pairs: usize,
        experts: usize,
        block_m: usize,
        order: Order,
    ) -> Result<Self, AlignError> {
        check(&[], experts, block_m)?;
        if experts > ALIGN_MAX_EXPERTS {
            return Err(AlignError::Limit {
                what: "experts",
                limit: ALIGN_MAX_EXPERTS,
                got: experts,
            });
        }
        let limit = (i32::MAX as usize) / 2;
        if capacity(pairs, experts, block_m) > limit {
            return Err(AlignError::Limit {
                what: "padded slots",
                limit,
                got: capacity(pairs, experts, block_m),
            });
        }
        let scratch = if pairs > ALIGN_ONE_BLOCK_MAX_PAIRS {
            let (blocks, per_block) = split(pairs);
            Some(Scratch {
                blocks,
                per_block,
                blk_counts: device.alloc(blocks * experts)?,
            })
        } else {
            None
        };
        Ok(DeviceAlign {
            module: device.load(&KERNELS)?,
            pairs,
            experts,
            block_m,
            order,
            scratch,
        })
    }

    /// Output buffers of the right sizes, filled with −2: a value the kernel never writes (it
    /// writes pair indices, the placeholder `P`, expert ids and −1), so a slot it forgot shows.
    pub fn alloc_outputs(&self, device: &'static Device) -> Result<AlignBuffers, AlignError> {
        let filled = |n: usize| device.upload(&vec![-2i32; n]);
        Ok(AlignBuffers {
            sorted_ids: filled(capacity(self.pairs, self.experts, self.block_m))?,
            expert_ids: filled(max_tiles(self.pairs, self.experts, self.block_m))?,
            num_post: filled(1)?,
        })
    }

    /// Launches per call: 1 up to `ALIGN_ONE_BLOCK_MAX_PAIRS` pairs, else 2.
    pub fn launches(&self) -> usize {
        if self.scratch.is_some() {
            2
        } else {
            1
        }
    }

    // ANCHOR: enqueue
    /// Queues the bookkeeping of `ids` `[P]` (only launches). Ids outside `0..E` are skipped by the
    /// kernels, never written out of bounds; [`align_on_device`] refuses them before.
    pub fn enqueue(&self, ids: &DeviceBuffer<i32>, out: &AlignBuffers) -> Result<(), AlignError> {
        let (p, e, bm) = (self.pairs, self.experts, self.block_m);
        let (cap, tiles) = (capacity(p, e, bm), max_tiles(p, e, bm));
        for (what, got, expected) in [
            ("ids [T·k]", ids.len(), p),
            ("sorted_ids", out.sorted_ids.len(), cap),
            ("expert_ids", out.expert_ids.len(), tiles),
            ("num_tokens_post_padded", out.num_post.len(), 1),
        ] {
            if got != expected {
                return Err(AlignError::Shape {
                    what,
                    expected,
                    got,
                });
            }
        }
        let (pi, ei, bi, ci, ti) = (p as i32, e as i32, bm as i32, cap as i32, tiles as i32);
        let threads = ALIGN_THREADS as u32;
        let arrival = self.order == Order::Arrival;
        // The one-block kernel needs a thread per pair and per expert, in whole warps.
        let one_threads = (p.max(e).div_ceil(32) * 32) as u32;
        let one = if arrival {
            "align_one_block_arrival"
        } else {
            "align_one_block"
        };
        match &self.scratch {
            None => self.module.launch(
                one,
                LaunchConfig::blocks(1, one_threads),
                &args![
                    ids,
                    pi,
                    ei,
                    bi,
                    ci,
                    ti,
                    &out.sorted_ids,
                    &out.expert_ids,
                    &out.num_post
                ],
            )?,
            Some(s) => {
                let blocks = LaunchConfig::blocks(s.blocks as u32, threads);
                let per_block = s.per_block as i32;
                self.module.launch(
                    "align_count",
                    blocks,
                    &args![
                        ids,
                        pi,
                        ei,
                        per_block,
                        ci,
                        ti,
                        &s.blk_counts,
                        &out.sorted_ids,
                        &out.expert_ids
                    ],
                )?;
                self.module.launch(
                    if arrival {
                        "align_scatter_arrival"
                    } else {
                        "align_scatter"
                    },
                    blocks,
                    &args![
                        ids,
                        pi,
                        ei,
                        bi,
                        per_block,
                        &s.blk_counts,
                        &out.sorted_ids,
                        &out.expert_ids,
                        &out.num_post
                    ],
                )?;
            }
        }
        Ok(())
    }
    // ANCHOR_END: enqueue
}

/// Host in, host out: checks `ids` (a typed error for any id outside `0..experts`), runs the
/// kernel on `device` and brings the three outputs back. An empty batch returns empty outputs.
pub fn align_on_device(
    device: &'static Device,
    ids: &[i64],
    experts: usize,
    block_m: usize,
) -> Result<Aligned, AlignError> {
    check(ids, experts, block_m)?;
    // In range after the check, so every id fits an i32.
    let ids32: Vec<i32> = ids.iter().map(|&e| e as i32).collect();
    align_unchecked_on_device(device, &ids32, experts, block_m)
}

/// Runs the kernel on raw ids, unchecked: for the tests that feed it garbage on purpose (the
/// kernel must skip ids outside `0..experts` and stay in bounds).
pub fn align_unchecked_on_device(
    device: &'static Device,
    ids: &[i32],
    experts: usize,
    block_m: usize,
) -> Result<Aligned, AlignError> {
    run(device, ids, experts, block_m, Order::Stable)
}

/// [`align_on_device`] with the pairs of a run in [`Order::Arrival`]: what an atomic-cursor
/// scatter gives, for the tests and the bench that compare it with the stable order.
pub fn align_arrival_on_device(
    device: &'static Device,
    ids: &[i64],
    experts: usize,
    block_m: usize,
) -> Result<Aligned, AlignError> {
    check(ids, experts, block_m)?;
    let ids32: Vec<i32> = ids.iter().map(|&e| e as i32).collect();
    run(device, &ids32, experts, block_m, Order::Arrival)
}

fn run(
    device: &'static Device,
    ids: &[i32],
    experts: usize,
    block_m: usize,
    order: Order,
) -> Result<Aligned, AlignError> {
    let a = DeviceAlign::with_order(device, ids.len(), experts, block_m, order)?;
    let out = a.alloc_outputs(device)?;
    if ids.is_empty() {
        return Ok(Aligned {
            sorted_ids: Vec::new(),
            expert_ids: Vec::new(),
            num_tokens_post_padded: 0,
        });
    }
    let buf = device.upload(ids)?;
    a.enqueue(&buf, &out)?;
    Ok(Aligned {
        sorted_ids: out.sorted_ids.to_vec()?,
        expert_ids: out.expert_ids.to_vec()?,
        num_tokens_post_padded: out.num_post.to_vec()?[0],
    })
}
