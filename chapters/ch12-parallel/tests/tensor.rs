//! Tensor parallelism on the emulator, two and four in-process ranks, against chapter 6's layer
//! on one GPU: the routing bit for bit, every rank the same output bits, and the output within
//! [`TP_TOLERANCE`] for every regime of chapters 2 and 4 whose intermediate sizes split (the
//! others are refused: tests/errors.rs). Each rank's layer on the same path and tile as the one
//! GPU's, so that only the order of the down projection's fp32 sums differs; and each left to its
//! own choices, within chapter 4's tolerance between sum orders.

// `is_multiple_of` needs Rust 1.87; the workspace's MSRV is 1.85.
#![allow(clippy::manual_is_multiple_of)]

mod common;

use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::{LayerOutput, MoeLayer, MoeWeights};
use ch04_fused_moe::{Path, ACROSS_SUM_ORDERS};
use ch12_parallel::{run_ranks, Communicator, TensorParallel, TP_TOLERANCE};
use common::{every_regime, one_gpu, pin};
use moe_kernels::testing::assert_same_bits;
use moe_kernels::Device;

fn splits(w: &MoeWeights, world: usize) -> bool {
    let c = &w.config;
    c.intermediate % world == 0 && c.shared.is_none_or(|s| s.intermediate % world == 0)
}

fn tensor_parallel(
    w: &MoeWeights,
    hidden: &[f32],
    world: usize,
    path: Option<Path>,
) -> Vec<LayerOutput> {
    let dev = Device::emu();
    run_ranks(world, dev, |comm| {
        let mut l = TensorParallel::new(dev, w, comm.rank(), world).unwrap();
        if let Some(p) = path {
            l = l.map_experts(pin(p)).unwrap();
        }
        l.forward(comm, hidden).unwrap()
    })
}

/// The worst relative error seen, for the tolerance's comment.
fn check(name: &str, w: &MoeWeights, hidden: &[f32], world: usize, path: Option<Path>) -> f64 {
    let want = one_gpu(Device::emu(), w, path).forward(hidden).unwrap();
    let got = tensor_parallel(w, hidden, world, path);
    let what = format!("{name}, {world} ranks, path {path:?}");
    for (rank, o) in got.iter().enumerate() {
        assert_eq!(o.routing.ids, want.routing.ids, "{what}, rank {rank}: ids");
        assert_same_bits(
            &format!("{what}: weights"),
            &o.routing.weights,
            &want.routing.weights,
        );
        assert_same_bits(
            &format!("{what}: rank {rank} against rank 0"),
            &o.out,
            &got[0].out,
        );
    }
    let tol: Tolerance = match path {
        Some(_) => TP_TOLERANCE,
        None => ACROSS_SUM_ORDERS,
    };
    check_output(&what, &want.out, &got[0].out, tol)
        .unwrap()
        .relative
}

// ANCHOR: tp_every_regime
#[test]
fn every_regime_within_the_tolerance_on_2_and_4_ranks() {
    let mut worst = (0.0f64, String::new());
    for r in every_regime() {
        for world in [2, 4] {
            if !splits(&r.weights, world) {
                continue;
            }
            for path in Path::ALL {
                let e = check(r.name, &r.weights, &r.hidden, world, Some(path));
                if e > worst.0 {
                    worst = (e, format!("{} on {world} ranks, {path} path", r.name));
                }
            }
        }
    }
    println!("worst: {:.2e} of the rms ({})", worst.0, worst.1);
}
// ANCHOR_END: tp_every_regime

#[test]
fn each_side_on_its_own_choices_stays_within_the_sum_order_tolerance() {
    for r in every_regime().filter(|r| splits(&r.weights, 2)) {
        check(r.name, &r.weights, &r.hidden, 2, None);
    }
}

#[test]
fn one_rank_is_chapter_6_bit_for_bit() {
    let r = ch02_grouped::regimes::regime("shared_expert").unwrap();
    let want = one_gpu(Device::emu(), &r.weights, None)
        .forward(&r.hidden)
        .unwrap();
    let got = tensor_parallel(&r.weights, &r.hidden, 1, None);
    assert_same_bits("one rank", &got[0].out, &want.out);
}
