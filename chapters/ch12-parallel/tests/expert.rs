//! Expert parallelism on the emulator, two and four in-process ranks, against chapter 6's layer
//! on one GPU: with the same path and tile configuration on both, the same output bits for every
//! regime of chapters 2 and 4, whatever the imbalance (every pair on one expert, every pair on
//! one rank's experts), with empty ranks and empty batches, with a shared expert, gated or not.
//! Left to choose their own paths, within chapter 4's tolerance between sum orders.

// `is_multiple_of` needs Rust 1.87; the workspace's MSRV is 1.85.
#![allow(clippy::manual_is_multiple_of)]

mod common;

use ch02_grouped::compare::check_output;
use ch02_grouped::{MoeLayer, MoeWeights};
use ch04_fused_moe::{Path, ACROSS_SUM_ORDERS};
use ch12_parallel::{run_ranks, EpOutput, ExpertParallel, ParallelError};
use common::{every_regime, one_gpu, pin, split_rows};
use moe_kernels::testing::assert_same_bits;
use moe_kernels::Device;

/// Every rank's output on its rows of `hidden`, in rank order.
fn expert_parallel(
    dev: &'static Device,
    w: &MoeWeights,
    hidden: &[f32],
    world: usize,
    path: Option<Path>,
) -> Result<Vec<EpOutput>, ParallelError> {
    let h = w.config.hidden;
    let rows = hidden.len() / h;
    let split = split_rows(rows, world);
    run_ranks(world, dev, |comm| {
        let rank = ch12_parallel::Communicator::rank(comm);
        let mut layer = ExpertParallel::new(dev, w, rank, world)?;
        if let Some(p) = path {
            layer = layer.map_experts(pin(p))?;
        }
        let mine = &split[rank];
        layer.forward(comm, &hidden[mine.start * h..mine.end * h])
    })
    .into_iter()
    .collect()
}

/// Each rank's output against chapter 6's layer on that rank's rows: bits, or a tolerance.
fn check(name: &str, w: &MoeWeights, hidden: &[f32], world: usize, path: Option<Path>) {
    let dev = Device::emu();
    let h = w.config.hidden;
    let single = one_gpu(dev, w, path);
    let got = expert_parallel(dev, w, hidden, world, path)
        .unwrap_or_else(|e| panic!("{name}, {world} ranks: {e}"));
    let split = split_rows(hidden.len() / h, world);
    let mut pairs = 0;
    for (rank, (o, rows)) in got.iter().zip(&split).enumerate() {
        let what = format!("{name}, {world} ranks, rank {rank}, path {path:?}");
        let want = single
            .forward(&hidden[rows.start * h..rows.end * h])
            .unwrap();
        assert_eq!(o.layer.routing.ids, want.routing.ids, "{what}: ids");
        assert_same_bits(
            &format!("{what}: weights"),
            &o.layer.routing.weights,
            &want.routing.weights,
        );
        match path {
            Some(_) => assert_same_bits(&format!("{what}: output"), &o.layer.out, &want.out),
            None => {
                check_output(&what, &want.out, &o.layer.out, ACROSS_SUM_ORDERS).unwrap();
            }
        }
        // No pair is dropped: each rank ran all it was sent.
        pairs += o.received.iter().sum::<usize>();
        assert_eq!(
            o.sent.iter().sum::<usize>(),
            want.routing.ids.len(),
            "{what}"
        );
    }
    assert_eq!(
        pairs,
        hidden.len() / h * w.config.router.k,
        "{name}: pairs run"
    );
}

// ANCHOR: ep_every_regime
#[test]
fn every_regime_gives_the_one_gpu_bits_on_2_and_4_ranks() {
    for r in every_regime() {
        for world in [2, 4] {
            if r.weights.config.experts % world != 0 {
                continue; // refused with a typed error: tests/errors.rs
            }
            for path in Path::ALL {
                check(r.name, &r.weights, &r.hidden, world, Some(path));
            }
        }
    }
}
// ANCHOR_END: ep_every_regime

#[test]
fn each_side_on_its_own_path_stays_within_the_sum_order_tolerance() {
    for r in every_regime().filter(|r| r.weights.config.experts % 2 == 0) {
        check(r.name, &r.weights, &r.hidden, 2, None);
    }
}

/// A layer whose bias sends every token's pairs to experts `favoured`.
fn biased(favoured: std::ops::Range<usize>, k: usize) -> MoeWeights {
    let config = ch02_grouped::MoeConfig {
        hidden: 64,
        intermediate: 32,
        experts: 16,
        router: ch01_router::RouterConfig::glm5(k),
        shared: Some(ch02_grouped::SharedExpert {
            intermediate: 48,
            gated: false,
        }),
    };
    let mut w = MoeWeights::patterned(&config, 77, 0.25, true);
    for (e, b) in w.bias.as_mut().unwrap().iter_mut().enumerate() {
        *b = if favoured.contains(&e) { 10.0 } else { 0.0 };
    }
    w
}

#[test]
fn no_pair_is_dropped_when_every_pair_goes_to_one_expert_or_one_rank() {
    let hidden = ch01_router::inputs::patterned(40 * 64, 5, 1.0);
    // k = 1 and expert 13 far above the rest: every pair on rank 3 of 4 (rank 1 of 2).
    let one_expert = biased(13..14, 1);
    // k = 4 and experts 4..8 above the rest: every pair on rank 1 of 4.
    let one_rank = biased(4..8, 4);
    // (what, layer, ranks, the rank that receives every pair)
    for (name, w, world, busy) in [
        ("every pair on expert 13", &one_expert, 4, 3),
        ("every pair on expert 13", &one_expert, 2, 1),
        ("every pair on rank 1's experts", &one_rank, 4, 1),
    ] {
        for path in [Path::Tiled, Path::Decode] {
            check(name, w, &hidden, world, Some(path));
        }
        let got = expert_parallel(Device::emu(), w, &hidden, world, Some(Path::Tiled)).unwrap();
        for (rank, o) in got.iter().enumerate() {
            let received: usize = o.received.iter().sum();
            match rank == busy {
                true => assert_eq!(received, 40 * w.config.router.k, "{name}: rank {rank}"),
                false => assert_eq!(received, 0, "{name}: rank {rank}"),
            }
        }
    }
}

#[test]
fn empty_batches_on_some_ranks_or_on_all() {
    let w = biased(0..16, 2);
    let dev = Device::emu();
    // Four ranks, rank 1 without tokens (split_rows), and a batch of 3 rows that leaves rank 0
    // one row and ranks 1 and 2 none.
    for rows in [8, 3, 0] {
        let hidden = ch01_router::inputs::patterned(rows * 64, 9, 1.0);
        check("uneven and empty", &w, &hidden, 4, Some(Path::Tiled));
    }
    let got = expert_parallel(dev, &w, &[], 2, None).unwrap();
    for o in got {
        assert!(o.layer.out.is_empty() && o.layer.routing.ids.is_empty());
        assert_eq!(o.sent, vec![0, 0]);
    }
}
