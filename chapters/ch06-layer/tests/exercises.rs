//! Chapter 6's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 6`, which is
//! `cargo test -p ch06-layer --test exercises -- --ignored`. The layer runs on the backend
//! `MOE_BACKEND` selects (the GPU when there is one).

use ch01_router::chain::GateShape;
use ch02_grouped::regimes::regime;
use ch02_grouped::Dtype;
use ch05_fused_router::{LogitsFrom, TinyGemmChain};
use ch06_layer::exercises::{enqueue_with_router, switch_point};
use ch06_layer::switch::crossovers;
use ch06_layer::AssembledLayer;
use half::bf16;
use moe_kernels::record_launches;
use moe_kernels::testing::{assert_same_bits, device};

const CSV: &str = include_str!("../../../bench/results/h200/ch05.csv");

/// Exercise 1: on small cases (unsorted, a tie, a loss below the last win, no win at all), and
/// on every shape of the committed `ch05.csv`, where it must find what `crossovers` finds.
#[test]
#[ignore = "an exercise: tools/steps exercises 6"]
fn exercise_1_the_switch_point_is_the_last_win() {
    assert_eq!(
        switch_point(&[(8, 5.0, 6.0), (1, 4.0, 6.0), (16, 7.0, 6.0)]),
        8
    );
    assert_eq!(
        switch_point(&[(1, 4.0, 6.0), (32, 6.0, 6.0), (64, 7.0, 6.5)]),
        32
    );
    assert_eq!(
        switch_point(&[
            (1, 4.0, 6.0),
            (12, 6.1, 6.0),
            (32, 5.9, 6.0),
            (96, 9.0, 7.0)
        ]),
        32
    );
    assert_eq!(switch_point(&[(1, 9.0, 6.0)]), 0);
    assert_eq!(switch_point(&[]), 0);
    let mut lines = CSV.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (shape_c, impl_c, rows_c, cold_c) = (
        col("shape"),
        col("impl"),
        col("rows"),
        col("cold_median_us"),
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for (shape, want) in crossovers(CSV).unwrap() {
        let time = |imp: &str, n: &str| {
            rows.iter()
                .find(|r| r[shape_c] == shape && r[impl_c] == imp && r[rows_c] == n)
                .map(|r| r[cold_c].parse::<f64>().unwrap())
        };
        let measured: Vec<(usize, f64, f64)> = rows
            .iter()
            .filter(|r| r[shape_c] == shape && r[impl_c] == "pair")
            .filter_map(|r| {
                let n = r[rows_c];
                Some((n.parse().unwrap(), time("pair", n)?, time("blas_fused", n)?))
            })
            .rev() // in another order than the CSV's
            .collect();
        assert_eq!(switch_point(&measured), want, "{shape}");
    }
}

/// Exercise 2: the layer's experts after chapter 5's tiny GEMM and chapter 1's chain, on a
/// decode batch and a tiled one: the same experts and weights as the fused router gives (the
/// same logits, and chapter 1's rules in both), so the same output bits as the layer's own
/// call; and the launches are the chain's and the experts', nothing else.
#[test]
#[ignore = "an exercise: tools/steps exercises 6"]
fn exercise_2_the_layer_with_chapter_1s_chain() {
    let dev = device();
    for name in ["spec_decode_6rows", "large_prefill", "gated_shared_expert"] {
        let r = regime(name).unwrap();
        let c = &r.weights.config;
        let layer = AssembledLayer::new(dev, &r.weights)
            .unwrap()
            .with_logits(LogitsFrom::TinyGemm);
        let ws = layer.workspace(r.rows).unwrap();
        let x: Vec<bf16> = r.hidden.iter().map(|&v| bf16::from_f32(v)).collect();
        let x = dev.upload(&x).unwrap();
        let want = dev.alloc::<f32>(x.len()).unwrap();
        layer.enqueue(&ws, &x, &want).unwrap();
        let want_routing = ws.routing(c.router.k).unwrap();
        let chain = TinyGemmChain::new(
            dev,
            &c.router,
            GateShape {
                rows: r.rows,
                hidden: c.hidden,
                experts: c.experts,
            },
            r.weights.bias.as_deref(),
        )
        .unwrap();
        let got = dev.alloc::<f32>(x.len()).unwrap();
        let (res, names) = record_launches(|| enqueue_with_router(&layer, &chain, &ws, &x, &got));
        res.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ws.routing(c.router.k).unwrap(), want_routing, "{name}");
        assert_same_bits(name, &got.to_vec().unwrap(), &want.to_vec().unwrap());
        let experts = layer
            .experts_layer()
            .launches_from(ws.experts_workspace(), Dtype::Bf16);
        assert_eq!(
            names.len(),
            chain.launches_per_call() + experts,
            "{name}: {names:?}"
        );
        assert!(
            names.iter().any(|n| n.starts_with("ch01_router::")),
            "{names:?}"
        );
    }
}
