//! What the chapter's tests share: the regimes of chapters 2 and 4, how a batch is split over
//! ranks, and chapter 6's one-GPU layer with a pinned path and tile.
#![allow(dead_code)] // each test file uses its part

use ch02_grouped::regimes::{regime, MoeRegime, REGIMES};
use ch02_grouped::{MoeError, MoeWeights};
use ch04_fused_moe::{FusedDevice, Path, TileConfig};
use ch06_layer::AssembledLayer;
use moe_kernels::Device;
use std::ops::Range;

/// Chapter 2's regimes, then chapter 4's.
pub fn every_regime() -> impl Iterator<Item = MoeRegime> {
    REGIMES
        .iter()
        .chain(ch04_fused_moe::regimes::FUSED_REGIMES)
        .map(|n| {
            regime(n)
                .or_else(|| ch04_fused_moe::regimes::fused_regime(n))
                .unwrap()
        })
}

/// Chapter 4's layer on `path` with the default tile configuration, whatever the batch.
pub fn pin(path: Path) -> impl Fn(FusedDevice) -> Result<FusedDevice, MoeError> {
    move |f| f.with_path(path).with_tile(TileConfig::DEFAULT)
}

/// Chapter 6's layer on one GPU, pinned to `path` (None: its own choices).
pub fn one_gpu(dev: &'static Device, w: &MoeWeights, path: Option<Path>) -> AssembledLayer {
    let l = AssembledLayer::new(dev, w).unwrap();
    match path {
        Some(p) => l.map_experts(pin(p)).unwrap(),
        None => l,
    }
}

/// Each rank's rows of a batch of `rows` under expert parallelism: uneven on purpose (with four
/// ranks, rank 1 has none).
pub fn split_rows(rows: usize, world: usize) -> Vec<Range<usize>> {
    let shares: Vec<usize> = match world {
        1 => vec![1],
        2 => vec![2, 1],
        4 => vec![2, 0, 1, 1],
        _ => vec![1; world],
    };
    let total: usize = shares.iter().sum();
    let mut at = 0;
    shares
        .iter()
        .enumerate()
        .map(|(r, s)| {
            let end = if r + 1 == world {
                rows
            } else {
                at + rows * s / total
            };
            let range = at..end;
            at = end;
            range
        })
        .collect()
}
