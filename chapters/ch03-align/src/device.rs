//! The kernel on a device: one launch up to `ALIGN_ONE_BLOCK_MAX_PAIRS` pairs, three above.

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
    ALIGN_MAX_EXPERTS, ALIGN_ONE_BLOCK_MAX_PAIRS, ALIGN_PAIRS_PER_BLOCK, ALIGN_THREADS,
};

/// The outputs on the device, sized by [`capacity`] and [`max_tiles`].
pub struct AlignBuffers {
    pub sorted_ids: DeviceBuffer<i32>,
    pub expert_ids: DeviceBuffer<i32>,
    pub num_post: DeviceBuffer<i32>,
}

/// The bookkeeping for one shape (pairs, experts, BLOCK_M) on one device, with its scratch
/// buffers allocated up front, so that [`DeviceAlign::enqueue`] only launches.
pub struct DeviceAlign {
    module: Arc<Module>,
    pairs: usize,
    experts: usize,
    block_m: usize,
    /// The multi-block path's scratch: per-block counts and first slots [B, E], per-expert
    /// counts and padded ends [E].
    scratch: Option<Scratch>,
}

struct Scratch {
    blocks: usize,
    blk_counts: DeviceBuffer<i32>,
    blk_first: DeviceBuffer<i32>,
    exp_count: DeviceBuffer<i32>,
    exp_end: DeviceBuffer<i32>,
}

impl DeviceAlign {
    /// Checks the shape and allocates what the multi-block path needs.
    pub fn new(
        device: &'static Device,
        pairs: usize,
        experts: usize,
        block_m: usize,
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
            let blocks = pairs.div_ceil(ALIGN_PAIRS_PER_BLOCK);
            Some(Scratch {
                blocks,
                blk_counts: device.alloc(blocks * experts)?,
                blk_first: device.alloc(blocks * experts)?,
                exp_count: device.alloc(experts)?,
                exp_end: device.alloc(experts)?,
            })
        } else {
            None
        };
        Ok(DeviceAlign {
            module: device.load(&KERNELS)?,
            pairs,
            experts,
            block_m,
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

    /// Launches per call: 1 up to `ALIGN_ONE_BLOCK_MAX_PAIRS` pairs, else 3.
    pub fn launches(&self) -> usize {
        if self.scratch.is_some() {
            3
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
        match &self.scratch {
            None => self.module.launch(
                "align_one_block",
                LaunchConfig::blocks(1, threads),
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
                self.module
                    .launch("align_count", blocks, &args![ids, pi, ei, &s.blk_counts])?;
                self.module.launch(
                    "align_scan",
                    LaunchConfig::blocks(1, threads),
                    &args![
                        &s.blk_counts,
                        s.blocks as i32,
                        ei,
                        bi,
                        &s.exp_count,
                        &s.exp_end,
                        &s.blk_first,
                        &out.num_post
                    ],
                )?;
                self.module.launch(
                    "align_scatter",
                    blocks,
                    &args![
                        ids,
                        pi,
                        ei,
                        bi,
                        ci,
                        ti,
                        &s.exp_count,
                        &s.exp_end,
                        &s.blk_first,
                        &out.sorted_ids,
                        &out.expert_ids
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
    let a = DeviceAlign::new(device, ids.len(), experts, block_m)?;
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
