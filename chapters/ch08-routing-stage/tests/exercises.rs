//! Chapter 8's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 8`, which is
//! `cargo test -p ch08-routing-stage --test exercises -- --ignored`. The stage runs on the backend
//! `MOE_BACKEND` selects (the GPU when there is one).

use ch01_router::inputs::patterned;
use ch01_router::regimes::{regime, REGIMES};
use ch03_align::{capacity, choose_block_m};
use ch08_routing_stage::exercises::{first_slots, scatter};
use ch08_routing_stage::route_stage;
use moe_kernels::testing::device;

/// Exercise 1: by hand, then against the stage's `offsets` on every regime.
#[test]
#[ignore = "an exercise: tools/steps exercises 8"]
fn exercise_1_first_slots_are_the_stages_offsets() {
    assert_eq!(first_slots(&[3, 0, 5, 1], 4), vec![0, 4, 4, 12, 16]);
    assert_eq!(first_slots(&[16, 1], 16), vec![0, 16, 32]);
    assert_eq!(first_slots(&[0, 0], 8), vec![0, 0, 0]);
    assert_eq!(first_slots(&[], 8), vec![0]);
    for name in REGIMES {
        let r = regime(name).unwrap();
        let bm = choose_block_m(r.rows * r.k, r.experts);
        let s = route_stage(
            device(),
            &r.config,
            r.rows,
            r.experts,
            bm,
            &r.logits_f32(),
            r.bias.as_deref(),
        )
        .unwrap();
        assert_eq!(first_slots(&s.counts, bm), s.offsets, "{name}");
    }
}

/// Exercise 2: by hand (the placeholder is the number of pairs), then against the stage's
/// `sorted_ids` on every regime and on a GLM-like batch of 300 rows.
#[test]
#[ignore = "an exercise: tools/steps exercises 8"]
fn exercise_2_scatter_is_the_stages_layout() {
    // Pairs 0..6 to experts 2 0 2 1 0 2, BLOCK_M 2: expert 0 at 0, 1 at 2, 2 at 4.
    let got = scatter(&[2, 0, 2, 1, 0, 2], &[0, 2, 4, 8], 10);
    assert_eq!(got, vec![1, 4, 3, 6, 0, 2, 5, 6, 6, 6]);
    let mut cases: Vec<_> = REGIMES.iter().map(|n| regime(n).unwrap()).collect();
    let mut glm = regime("large_prefill").unwrap();
    glm.rows = 300;
    glm.experts = 288;
    cases.push(glm);
    for r in cases {
        let bm = choose_block_m(r.rows * r.k, r.experts);
        let logits = if r.experts == 288 {
            patterned(r.rows * r.experts, 0x0e8, 3.0)
        } else {
            r.logits_f32()
        };
        let bias = (r.experts == 288)
            .then(|| vec![8.0f32; 288])
            .or(r.bias.clone());
        let s = route_stage(
            device(),
            &r.config,
            r.rows,
            r.experts,
            bm,
            &logits,
            bias.as_deref(),
        )
        .unwrap();
        let cap = capacity(r.rows * r.k, r.experts, bm);
        assert_eq!(
            scatter(&s.routing.ids, &s.offsets, cap),
            s.aligned.sorted_ids,
            "{}",
            r.name
        );
    }
}
