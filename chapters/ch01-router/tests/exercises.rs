//! Chapter 1's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! `kernels/ch01_exercises.cu`, and passes on your solution (or on the answers, with
//! `--features answers`). They are ignored in a plain `cargo test`; run them with
//! `tools/steps exercises 1`, which is `cargo test -p ch01-router --test exercises -- --ignored`.
//! The kernels run on the backend `MOE_BACKEND` selects (the GPU when there is one).

use ch01_router::chain::{download, route_logits_on_device, RouterOutputs};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::exercises;
use ch01_router::literal::LiteralRouter;
use ch01_router::regimes::{regime, REGIMES};
use ch01_router::{Router, Scoring};
use moe_kernels::record_launches;
use moe_kernels::testing::device;

/// Exercise 1, against an independent count: the f32 reference router (candle), both ways.
#[test]
#[ignore = "an exercise: tools/steps exercises 1"]
fn exercise_1_counts_the_rows_a_bf16_bias_changes() {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let Some(bias) = &r.bias else { continue };
        let logits = r.logits_f32();
        let got = exercises::rows_changed_by_bf16_bias(&r.config, &logits, r.rows, r.experts, bias);
        let cpu = candle_core::Device::Cpu;
        let l = candle_core::Tensor::from_slice(&logits, (r.rows, r.experts), &cpu).unwrap();
        let b16: Vec<f32> = bias
            .iter()
            .map(|&b| half::bf16::from_f32(b).to_f32())
            .collect();
        let route = |b: &[f32]| {
            let bt = candle_core::Tensor::from_slice(b, r.experts, &cpu).unwrap();
            ch01_router::ReferenceRouter {
                config: r.config.clone(),
            }
            .route(&l, Some(&bt))
            .unwrap()
        };
        let (a, c) = (route(bias), route(&b16));
        let set = |ids: &[u32]| {
            let mut v = ids.to_vec();
            v.sort_unstable();
            v
        };
        let want = (0..r.rows)
            .filter(|&row| set(a.row_ids(row)) != set(c.row_ids(row)))
            .count();
        assert_eq!(got, want, "regime {name}");
    }
}

/// Exercise 2 on the softmax regimes: the oracle's experts and weights, in two launches.
#[test]
#[ignore = "an exercise: tools/steps exercises 1"]
fn exercise_2_routes_softmax_with_two_launches_after_the_gemm() {
    let dev = device();
    for name in REGIMES {
        let r = regime(name).unwrap();
        if r.config.scoring != Scoring::Softmax || r.config.grouping.is_some() {
            continue;
        }
        let logits = r.logits_f32();
        let ld = dev.upload(&logits).unwrap();
        let ids = dev.alloc::<i32>(r.rows * r.config.k).unwrap();
        let ws = dev.alloc::<f32>(r.rows * r.config.k).unwrap();
        let (res, launched) = record_launches(|| {
            exercises::softmax_router_from_logits(
                dev,
                &r.config,
                r.rows,
                r.experts,
                &ld,
                &RouterOutputs {
                    ids: &ids,
                    weights: &ws,
                },
            )
        });
        res.unwrap_or_else(|e| panic!("regime {name}: {e}"));
        assert_eq!(launched.len(), 2, "regime {name}: launched {launched:?}");
        let got = download(r.rows, r.config.k, &ids, &ws).unwrap();
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&logits, r.rows, r.experts, None)
        .unwrap();
        check_routing(name, &oracle, &got, Tolerance::OWN_LOGITS).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Exercise 3 on the GLM-like regimes (sigmoid + bias, no groups): the oracle's experts and
/// weights, in one launch, and the chain's experts.
#[test]
#[ignore = "an exercise: tools/steps exercises 1"]
fn exercise_3_routes_glm_in_one_launch() {
    let dev = device();
    for name in REGIMES {
        let r = regime(name).unwrap();
        let Some(bias) = &r.bias else { continue };
        if r.config.scoring != Scoring::Sigmoid || r.config.grouping.is_some() {
            continue;
        }
        let logits = r.logits_f32();
        let (ld, bd) = (dev.upload(&logits).unwrap(), dev.upload(bias).unwrap());
        let ids = dev.alloc::<i32>(r.rows * r.config.k).unwrap();
        let ws = dev.alloc::<f32>(r.rows * r.config.k).unwrap();
        let (res, launched) = record_launches(|| {
            exercises::fused_sigmoid_router(
                dev,
                &r.config,
                r.rows,
                r.experts,
                &ld,
                &bd,
                &RouterOutputs {
                    ids: &ids,
                    weights: &ws,
                },
            )
        });
        res.unwrap_or_else(|e| panic!("regime {name}: {e}"));
        assert_eq!(launched.len(), 1, "regime {name}: launched {launched:?}");
        let got = download(r.rows, r.config.k, &ids, &ws).unwrap();
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&logits, r.rows, r.experts, Some(bias))
        .unwrap();
        check_routing(name, &oracle, &got, Tolerance::SAME_LOGITS)
            .unwrap_or_else(|e| panic!("{e}"));
        let chain =
            route_logits_on_device(dev, &r.config, r.rows, r.experts, &logits, Some(bias)).unwrap();
        for (row, detail) in oracle.iter().enumerate() {
            if detail.cut.as_ref().is_none_or(|c| c.gap > 1e-5) {
                assert_eq!(
                    got.row_ids(row),
                    chain.row_ids(row),
                    "regime {name} row {row}"
                );
            }
        }
    }
}
