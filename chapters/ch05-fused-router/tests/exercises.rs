//! Chapter 5's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! `kernels/ch05_exercises.cu`, and passes on your solution (or on the answers, with
//! `--features answers`). They are ignored in a plain `cargo test`; run them with
//! `tools/steps exercises 5`, which is `cargo test -p ch05-fused-router --test exercises --
//! --ignored`. The kernels run on the backend `MOE_BACKEND` selects (the GPU when there is one).

use ch01_router::chain::DeviceRouterError;
use ch01_router::config::RouterConfig;
use ch01_router::inputs::{patterned, router_input};
use ch01_router::literal::{select_topk, LiteralRouter};
use ch01_router::regimes::{regime, REGIMES};
use ch01_router::RouterError;
use ch05_fused_router::exercises;
use ch05_fused_router::route_logits_fused;
use moe_kernels::record_launches;
use moe_kernels::testing::device;

/// Exercise 1, against the f64 oracle: the rows whose set of experts moves when the logits are
/// rounded to bf16, counted with the literal router, on GLM-like logits (sigmoid + bias) and on
/// Qwen3-like ones (softmax). Rounding must move some rows, and not all.
#[test]
#[ignore = "an exercise: tools/steps exercises 5"]
fn exercise_1_bf16_logits_move_rows_the_oracle_sees_moving() {
    let dev = device();
    let (rows, experts) = (2000, 128);
    let (logits, bias) = router_input(rows, experts, 55);
    let softmax_logits = patterned(rows * experts, 56, 3.0);
    for (config, logits, bias) in [
        (RouterConfig::glm5(8), &logits, Some(&bias[..])),
        (RouterConfig::qwen3(8), &softmax_logits, None),
    ] {
        let rounded: Vec<f32> = logits
            .iter()
            .map(|&x| half::bf16::from_f32(x).to_f32())
            .collect();
        let lit = LiteralRouter {
            config: config.clone(),
        };
        let a = lit.route_rows(logits, rows, experts, bias).unwrap();
        let b = lit.route_rows(&rounded, rows, experts, bias).unwrap();
        let set = |ids: &[u32]| {
            let mut v = ids.to_vec();
            v.sort_unstable();
            v
        };
        // Rows at a near tie may go either way in f32: count them apart. An exact tie (gap 0,
        // which rounding makes often) is no near tie: the tie rule decides it the same way in
        // every arithmetic.
        let (mut want, mut near) = (0, 0);
        for (x, y) in a.iter().zip(&b) {
            let tight = [x, y]
                .iter()
                .any(|d| d.cut.as_ref().is_some_and(|c| c.gap > 0.0 && c.gap <= 1e-5));
            if tight {
                near += 1;
            } else if set(&x.ids) != set(&y.ids) {
                want += 1;
            }
        }
        let got = exercises::rows_changed_by_bf16_logits(dev, &config, logits, rows, experts, bias)
            .unwrap();
        assert!(
            got >= want && got <= want + near,
            "{:?}: {got} rows changed, the oracle says {want} (+ up to {near} near ties)",
            config.scoring
        );
        assert!(want > 0 && want < rows, "{:?}: {want}", config.scoring);
        eprintln!(
            "{:?}: {got} of {rows} rows change experts with bf16 logits",
            config.scoring
        );
    }
}

/// Exercise 2: on every regime's logits, on exact ties and on rows of −∞, the packed argmax is
/// the oracle's first pick (`select_topk` with k = 1), in one launch.
#[test]
#[ignore = "an exercise: tools/steps exercises 5"]
fn exercise_2_the_packed_argmax_is_the_first_pick() {
    let dev = device();
    let mut cases: Vec<(usize, usize, Vec<f32>)> = REGIMES
        .iter()
        .map(|n| {
            let r = regime(n).unwrap();
            // Chapter 1's keys: −∞ for a non-finite logit.
            let keys = r
                .logits_f32()
                .into_iter()
                .map(|x| if x.is_finite() { x } else { f32::NEG_INFINITY })
                .collect();
            (r.rows, r.experts, keys)
        })
        .collect();
    // Ties (the lowest id wins), −0.0 against +0.0 (equal keys), all −∞, negative keys, and
    // E not a multiple of 32.
    let e = 70;
    let mut special = vec![-1.5f32; 5 * e];
    special[3] = 2.0;
    special[40] = 2.0;
    special[e + 33] = -0.0;
    special[e + 65] = 0.0;
    special[2 * e..3 * e].fill(f32::NEG_INFINITY);
    special[3 * e + 69] = -1.25;
    special[4 * e + 1] = f32::MAX;
    cases.push((5, e, special));
    for (rows, experts, keys) in &cases {
        let (got, launched) =
            record_launches(|| exercises::row_argmax_on_device(dev, keys, *rows, *experts));
        let got = got.unwrap();
        assert_eq!(
            launched,
            ["ch05_exercises::ex_row_argmax"],
            "{rows} x {experts}"
        );
        for r in 0..*rows {
            let want = select_topk(&keys[r * experts..(r + 1) * experts], None, 1)[0] as i32;
            assert_eq!(got[r], want, "row {r} of {rows} x {experts}");
        }
    }
    let (got, launched) = record_launches(|| exercises::row_argmax_on_device(dev, &[], 0, 8));
    assert_eq!((got.unwrap(), launched.len()), (vec![], 0));
    assert_eq!(
        exercises::row_argmax_on_device(dev, &[], 0, 0).unwrap_err(),
        DeviceRouterError::Router(RouterError::NoExperts)
    );
    assert_eq!(
        exercises::row_argmax_on_device(dev, &[0.0; 7], 2, 4)
            .unwrap_err()
            .to_string(),
        "keys [T, E] has 7 elements, expected 8"
    );
}

/// Exercise 3: on the fused kernel's routing of every regime, and of a k = 32 routing over 1000
/// experts, each row's (id, weight) pairs sorted by id on the host; k = 33 is a typed error.
#[test]
#[ignore = "an exercise: tools/steps exercises 5"]
fn exercise_3_each_row_sorted_by_id_with_its_weights() {
    let dev = device();
    let mut routings: Vec<ch01_router::routing::Routing> = REGIMES
        .iter()
        .map(|n| {
            let r = regime(n).unwrap();
            route_logits_fused(
                dev,
                &r.config,
                r.rows,
                r.experts,
                &r.logits_f32(),
                r.bias.as_deref(),
            )
            .unwrap()
        })
        .collect();
    let wide = patterned(37 * 1000, 57, 2.0);
    routings
        .push(route_logits_fused(dev, &RouterConfig::qwen3(32), 37, 1000, &wide, None).unwrap());
    for routing in &routings {
        let (got, launched) = record_launches(|| exercises::sort_by_id_on_device(dev, routing));
        let got = got.unwrap();
        assert_eq!(
            launched,
            ["ch05_exercises::ex_sort_by_id"],
            "k = {}",
            routing.k
        );
        assert_eq!((got.rows, got.k), (routing.rows, routing.k));
        for r in 0..routing.rows {
            let mut want: Vec<(u32, u32)> = routing
                .row_ids(r)
                .iter()
                .zip(routing.row_weights(r))
                .map(|(&e, w)| (e, w.to_bits()))
                .collect();
            want.sort_unstable();
            let have: Vec<(u32, u32)> = got
                .row_ids(r)
                .iter()
                .zip(got.row_weights(r))
                .map(|(&e, w)| (e, w.to_bits()))
                .collect();
            assert_eq!(have, want, "row {r}, k = {}", routing.k);
        }
    }
    let empty = ch01_router::routing::Routing::empty(8);
    let (got, launched) = record_launches(|| exercises::sort_by_id_on_device(dev, &empty));
    assert_eq!((got.unwrap().rows, launched.len()), (0, 0));
    let too_many = ch01_router::routing::Routing {
        rows: 1,
        k: 33,
        ids: (0..33).collect(),
        weights: vec![0.0; 33],
    };
    assert!(matches!(
        exercises::sort_by_id_on_device(dev, &too_many).unwrap_err(),
        DeviceRouterError::Limit {
            limit: 32,
            got: 33,
            ..
        }
    ));
}
