//! Chapter 2's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! `kernels/ch02_exercises.cu`, and passes on your solution (or on the answers, with
//! `--features answers`). They are ignored in a plain `cargo test`; run them with
//! `tools/steps exercises 2`, which is `cargo test -p ch02-grouped --test exercises -- --ignored`.
//! The kernel runs on the backend `MOE_BACKEND` selects (the GPU when there is one).

use ch02_grouped::conformance::oracle;
use ch02_grouped::exercises;
use ch02_grouped::regimes::{regime, REGIMES};
use ch02_grouped::{Dtype, GroupPlan, GroupedDevice, MoeLayer};
use moe_kernels::record_launches;
use moe_kernels::testing::device;

/// Exercise 1, against the chapter's own plan on every regime.
#[test]
#[ignore = "an exercise: tools/steps exercises 2"]
fn exercise_1_groups_pairs_by_expert_stably() {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let o = oracle(&r, Dtype::F32);
        let e = r.weights.config.experts;
        let want = GroupPlan::new(&o.routing, e).unwrap();
        let (offsets, token_of) = exercises::group_by_expert(&o.routing, e);
        assert_eq!(offsets, want.offsets, "{name}: offsets");
        assert_eq!(token_of, want.token_of, "{name}: token_of");
    }
}

/// Exercise 2: the layer with its shared expert folded in as expert E gives the same output as
/// the layer with a separate shared expert (f32, on the device, within the f32 tolerance).
#[test]
#[ignore = "an exercise: tools/steps exercises 2"]
fn exercise_2_shared_expert_as_one_more_routed_expert() {
    let r = regime("large_prefill").unwrap();
    let o = oracle(&r, Dtype::F32);
    let (w, routing) = exercises::shared_as_routed(&r.weights, &o.routing).unwrap();
    assert_eq!(w.config.experts, r.weights.config.experts + 1);
    assert!(w.config.shared.is_none() && w.shared.is_none());
    let layer = GroupedDevice::new(device(), &w, Dtype::F32).unwrap();
    let got = layer.experts(&r.hidden, &routing).unwrap();
    ch02_grouped::compare::check_output(
        "shared expert folded in",
        &o.out,
        &got,
        ch02_grouped::compare::Tolerance::F32,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // A shared expert of another size, or a gated one, cannot be folded: a typed error each.
    let g = regime("gated_shared_expert").unwrap();
    let og = oracle(&g, Dtype::F32);
    assert!(exercises::shared_as_routed(&g.weights, &og.routing).is_err());
    let mut gated = r.weights.clone();
    gated.config.shared.as_mut().unwrap().gated = true;
    gated.shared.as_mut().unwrap().gate = Some(vec![0.5; gated.config.hidden]);
    gated.validate().unwrap();
    assert!(
        exercises::shared_as_routed(&gated, &o.routing).is_err(),
        "a gated shared expert weighs σ(x·g), not 1: it cannot be a routed expert of weight 1"
    );
}

/// Exercise 3: the counts of every regime, in one launch, against the plan's.
#[test]
#[ignore = "an exercise: tools/steps exercises 2"]
fn exercise_3_counts_pairs_on_the_device_in_one_launch() {
    let dev = device();
    for name in REGIMES {
        let r = regime(name).unwrap();
        let o = oracle(&r, Dtype::F32);
        let e = r.weights.config.experts;
        let plan = GroupPlan::new(&o.routing, e).unwrap();
        let want: Vec<i32> = (0..e).map(|x| plan.count(x) as i32).collect();
        // Out-of-range ids must be skipped, not counted and not written out of bounds.
        let mut ids: Vec<i32> = o.routing.ids.iter().map(|&x| x as i32).collect();
        ids.extend([-1, e as i32, i32::MAX]);
        let buf = dev.upload(&ids).unwrap();
        let (got, launched) = record_launches(|| exercises::count_pairs_on_device(dev, &buf, e));
        assert_eq!(got.unwrap(), want, "{name}");
        assert_eq!(
            launched,
            vec!["ch02_exercises::ex_count_pairs".to_string()],
            "{name}"
        );
    }
}
