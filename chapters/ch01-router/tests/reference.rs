//! Chapter 1's tests: the f32 reference router against the f64 literal router on every regime
//! and config family, the router article's toy example by hand arithmetic, every error, and the
//! rules for ties, NaN, empty batches and grouped selection.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::config::{Grouping, RouterConfig};
use ch01_router::conformance::{regime_title, routing_text};
use ch01_router::cut::cut_of;
use ch01_router::inputs::patterned;
use ch01_router::io::{read_router_input, write_routing};
use ch01_router::literal::{LiteralRouter, RowDetail};
use ch01_router::reference::ReferenceRouter;
use ch01_router::regimes::{regime, RegimeInput, REGIMES};
use ch01_router::routing::{Router, Routing};
use ch01_router::{toy, RouterError};

// ---------------------------------------------------------------- helpers

/// `[rows, cols]` f32 tensor on the CPU.
fn t2(data: &[f32], rows: usize, cols: usize) -> Tensor {
    Tensor::from_slice(data, (rows, cols), &Device::Cpu).unwrap()
}

/// `[len]` f32 tensor on the CPU.
fn t1(data: &[f32]) -> Tensor {
    Tensor::from_slice(data, data.len(), &Device::Cpu).unwrap()
}

fn literal(config: RouterConfig) -> LiteralRouter {
    LiteralRouter { config }
}

fn reference(config: RouterConfig) -> ReferenceRouter {
    ReferenceRouter { config }
}

/// Routes with both routers and checks the reference against the literal oracle with the
/// rules of `ch01_router::compare` (exact ids where the literal gap exceeds 1e-5, weights within
/// 2e-6). Returns how many rows were compared exactly.
fn check_against_literal(
    name: &str,
    config: &RouterConfig,
    logits: &[f32],
    rows: usize,
    experts: usize,
    bias: Option<&[f32]>,
) -> usize {
    let details = literal(config.clone())
        .route_rows(logits, rows, experts, bias)
        .unwrap();
    let bias_t = bias.map(t1);
    let got = reference(config.clone())
        .route(&t2(logits, rows, experts), bias_t.as_ref())
        .unwrap();
    assert_eq!(got.k, config.k, "regime {name}: k");
    check_routing(name, &details, &got, Tolerance::SAME_LOGITS).unwrap_or_else(|e| panic!("{e}"))
}

fn regime_logits(r: &RegimeInput) -> Tensor {
    t2(&r.logits_f32(), r.rows, r.experts)
}

fn round3(x: f64) -> String {
    format!("{x:.3}")
}

// ---------------------------------------------------------------- oracle vs reference

#[test]
fn reference_matches_literal_on_every_regime() {
    for &name in REGIMES {
        let r = regime(name).unwrap();
        let exact = check_against_literal(
            name,
            &r.config,
            &r.logits_f32(),
            r.rows,
            r.experts,
            r.bias.as_deref(),
        );
        // Near ties must stay the exception, or this test would check nothing.
        assert!(
            exact * 10 >= r.rows * 9 || name == "ties" || name == "nan_logits",
            "regime {name}: only {exact} of {} rows had a clear cut",
            r.rows
        );
    }
}

#[test]
fn reference_matches_literal_for_every_config_family() {
    for &name in REGIMES {
        let r = regime(name).unwrap();
        let logits = r.logits_f32();
        let e = r.experts;
        let k = r.k.min(e);
        let glm_bias: Vec<f32> = patterned(e, 77, 0.05).iter().map(|b| 8.0 + b).collect();
        let small_bias = patterned(e, 78, 0.1);
        let mut cases: Vec<(&str, RouterConfig, Option<&[f32]>)> = vec![
            ("qwen3", RouterConfig::qwen3(k), None),
            ("mixtral", RouterConfig::mixtral(), None),
            ("glm5", RouterConfig::glm5(k), Some(&glm_bias[..])),
            ("deepseek_v4", RouterConfig::deepseek_v4(k), None),
            (
                "softmax_unnormalized_scaled",
                RouterConfig {
                    renormalize: false,
                    routed_scaling: 2.5,
                    ..RouterConfig::qwen3(k)
                },
                None,
            ),
            (
                "sqrt_softplus_biased",
                RouterConfig::deepseek_v4(k),
                Some(&small_bias[..]),
            ),
        ];
        // DeepSeek-V3's 8 groups, 4 kept, k = 8 need E divisible by 8 and at least 16.
        if RouterConfig::deepseek_v3().validate(e, None).is_ok() {
            cases.push((
                "deepseek_v3",
                RouterConfig::deepseek_v3(),
                Some(&small_bias),
            ));
        }
        for (family, config, bias) in cases {
            let label = format!("{name}/{family}");
            check_against_literal(&label, &config, &logits, r.rows, e, bias);
        }
    }
}

// ---------------------------------------------------------------- the toy example

// Hand arithmetic for the toy (independent of the routers):
//   σ(2.0) = 1 / (1 + e^-2)   = 1 / 1.135335 = 0.880797   (expert 2)
//   σ(1.9) = 1 / (1 + e^-1.9) = 1 / 1.149569 = 0.869892   (expert 5)
//   σ(1.2) = 1 / (1 + e^-1.2) = 1 / 1.301194 = 0.768525   (expert 0)
// No bias: weights 0.880797 / 1.750689 = 0.503117 and 0.869892 / 1.750689 = 0.496883.
// fp32 bias: keys 0: 8.13 + 0.768525 = 8.898525, 2: 8.00 + 0.880797 = 8.880797,
//            5: 8.03 + 0.869892 = 8.899892 → select 5, 0; weights 0.869892 / 1.638417 = 0.530933
//            and 0.768525 / 1.638417 = 0.469067. Cut: last selected 0 (8.898525), first rejected
//            2 (8.880797), gap 0.017728 — the article's 8.899 − 8.881 = 0.018 is exactly this cut.
//            (8.900 − 8.899 = 0.001 separates the two *selected* keys; it is not the cut.)
// bf16 bias: 8.13 → 8.125, 8.03 → 8.0 (bf16 steps are 0.0625 between 8 and 16): keys
//            0: 8.893525, 2: 8.880797, 5: 8.869892 → select 0, 2; cut between 2 and 5,
//            gap 8.880797 − 8.869892 = 0.010905.

#[test]
fn toy_without_bias_selects_2_and_5() {
    let logits = toy::logits();
    let d = &literal(toy::config())
        .route_rows(&logits, 1, 8, None)
        .unwrap()[0];
    assert_eq!(d.ids, vec![2, 5]);
    assert_eq!(round3(d.scores[2]), "0.881");
    assert_eq!(round3(d.scores[5]), "0.870");
    assert_eq!(round3(d.weights[0]), "0.503");
    assert_eq!(round3(d.weights[1]), "0.497");
    let got = reference(toy::config())
        .route(&t2(&logits, 1, 8), None)
        .unwrap();
    assert_eq!(got.ids, vec![2, 5]);
    assert!((got.weights[0] as f64 - 0.503117).abs() < 1e-5);
    assert!((got.weights[1] as f64 - 0.496883).abs() < 1e-5);
}

// ANCHOR: toy_fp32_bias
#[test]
fn toy_with_fp32_bias_selects_5_and_0() {
    let (logits, bias) = (toy::logits(), toy::bias());
    let d = &literal(toy::config())
        .route_rows(&logits, 1, 8, Some(&bias))
        .unwrap()[0];
    assert_eq!(round3(d.keys[0]), "8.899");
    assert_eq!(round3(d.keys[2]), "8.881");
    assert_eq!(round3(d.keys[5]), "8.900");
    assert_eq!(d.ids, vec![5, 0]);
    // Weights come from the unbiased scores 0.870 and 0.769.
    assert_eq!(round3(d.scores[5]), "0.870");
    assert_eq!(round3(d.scores[0]), "0.769");
    assert_eq!(round3(d.weights[0]), "0.531");
    assert_eq!(round3(d.weights[1]), "0.469");
    // No other expert comes near: the best of the rest is expert 6 at 0.711 + 7.99.
    for e in [1, 3, 4, 6, 7] {
        assert!(d.keys[e] < 8.75, "expert {e} key {}", d.keys[e]);
    }
    let cut = d.cut.clone().unwrap();
    assert_eq!(cut.last_selected.0, 0);
    assert_eq!(cut.first_rejected.0, 2);
    assert_eq!(round3(cut.gap), "0.018");
    assert!((cut.gap - 0.017728).abs() < 1e-5);
    // The two selected keys are only 0.001 apart, but that is not the cut.
    assert_eq!(round3(d.keys[5] - d.keys[0]), "0.001");

    let got = reference(toy::config())
        .route(&t2(&logits, 1, 8), Some(&t1(&bias)))
        .unwrap();
    assert_eq!(got.ids, vec![5, 0]);
    assert!((got.weights[0] as f64 - 0.530933).abs() < 1e-5);
    assert!((got.weights[1] as f64 - 0.469067).abs() < 1e-5);
}
// ANCHOR_END: toy_fp32_bias

#[test]
fn toy_with_bf16_bias_flips_to_0_and_2() {
    let (logits, bias) = (toy::logits(), toy::bias_bf16());
    assert_eq!(bias[5], 8.0); // 8.03 in bf16
    assert_eq!(bias[0], 8.125); // 8.13 in bf16
    let d = &literal(toy::config())
        .route_rows(&logits, 1, 8, Some(&bias))
        .unwrap()[0];
    assert_eq!(round3(d.keys[5]), "8.870");
    assert_eq!(round3(d.keys[2]), "8.881");
    assert_eq!(round3(d.keys[0]), "8.894");
    assert_eq!(d.ids, vec![0, 2]);
    let cut = d.cut.clone().unwrap();
    assert_eq!((cut.last_selected.0, cut.first_rejected.0), (2, 5));
    assert_eq!(round3(cut.gap), "0.011");
    let got = reference(toy::config())
        .route(&t2(&logits, 1, 8), Some(&t1(&bias)))
        .unwrap();
    assert_eq!(got.ids, vec![0, 2]);
}

#[test]
fn snapshot_toy() {
    let logits = t2(&toy::logits(), 1, 8);
    let router = reference(toy::config());
    let mut text = String::new();
    for (title, bias) in [
        ("no bias", None),
        ("fp32 bias", Some(t1(&toy::bias()))),
        ("bf16 bias", Some(t1(&toy::bias_bf16()))),
    ] {
        let routing = router.route(&logits, bias.as_ref()).unwrap();
        let oracle = literal(toy::config())
            .route(&logits, bias.as_ref())
            .unwrap();
        let title = format!("toy, {title}:");
        // The snapshot is the reference's output, and it must read the same from the oracle.
        assert_eq!(
            routing_text(&title, &routing, 1),
            routing_text(&title, &oracle, 1)
        );
        text += &routing_text(&title, &routing, 1);
    }
    snapshot("ch01_toy", &text);
}

/// The regime snapshots are shared with the device routers' test (`tests/chain.rs`), which
/// must print exactly the same text: so the names carry no module prefix.
fn snapshot(name: &str, text: &str) {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(name.to_string(), text);
    });
}

#[test]
fn snapshot_every_regime() {
    for &name in REGIMES {
        let r = regime(name).unwrap();
        let bias = r.bias.as_deref().map(t1);
        let routing = reference(r.config.clone())
            .route(&regime_logits(&r), bias.as_ref())
            .unwrap();
        let text = routing_text(&regime_title(&r), &routing, 8);
        let oracle = literal(r.config.clone())
            .route(&regime_logits(&r), bias.as_ref())
            .unwrap();
        assert_eq!(
            text,
            routing_text(&regime_title(&r), &oracle, 8),
            "regime {name}"
        );
        snapshot(&format!("ch01_{name}"), &text);
    }
}

// ---------------------------------------------------------------- errors

fn route_err(
    config: RouterConfig,
    logits: &Tensor,
    bias: Option<&Tensor>,
) -> (RouterError, RouterError) {
    let a = literal(config.clone()).route(logits, bias).unwrap_err();
    let b = reference(config).route(logits, bias).unwrap_err();
    // Compared as text: a NaN inside an error is never == itself.
    assert_eq!(
        a.to_string(),
        b.to_string(),
        "both routers refuse with the same error"
    );
    (a.clone(), b)
}

#[test]
fn error_logits_not_2d() {
    let logits = t1(&[0.0; 8]);
    let (e, _) = route_err(RouterConfig::qwen3(2), &logits, None);
    assert_eq!(e, RouterError::LogitsNot2d { dims: vec![8] });
    assert_eq!(
        e.to_string(),
        "logits must be a [T, E] matrix, got shape [8]"
    );
    // Shape is checked before the config: k = 0 is not reported.
    let (e, _) = route_err(RouterConfig::qwen3(0), &logits, None);
    assert!(matches!(e, RouterError::LogitsNot2d { .. }));
    // The literal router's slice API reports a length that is not rows × experts.
    let e = literal(RouterConfig::qwen3(2))
        .route_rows(&[0.0; 7], 2, 4, None)
        .unwrap_err();
    assert_eq!(e, RouterError::LogitsNot2d { dims: vec![7] });
}

#[test]
fn error_k_zero_and_too_large() {
    let logits = t2(&[0.0; 16], 2, 8);
    let (e, _) = route_err(RouterConfig::qwen3(0), &logits, None);
    assert_eq!(e, RouterError::KZero);
    assert_eq!(
        e.to_string(),
        "k = 0: a router must select at least one expert"
    );
    let (e, _) = route_err(RouterConfig::qwen3(9), &logits, None);
    assert_eq!(e, RouterError::KTooLarge { k: 9, experts: 8 });
    assert_eq!(e.to_string(), "k = 9 exceeds the number of experts (8)");
    // k is checked before the bias: a wrong bias with k = 0 reports k.
    let (e, _) = route_err(RouterConfig::glm5(0), &logits, Some(&t1(&[0.0; 3])));
    assert_eq!(e, RouterError::KZero);
}

#[test]
fn error_bias_shape_and_scale() {
    let logits = t2(&[0.0; 16], 2, 8);
    // A [1, E] bias: the right number of values, the wrong shape.
    let b = Tensor::from_slice(&[8.0f32; 8], (1, 8), &Device::Cpu).unwrap();
    let (e, _) = route_err(RouterConfig::glm5(2), &logits, Some(&b));
    assert_eq!(e, RouterError::BiasShape { dims: vec![1, 8] });
    assert_eq!(
        e.to_string(),
        "bias must be a [E] vector (one value per expert), got shape [1, 8]"
    );
    // The routed scaling factor: finite and positive.
    for bad in [f32::NAN, f32::INFINITY, -1.0, 0.0] {
        let config = RouterConfig {
            routed_scaling: bad,
            ..RouterConfig::glm5(2)
        };
        let (e, _) = route_err(config, &logits, None);
        assert!(matches!(e, RouterError::BadScale { .. }), "{bad}: {e:?}");
        assert!(
            e.to_string()
                .starts_with("the routed scaling factor must be a finite number above 0"),
            "{e}"
        );
    }
}

#[test]
fn error_bias_length_and_not_finite() {
    let logits = t2(&[0.0; 16], 2, 8);
    let (e, _) = route_err(RouterConfig::glm5(2), &logits, Some(&t1(&[8.0; 7])));
    assert_eq!(e, RouterError::BiasLength { len: 7, experts: 8 });
    assert_eq!(
        e.to_string(),
        "bias has 7 values but there are 8 experts (one bias per expert)"
    );
    let mut bias = [8.0f32; 8];
    bias[3] = f32::NAN;
    let (e, _) = route_err(RouterConfig::glm5(2), &logits, Some(&t1(&bias)));
    assert!(matches!(e, RouterError::BiasNotFinite { expert: 3, value } if value.is_nan()));
    assert_eq!(
        e.to_string(),
        "bias of expert 3 is NaN, not a finite number"
    );
    bias[3] = 8.0;
    bias[6] = f32::INFINITY;
    let (e, _) = route_err(RouterConfig::glm5(2), &logits, Some(&t1(&bias)));
    assert_eq!(
        e,
        RouterError::BiasNotFinite {
            expert: 6,
            value: f32::INFINITY
        }
    );
    assert_eq!(
        e.to_string(),
        "bias of expert 6 is inf, not a finite number"
    );
}

#[test]
fn error_grouping() {
    let grouped = |n_group, topk_group, k| RouterConfig {
        k,
        grouping: Some(Grouping {
            n_group,
            topk_group,
        }),
        ..RouterConfig::deepseek_v3()
    };
    let logits12 = t2(&[0.0; 12], 1, 12);
    let (e, _) = route_err(grouped(8, 4, 2), &logits12, None);
    assert_eq!(
        e,
        RouterError::GroupsDoNotDivide {
            n_group: 8,
            experts: 12
        }
    );
    assert_eq!(
        e.to_string(),
        "12 experts cannot be split into 8 equal groups"
    );
    let (e, _) = route_err(grouped(0, 0, 2), &logits12, None);
    assert!(matches!(
        e,
        RouterError::GroupsDoNotDivide { n_group: 0, .. }
    ));

    let logits64 = t2(&[0.0; 64], 1, 64);
    let (e, _) = route_err(grouped(8, 9, 8), &logits64, None);
    assert_eq!(
        e,
        RouterError::TopkGroupTooLarge {
            topk_group: 9,
            n_group: 8
        }
    );
    assert_eq!(
        e.to_string(),
        "topk_group = 9 exceeds the number of groups (8)"
    );

    // 16 experts in 8 groups of 2; keeping 2 groups leaves 4 experts for k = 8.
    let logits16 = t2(&[0.0; 16], 1, 16);
    let (e, _) = route_err(grouped(8, 2, 8), &logits16, None);
    assert_eq!(
        e,
        RouterError::GroupsTooFewForK {
            topk_group: 2,
            per_group: 2,
            k: 8
        }
    );
    assert_eq!(
        e.to_string(),
        "the 2 kept groups of 2 experts hold 4 experts, fewer than k = 8"
    );
}

#[test]
fn error_no_experts() {
    let logits = Tensor::zeros((3, 0), DType::F32, &Device::Cpu).unwrap();
    let (e, _) = route_err(RouterConfig::qwen3(1), &logits, None);
    assert_eq!(e, RouterError::NoExperts);
    assert_eq!(e.to_string(), "the layer has no experts (E = 0)");
    // Also with no rows: E = 0 is wrong whatever T is.
    let logits = Tensor::zeros((0, 0), DType::F32, &Device::Cpu).unwrap();
    let (e, _) = route_err(RouterConfig::qwen3(1), &logits, None);
    assert_eq!(e, RouterError::NoExperts);
}

#[test]
fn error_wrong_dtype() {
    let logits = t2(&[0.0; 16], 2, 8);
    let (e, _) = route_err(
        RouterConfig::qwen3(2),
        &logits.to_dtype(DType::BF16).unwrap(),
        None,
    );
    assert_eq!(
        e,
        RouterError::WrongDtype {
            what: "logits",
            dtype: "BF16".into()
        }
    );
    assert_eq!(e.to_string(), "logits must be f32, got BF16");
    let bias = t1(&[8.0; 8]).to_dtype(DType::F64).unwrap();
    let (e, _) = route_err(RouterConfig::glm5(2), &logits, Some(&bias));
    assert_eq!(e.to_string(), "bias must be f32, got F64");
}

// ---------------------------------------------------------------- rules

#[test]
fn empty_batch_returns_empty_routing() {
    let logits = Tensor::zeros((0, 8), DType::F32, &Device::Cpu).unwrap();
    let bias = t1(&[8.0; 8]);
    for router in [
        Box::new(literal(RouterConfig::glm5(2))) as Box<dyn Router>,
        Box::new(reference(RouterConfig::glm5(2))),
    ] {
        let got = router.route(&logits, Some(&bias)).unwrap();
        assert_eq!(got, Routing::empty(2), "{}", router.name());
        assert_eq!((got.rows, got.k, got.ids.len()), (0, 2, 0));
    }
    // The config is still validated on an empty batch.
    let (e, _) = route_err(RouterConfig::qwen3(0), &logits, None);
    assert_eq!(e, RouterError::KZero);
}

#[test]
fn ties_go_to_the_lowest_id() {
    // Softmax of [1, 3, 3, 0, 3]: three experts share the best logit; k = 2 takes 1 then 2.
    let row = [1.0f32, 3.0, 3.0, 0.0, 3.0];
    for config in [RouterConfig::qwen3(2), RouterConfig::glm5(2)] {
        let d = &literal(config.clone())
            .route_rows(&row, 1, 5, None)
            .unwrap()[0];
        assert_eq!(d.ids, vec![1, 2]);
        let cut = d.cut.clone().unwrap();
        assert_eq!(
            (cut.last_selected.0, cut.first_rejected.0, cut.gap),
            (2, 4, 0.0)
        );
        let got = reference(config).route(&t2(&row, 1, 5), None).unwrap();
        assert_eq!(got.ids, vec![1, 2]);
        assert_eq!(got.weights[0], got.weights[1]);
    }
    // The ties regime: duplicated gate rows give bitwise-equal logits, so both routers must
    // agree exactly, gap 0 or not.
    let r = regime("ties").unwrap();
    let logits = r.logits_f32();
    let details = literal(r.config.clone())
        .route_rows(&logits, r.rows, r.experts, None)
        .unwrap();
    let got = reference(r.config.clone())
        .route(&regime_logits(&r), None)
        .unwrap();
    let mut zero_gaps = 0;
    for (row, d) in details.iter().enumerate() {
        assert_eq!(d.ids, got.row_ids(row), "ties: row {row}");
        if d.cut.as_ref().unwrap().gap == 0.0 {
            zero_gaps += 1;
        }
        // Among equal keys the selection order is increasing id.
        for w in d.ids.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            if d.keys[a] == d.keys[b] {
                assert!(
                    a < b,
                    "ties: row {row} picked {a} before {b} at an equal key"
                );
            }
        }
    }
    assert!(
        zero_gaps >= 3,
        "ties regime has only {zero_gaps} rows tied at the cut"
    );
    // The all-zero hidden state: every logit is 0, so experts 0..4 win, 1/4 each.
    let last = r.rows - 1;
    assert_eq!(got.row_ids(last), &[0, 1, 2, 3]);
    assert_eq!(got.row_weights(last), &[0.25; 4]);
}

#[test]
fn non_finite_logits_are_never_preferred_and_never_give_nan() {
    let nan = f32::NAN;
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    // Softmax over the finite entries only: 1.0 and 0.5.
    // e^0 = 1, e^-0.5 = 0.606531 → 1 / 1.606531 = 0.622459, 0.377541.
    let row = [nan, 1.0, inf, ninf, 0.5];
    let d = &literal(RouterConfig::qwen3(2))
        .route_rows(&row, 1, 5, None)
        .unwrap()[0];
    assert_eq!(d.ids, vec![1, 4]);
    assert!((d.weights[0] - 0.622459).abs() < 1e-6);
    assert!((d.weights[1] - 0.377541).abs() < 1e-6);
    assert_eq!((d.scores[0], d.scores[2], d.scores[3]), (0.0, 0.0, 0.0));
    let got = reference(RouterConfig::qwen3(2))
        .route(&t2(&row, 1, 5), None)
        .unwrap();
    assert_eq!(got.ids, vec![1, 4]);
    assert!((got.weights[0] - 0.622459).abs() < 1e-6);

    // A huge bias cannot rescue a NaN logit: its key is −∞ regardless.
    let bias = [100.0f32, 0.0, 0.0];
    let row = [nan, 0.1, 0.2];
    for router in [
        Box::new(literal(RouterConfig::glm5(1))) as Box<dyn Router>,
        Box::new(reference(RouterConfig::glm5(1))),
    ] {
        let got = router.route(&t2(&row, 1, 3), Some(&t1(&bias))).unwrap();
        assert_eq!(got.ids, vec![2], "{}", router.name());
    }

    // A row with no finite logit: experts 0..k by the tie rule, every weight 0, in every family.
    let all_nan = [nan; 6];
    for config in [
        RouterConfig::qwen3(3),
        RouterConfig::glm5(3),
        RouterConfig::deepseek_v4(3),
    ] {
        for router in [
            Box::new(literal(config.clone())) as Box<dyn Router>,
            Box::new(reference(config.clone())),
        ] {
            let got = router.route(&t2(&all_nan, 1, 6), None).unwrap();
            assert_eq!(
                got.ids,
                vec![0, 1, 2],
                "{} {:?}",
                router.name(),
                config.scoring
            );
            assert_eq!(got.weights, vec![0.0; 3], "{}", router.name());
        }
    }
}

#[test]
fn nan_logits_regime_follows_the_rules() {
    let r = regime("nan_logits").unwrap();
    let logits = r.logits_f32();
    let e = r.experts;
    // The regime really contains each kind of non-finite logit.
    assert!(
        (0..r.rows).all(|t| logits[t * e + 7].is_nan()),
        "expert 7 NaN everywhere"
    );
    assert_eq!(logits[2 * e + 3], f32::INFINITY);
    assert_eq!(logits[4 * e + 11], f32::NEG_INFINITY);
    assert!(logits[5 * e..6 * e].iter().all(|x| x.is_nan()));
    let finite = logits.iter().filter(|x| x.is_finite()).count();
    assert_eq!(finite, r.rows * e - r.rows - 2 - (e - 1));
    let bias = t1(r.bias.as_ref().unwrap());
    for router in [
        Box::new(literal(r.config.clone())) as Box<dyn Router>,
        Box::new(reference(r.config.clone())),
    ] {
        let got = router.route(&regime_logits(&r), Some(&bias)).unwrap();
        let name = router.name();
        assert!(
            got.weights.iter().all(|w| !w.is_nan()),
            "{name}: NaN weight"
        );
        assert!(!got.ids.contains(&7), "{name}: NaN expert 7 selected");
        assert!(!got.row_ids(2).contains(&3), "{name}: +inf expert selected");
        assert!(
            !got.row_ids(4).contains(&11),
            "{name}: -inf expert selected"
        );
        assert_eq!(got.row_ids(5), &[0, 1, 2, 3], "{name}: all-NaN row");
        assert_eq!(got.row_weights(5), &[0.0; 4], "{name}: all-NaN row");
    }
}

#[test]
fn grouped_selection_never_picks_from_a_dropped_group() {
    // 8 experts in 4 groups of 2, keep 2 groups, k = 2, sigmoid, no bias.
    // Group values (sum of both keys): g0 σ(5)+σ(-5) = 1.000, g1 2σ(1) = 1.462,
    // g2 2σ(0.8) = 1.379, g3 2σ(-1) = 0.538 → keep g1, g2. Expert 0 has the best single key
    // (0.993) but its group is dropped; experts 2 and 3 tie inside g1, so the pick is [2, 3].
    let config = RouterConfig {
        k: 2,
        grouping: Some(Grouping {
            n_group: 4,
            topk_group: 2,
        }),
        routed_scaling: 1.0,
        ..RouterConfig::deepseek_v3()
    };
    let row = [5.0f32, -5.0, 1.0, 1.0, 0.8, 0.8, -1.0, -1.0];
    let d = &literal(config.clone())
        .route_rows(&row, 1, 8, None)
        .unwrap()[0];
    assert_eq!(d.ids, vec![2, 3]);
    let got = reference(config).route(&t2(&row, 1, 8), None).unwrap();
    assert_eq!(got.ids, vec![2, 3]);

    // On the grouped regime, recompute the kept groups independently (sort, not argmax rounds).
    let r = regime("block_boundary_exact").unwrap();
    let g = r.config.grouping.unwrap();
    let per_group = r.experts / g.n_group;
    let details = literal(r.config.clone())
        .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
        .unwrap();
    let mut dropped_better = 0;
    for (row, d) in details.iter().enumerate() {
        let mut values: Vec<(f64, usize)> = d
            .keys
            .chunks(per_group)
            .enumerate()
            .map(|(gi, keys)| {
                let mut k = keys.to_vec();
                k.sort_by(|a, b| b.partial_cmp(a).unwrap());
                (k[0] + k[1], gi)
            })
            .collect();
        values.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        let kept: Vec<usize> = values[..g.topk_group].iter().map(|v| v.1).collect();
        for &e in &d.ids {
            let group = e as usize / per_group;
            assert!(
                kept.contains(&group),
                "row {row}: expert {e} from dropped group {group}"
            );
        }
        // Count rows where a dropped group held a key above the last selected one: those are
        // the rows where grouping changed the answer.
        let last = d
            .ids
            .iter()
            .map(|&e| d.keys[e as usize])
            .fold(f64::INFINITY, f64::min);
        if (0..r.experts).any(|e| !kept.contains(&(e / per_group)) && d.keys[e] > last) {
            dropped_better += 1;
        }
    }
    assert!(
        dropped_better > 0,
        "grouping never mattered in block_boundary_exact"
    );
}

#[test]
fn renormalized_weights_sum_to_routed_scaling() {
    for &name in REGIMES {
        let r = regime(name).unwrap();
        assert!(r.config.renormalize, "{name}: every regime renormalises");
        let scale = r.config.routed_scaling as f64;
        let details = literal(r.config.clone())
            .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
            .unwrap();
        let bias = r.bias.as_deref().map(t1);
        let got = reference(r.config.clone())
            .route(&regime_logits(&r), bias.as_ref())
            .unwrap();
        for (row, d) in details.iter().enumerate() {
            let lit: f64 = d.weights.iter().sum();
            let refs: f64 = got.row_weights(row).iter().map(|&w| w as f64).sum();
            if d.weights.iter().all(|&w| w == 0.0) {
                assert_eq!(refs, 0.0, "{name}: row {row} all-zero in one router only");
                continue;
            }
            assert!(
                (lit - scale).abs() < 1e-6,
                "{name}: row {row} literal sum {lit}"
            );
            assert!(
                (refs - scale).abs() < 1e-6,
                "{name}: row {row} reference sum {refs}"
            );
        }
    }
}

#[test]
fn unnormalized_weights_are_scaled_scores() {
    // Without renormalisation a weight is score × scaling: σ(0) × 2 = 1, σ(2) × 2 = 1.761594.
    let config = RouterConfig {
        renormalize: false,
        routed_scaling: 2.0,
        ..RouterConfig::glm5(2)
    };
    let row = [0.0f32, 2.0, -1.0];
    let got = reference(config.clone())
        .route(&t2(&row, 1, 3), None)
        .unwrap();
    assert_eq!(got.ids, vec![1, 0]);
    assert!((got.weights[0] - 1.761594).abs() < 1e-6);
    assert!((got.weights[1] - 1.0).abs() < 1e-6);
    let lit = literal(config).route(&t2(&row, 1, 3), None).unwrap();
    assert_eq!(lit.ids, got.ids);
    assert!((lit.weights[0] - 1.761594).abs() < 1e-6);
}

#[test]
fn sqrt_softplus_is_stable_at_the_extremes() {
    // √(ln(1+eˣ)): x = 100 → √100 = 10; x = −100 → √(e^-100) = e^-50 = 1.9287e-22;
    // x = −20 → √(2.0612e-9) = 4.5401e-5 (where ln(1 + eˣ) computed naively in f32 gives 0).
    // In f32, e^-100 is subnormal (few significant bits), so the f32 router is checked at
    // x = −60 instead: √(e^-60) = e^-30 = 9.3576e-14.
    let row = [100.0f32, -100.0, -20.0];
    let d = &literal(RouterConfig::deepseek_v4(3))
        .route_rows(&row, 1, 3, None)
        .unwrap()[0];
    assert!((d.scores[0] - 10.0).abs() < 1e-12);
    assert!((d.scores[1] / 1.9287e-22 - 1.0).abs() < 1e-4);
    assert!((d.scores[2] / 4.5401e-5 - 1.0).abs() < 1e-4);
    let config = RouterConfig {
        renormalize: false,
        ..RouterConfig::deepseek_v4(3)
    };
    let row = [100.0f32, -60.0, -20.0];
    let got = reference(config).route(&t2(&row, 1, 3), None).unwrap();
    assert_eq!(got.ids, vec![0, 2, 1]);
    assert!((got.weights[0] - 10.0).abs() < 1e-5);
    assert!((got.weights[1] as f64 / 4.5401e-5 - 1.0).abs() < 1e-4);
    assert!((got.weights[2] as f64 / 9.3576e-14 - 1.0).abs() < 1e-4);
}

#[test]
fn cut_of_finds_the_boundary() {
    let keys = [0.5, 0.9, 0.1, 0.7, 0.7];
    // Selected 1 then 3; first rejected is 4 (equal key 0.7, gap 0), not 0.
    let cut = cut_of(&keys, &[1, 3]).unwrap();
    assert_eq!(cut.last_selected, (3, 0.7));
    assert_eq!(cut.first_rejected, (4, 0.7));
    assert_eq!(cut.gap, 0.0);
    let cut = cut_of(&keys, &[1, 3, 4]).unwrap();
    assert_eq!(cut.first_rejected, (0, 0.5));
    assert!((cut.gap - 0.2).abs() < 1e-12);
    assert_eq!(cut_of(&keys, &[0, 1, 2, 3, 4]), None);
    // Two −∞ keys at the cut are a tie, not NaN.
    let keys = [1.0, f64::NEG_INFINITY, f64::NEG_INFINITY];
    assert_eq!(cut_of(&keys, &[0, 1]).unwrap().gap, 0.0);
    assert_eq!(cut_of(&keys, &[0]).unwrap().gap, f64::INFINITY);
}

#[test]
fn literal_details_are_consistent() {
    let r = regime("spec_decode_6rows").unwrap();
    let details: Vec<RowDetail> = literal(r.config.clone())
        .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
        .unwrap();
    let bias = r.bias.unwrap();
    for d in &details {
        for ((key, score), b) in d.keys.iter().zip(&d.scores).zip(&bias) {
            assert!((key - score - *b as f64).abs() < 1e-12);
        }
        // Selection order: keys never increase along the ids.
        for w in d.ids.windows(2) {
            assert!(d.keys[w[0] as usize] >= d.keys[w[1] as usize]);
        }
        assert!(d.cut.as_ref().unwrap().gap >= 0.0);
    }
}

// ---------------------------------------------------------------- inputs and regimes

#[test]
fn patterned_is_deterministic_and_in_range() {
    let a = patterned(10_000, 42, 0.5);
    assert_eq!(a, patterned(10_000, 42, 0.5));
    assert_ne!(a, patterned(10_000, 43, 0.5));
    assert_eq!(&patterned(10, 42, 0.5)[..], &a[..10]);
    assert!(a.iter().all(|&x| (-0.5..0.5).contains(&x)));
    let mean = a.iter().map(|&x| x as f64).sum::<f64>() / a.len() as f64;
    assert!(mean.abs() < 0.02, "mean {mean}");
    let below = a.iter().filter(|&&x| x < 0.0).count();
    assert!((4_700..5_300).contains(&below), "{below} of 10000 negative");
}

#[test]
fn regimes_exercise_their_names() {
    assert_eq!(regime("no_such_regime"), None);
    for &name in REGIMES {
        let r = regime(name).unwrap();
        assert_eq!(r.name, name);
        assert_eq!(r.k, r.config.k, "{name}");
        assert_eq!(r.hidden_states.len(), r.rows * r.hidden, "{name}");
        assert_eq!(r.gate_weight.len(), r.experts * r.hidden, "{name}");
        assert!(r.rows <= 512 && r.hidden <= 256 && (8..=128).contains(&r.experts));
        r.config.validate(r.experts, r.bias.as_deref()).unwrap();
    }
    let route = |name: &str| {
        let r = regime(name).unwrap();
        let routing = literal(r.config.clone())
            .route(&regime_logits(&r), r.bias.as_deref().map(t1).as_ref())
            .unwrap();
        (r, routing)
    };
    let pairs_per_expert = |r: &RegimeInput, routing: &Routing| {
        let mut count = vec![0usize; r.experts];
        for &e in &routing.ids {
            count[e as usize] += 1;
        }
        count
    };

    assert_eq!(regime("decode_1tok").unwrap().rows, 1);
    assert_eq!(regime("spec_decode_6rows").unwrap().rows, 6);
    assert_eq!(regime("large_prefill").unwrap().rows, 512);

    let (r, routing) = route("tiny_batch_many_empty_experts");
    assert_eq!((r.rows, r.experts), (3, 128));
    let empty = pairs_per_expert(&r, &routing)
        .iter()
        .filter(|&&c| c == 0)
        .count();
    assert!(empty >= 110, "{empty} empty experts");

    let (r, routing) = route("imbalanced_routing");
    let mut counts = pairs_per_expert(&r, &routing);
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let top5: usize = counts[..5].iter().sum();
    assert!(
        top5 * 2 > routing.ids.len(),
        "top 5 experts take {top5} of {}",
        routing.ids.len()
    );

    let (r, routing) = route("all_to_one_expert");
    for row in 0..r.rows {
        assert_eq!(routing.row_ids(row)[0], 5, "row {row}");
    }

    let r = regime("block_boundary_exact").unwrap();
    assert_eq!(r.rows * r.k, 64);
    assert!(r.config.grouping.is_some());

    // Exact duplicates: experts 3, 9, 12 and 5, 6 have bitwise-equal logits on every row.
    let r = regime("ties").unwrap();
    let l = r.logits_f32();
    for t in 0..r.rows {
        let row = &l[t * r.experts..(t + 1) * r.experts];
        assert_eq!(row[3], row[9]);
        assert_eq!(row[3], row[12]);
        assert_eq!(row[5], row[6]);
    }

    // GLM-like biases: around 8, neighbours (in sorted order) a few thousandths apart.
    let r = regime("spec_decode_6rows").unwrap();
    let mut b = r.bias.unwrap();
    b.sort_by(|x, y| x.partial_cmp(y).unwrap());
    assert!(b[0] > 7.9 && b[b.len() - 1] < 8.1);
    let mean_step = (b[b.len() - 1] - b[0]) / (b.len() - 1) as f32;
    assert!(mean_step < 0.005, "mean spacing {mean_step}");

    // logits_f32 is logits_f64 rounded once.
    let r = regime("decode_1tok").unwrap();
    let (l64, l32) = (r.logits_f64(), r.logits_f32());
    assert!(l64.iter().zip(&l32).all(|(&a, &b)| a as f32 == b));
}

// ---------------------------------------------------------------- io

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ch01-router-test-{}-{name}", std::process::id()))
}

#[test]
fn io_round_trip() {
    let r = regime("spec_decode_6rows").unwrap();
    let input = temp_path("input.safetensors");
    let output = temp_path("output.safetensors");
    let mut tensors = HashMap::new();
    tensors.insert("logits", regime_logits(&r));
    tensors.insert("bias", t1(r.bias.as_ref().unwrap()));
    candle_core::safetensors::save(&tensors, &input).unwrap();

    let (logits, bias) = read_router_input(&input).unwrap();
    assert_eq!(logits.dims(), &[r.rows, r.experts]);
    assert_eq!(
        bias.as_ref().unwrap().to_vec1::<f32>().unwrap(),
        r.bias.clone().unwrap()
    );
    let routing = reference(r.config.clone())
        .route(&logits, bias.as_ref())
        .unwrap();
    write_routing(&output, &routing).unwrap();

    let back = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
    let ids = &back["ids"];
    assert_eq!(ids.dtype(), DType::I32);
    assert_eq!(ids.dims(), &[r.rows, r.k]);
    let ids: Vec<u32> = ids
        .flatten_all()
        .unwrap()
        .to_vec1::<i32>()
        .unwrap()
        .iter()
        .map(|&e| e as u32)
        .collect();
    assert_eq!(ids, routing.ids);
    let weights = back["weights"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(weights, routing.weights);

    // No bias in the file: None.
    let mut tensors = HashMap::new();
    tensors.insert("logits", regime_logits(&r));
    candle_core::safetensors::save(&tensors, &input).unwrap();
    assert!(read_router_input(&input).unwrap().1.is_none());

    // An empty routing round-trips as [0, k].
    write_routing(&output, &Routing::empty(4)).unwrap();
    let back = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
    assert_eq!(back["ids"].dims(), &[0, 4]);

    std::fs::remove_file(&input).ok();
    std::fs::remove_file(&output).ok();
}

#[test]
fn io_errors() {
    let path = temp_path("bad.safetensors");
    // No `logits` tensor.
    let mut tensors = HashMap::new();
    tensors.insert("bias", t1(&[8.0; 4]));
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert!(matches!(e, RouterError::Io(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("no tensor named \"logits\" (found [\"bias\"])"),
        "{e}"
    );
    // bf16 logits.
    let mut tensors = HashMap::new();
    tensors.insert("logits", t2(&[0.0; 8], 2, 4).to_dtype(DType::BF16).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert_eq!(e.to_string(), "logits must be f32, got BF16");
    // f16 bias.
    let mut tensors = HashMap::new();
    tensors.insert("logits", t2(&[0.0; 8], 2, 4));
    tensors.insert("bias", t1(&[0.0; 4]).to_dtype(DType::F16).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert_eq!(e.to_string(), "bias must be f32, got F16");
    // 1-D logits.
    let mut tensors = HashMap::new();
    tensors.insert("logits", t1(&[0.0; 8]));
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert_eq!(e, RouterError::LogitsNot2d { dims: vec![8] });
    // Bytes that are not safetensors: said so, with why, before candle's parser sees them.
    std::fs::write(&path, b"not a safetensors file").unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert!(matches!(e, RouterError::NotSafetensors { .. }), "{e:?}");
    assert!(
        e.to_string().contains(
            "bad.safetensors is not a safetensors file: its first 8 bytes give a header of"
        ),
        "{e}"
    );
    std::fs::write(&path, b"tiny").unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("4 bytes, shorter than the 8-byte header length"),
        "{e}"
    );
    let mut not_json = 4u64.to_le_bytes().to_vec();
    not_json.extend_from_slice(b"abcd");
    std::fs::write(&path, &not_json).unwrap();
    let e = read_router_input(&path).unwrap_err();
    assert!(
        e.to_string().ends_with("the header is not a JSON object"),
        "{e}"
    );
    std::fs::remove_file(&path).ok();
    // A missing file.
    let e = read_router_input(&path).unwrap_err();
    assert!(matches!(e, RouterError::Io(_)), "{e:?}");
    assert!(e.to_string().contains("bad.safetensors"), "{e}");
    // A directory that does not exist cannot be written to.
    let e = write_routing(
        &temp_path("no/such/dir/out.safetensors"),
        &Routing::empty(2),
    )
    .unwrap_err();
    assert!(matches!(e, RouterError::Io(_)), "{e:?}");
}

/// The count the book gives as exercise 1's answer comes from `bench/results/cpu/ch01_exercise1.csv`
/// (through the generated facts); here it is recomputed from the input `tools/make-input`
/// writes, through the f64 oracle, both ways.
#[test]
fn exercise_1_count_in_the_book_matches_its_csv() {
    let csv = include_str!("../../../bench/results/cpu/ch01_exercise1.csv");
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let (rows, experts, k, changed): (usize, usize, usize, usize) = (
        row[1].parse().unwrap(),
        row[2].parse().unwrap(),
        row[3].parse().unwrap(),
        row[4].parse().unwrap(),
    );
    let (logits, bias) = ch01_router::inputs::router_input(rows, experts, 0);
    let b16: Vec<f32> = bias
        .iter()
        .map(|&b| half::bf16::from_f32(b).to_f32())
        .collect();
    let router = literal(RouterConfig::glm5(k));
    let a = router
        .route_rows(&logits, rows, experts, Some(&bias))
        .unwrap();
    let b = router
        .route_rows(&logits, rows, experts, Some(&b16))
        .unwrap();
    let set = |d: &RowDetail| {
        let mut v = d.ids.clone();
        v.sort_unstable();
        v
    };
    let count = a.iter().zip(&b).filter(|(x, y)| set(x) != set(y)).count();
    assert_eq!(
        count, changed,
        "bench/results/cpu/ch01_exercise1.csv says {changed}; update it (and run tools/plot)"
    );
}
