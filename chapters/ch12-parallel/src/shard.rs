//! Cutting one layer's weights into the pieces each rank holds, on the host, as new
//! [`MoeWeights`]: the ranks then build chapter 4's and chapter 6's layers from them with the
//! constructors those chapters already have.

use crate::error::{check_rank, check_split, ParallelError};
use ch01_router::RouterConfig;
use ch02_grouped::{MoeConfig, MoeWeights, SharedExpert, SharedWeights};
use std::ops::Range;

// ANCHOR: tp_rows
/// One rank's slice of a packed `[2I, H]` gate|up block: gate rows `r·I/R .. (r+1)·I/R`, then
/// the same rows of up (at `I + …`). Both halves must be cut alike, since SwiGLU pairs gate
/// column c with up column c.
fn slice_w13(w13: &[f32], inter: usize, hidden: usize, part: Range<usize>) -> Vec<f32> {
    let mut v = Vec::with_capacity(2 * part.len() * hidden);
    for half in [0, inter] {
        v.extend_from_slice(&w13[(half + part.start) * hidden..(half + part.end) * hidden]);
    }
    v
}

/// One rank's slice of a `[H, I]` down projection: columns `part` of every row.
fn slice_w2(w2: &[f32], inter: usize, hidden: usize, part: Range<usize>) -> Vec<f32> {
    let mut v = Vec::with_capacity(hidden * part.len());
    for row in 0..hidden {
        v.extend_from_slice(&w2[row * inter + part.start..row * inter + part.end]);
    }
    v
}
// ANCHOR_END: tp_rows

/// The columns of an intermediate dimension of `inter` that rank `rank` of `world` holds.
fn part(inter: usize, rank: usize, world: usize) -> Range<usize> {
    let n = inter / world;
    rank * n..(rank + 1) * n
}

// ANCHOR: tp_slice
/// Tensor parallelism: rank `rank` of `world` holds columns `r·I/R .. (r+1)·I/R` of every
/// expert's intermediate dimension, and the same share of the shared expert's. The router's gate
/// and bias, and Qwen2-MoE's shared-expert gate, are whole on every rank (every rank routes
/// every token the same way). A typed error when I (or the shared expert's) does not split.
pub fn tensor_slice(
    weights: &MoeWeights,
    rank: usize,
    world: usize,
) -> Result<MoeWeights, ParallelError> {
    check_rank(rank, world)?;
    let c = &weights.config;
    let (h, i) = (c.hidden, c.intermediate);
    let local = check_split("intermediate", i, world)?;
    let shared_local = match c.shared {
        Some(s) => Some(check_split(
            "shared expert intermediate",
            s.intermediate,
            world,
        )?),
        None => None,
    };
    weights.validate()?;
    let cols = part(i, rank, world);
    let (mut w13, mut w2) = (Vec::new(), Vec::new());
    for e in 0..c.experts {
        w13.extend(slice_w13(
            &weights.w13[e * 2 * i * h..(e + 1) * 2 * i * h],
            i,
            h,
            cols.clone(),
        ));
        w2.extend(slice_w2(
            &weights.w2[e * h * i..(e + 1) * h * i],
            i,
            h,
            cols.clone(),
        ));
    }
    let shared = match (&weights.shared, c.shared) {
        (Some(sw), Some(s)) => {
            let cols = part(s.intermediate, rank, world);
            Some(SharedWeights {
                w13: slice_w13(&sw.w13, s.intermediate, h, cols.clone()),
                w2: slice_w2(&sw.w2, s.intermediate, h, cols),
                gate: sw.gate.clone(),
            })
        }
        _ => None,
    };
    Ok(MoeWeights {
        config: MoeConfig {
            intermediate: local,
            shared: c.shared.zip(shared_local).map(|(s, n)| SharedExpert {
                intermediate: n,
                ..s
            }),
            ..c.clone()
        },
        gate: weights.gate.clone(),
        bias: weights.bias.clone(),
        w13,
        w2,
        shared,
    })
}
// ANCHOR_END: tp_slice

// ANCHOR: ep_range
/// Expert parallelism: the experts rank `rank` of `world` holds, a contiguous run of E/R.
pub fn expert_range(
    experts: usize,
    rank: usize,
    world: usize,
) -> Result<Range<usize>, ParallelError> {
    check_rank(rank, world)?;
    let n = check_split("experts", experts, world)?;
    Ok(rank * n..(rank + 1) * n)
}

/// The rank that holds expert `e` when each holds `per_rank` experts.
pub fn owner(e: usize, per_rank: usize) -> usize {
    e / per_rank
}
// ANCHOR_END: ep_range

/// A router that is never run: chapter 4's layers need a valid one, and are only handed ids.
fn unused_router() -> RouterConfig {
    RouterConfig::qwen3(1)
}

/// The experts `range` of `weights` as a layer of their own with k = 1: each pair a rank
/// receives is one token of it, with its expert's local id and its routing weight, so each
/// pair's weighted output comes back on its own row. No shared expert (its tokens' home rank
/// runs it: [`shared_only`]).
pub fn expert_subset(weights: &MoeWeights, range: Range<usize>) -> MoeWeights {
    let c = &weights.config;
    let (h, i) = (c.hidden, c.intermediate);
    let n = range.len();
    MoeWeights {
        config: MoeConfig {
            experts: n,
            router: unused_router(),
            shared: None,
            ..c.clone()
        },
        gate: vec![0.0; n * h],
        bias: None,
        w13: weights.w13[range.start * 2 * i * h..range.end * 2 * i * h].to_vec(),
        w2: weights.w2[range.start * h * i..range.end * h * i].to_vec(),
        shared: None,
    }
}

/// The intermediate size of [`shared_only`]'s placeholder expert: the smallest that every tile
/// configuration takes (16-byte rows).
pub const PLACEHOLDER_INTERMEDIATE: usize = 8;

// ANCHOR: shared_only
/// The shared expert alone, as chapter 4 runs it, for the rank its tokens live on: a layer whose
/// one routed expert is all zeros (intermediate [`PLACEHOLDER_INTERMEDIATE`]), called with id 0
/// and weight 0 for every token. Its routed term is then exactly 0 (SwiGLU(0)·0, times 0), so
/// its output is `(0 + 0) + s`: the shared expert's `s` with the bits chapter 4 gives it inside
/// the whole layer, gated or not. None without a shared expert.
pub fn shared_only(weights: &MoeWeights) -> Option<MoeWeights> {
    let c = &weights.config;
    let h = c.hidden;
    let i = PLACEHOLDER_INTERMEDIATE;
    Some(MoeWeights {
        config: MoeConfig {
            intermediate: i,
            experts: 1,
            router: unused_router(),
            shared: Some(c.shared?),
            ..c.clone()
        },
        gate: vec![0.0; h],
        bias: None,
        w13: vec![0.0; 2 * i * h],
        w2: vec![0.0; h * i],
        shared: weights.shared.clone(),
    })
}
// ANCHOR_END: shared_only
