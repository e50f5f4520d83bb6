//! Chapter 12's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 12`, which is
//! `cargo test -p ch12-parallel --test exercises -- --ignored`.

use ch01_router::inputs::patterned;
use ch01_router::Routing;
use ch02_grouped::{MoeConfig, MoeWeights};
use ch12_parallel::exercises::{combine, dispatch, rank_w13};
use ch12_parallel::{tensor_slice, DispatchPlan};

/// Exercise 1: against the chapter's own cut, expert by expert, for 1, 2 and 4 ranks.
#[test]
#[ignore = "an exercise: tools/steps exercises 12"]
fn exercise_1_a_ranks_gate_up_rows() {
    let c = MoeConfig {
        hidden: 8,
        intermediate: 12,
        experts: 3,
        router: ch01_router::RouterConfig::qwen3(2),
        shared: None,
    };
    let w = MoeWeights::patterned(&c, 5, 0.5, false);
    let block = 2 * 12 * 8;
    for world in [1, 2, 4] {
        for rank in 0..world {
            let want = tensor_slice(&w, rank, world).unwrap().w13;
            let n = want.len() / 3;
            for e in 0..3 {
                let got = rank_w13(&w.w13[e * block..(e + 1) * block], 12, 8, rank, world);
                assert_eq!(
                    got,
                    want[e * n..(e + 1) * n],
                    "expert {e}, rank {rank} of {world}"
                );
            }
        }
    }
}

/// Exercise 2: against the chapter's dispatch plan, on a routing with a rank that gets nothing.
#[test]
#[ignore = "an exercise: tools/steps exercises 12"]
fn exercise_2_the_dispatch() {
    let ids: Vec<u32> = vec![5, 0, 7, 1, 1, 6, 2, 3, 7, 4];
    let routing = Routing {
        rows: 5,
        k: 2,
        weights: vec![0.5; 10],
        ids: ids.clone(),
    };
    for (per_rank, world) in [(2, 4), (4, 2), (8, 1), (1, 8)] {
        let plan = DispatchPlan::new(&routing, per_rank, world);
        let (counts, at) = dispatch(&ids, per_rank, world);
        assert_eq!(counts, plan.counts, "{world} ranks");
        let want: Vec<usize> = plan.at.iter().map(|&a| a as usize).collect();
        assert_eq!(at, want, "{world} ranks");
    }
}

/// Exercise 3: bit for bit against the same sums written out, with and without a shared expert.
#[test]
#[ignore = "an exercise: tools/steps exercises 12"]
fn exercise_3_the_combine_in_slot_order() {
    let (rows, k, h) = (3, 3, 4);
    // Values far apart in size, so that another order of the additions changes bits.
    let back: Vec<f32> = patterned(rows * k * h, 7, 1.0)
        .iter()
        .enumerate()
        .map(|(i, v)| v * [1e8, 1.0, 1e-8][i % 3])
        .collect();
    let at: Vec<usize> = vec![4, 0, 8, 1, 5, 2, 7, 3, 6];
    let shared = patterned(rows * h, 8, 1.0);
    for s in [None, Some(shared.as_slice())] {
        let got = combine(&back, &at, s, k, h);
        for t in 0..rows {
            for c in 0..h {
                let y = |j: usize| back[at[t * k + j] * h + c];
                let mut want = ((0.0f32 + y(0)) + y(1)) + y(2);
                if let Some(s) = s {
                    want += s[t * h + c];
                }
                assert_eq!(
                    got[t * h + c].to_bits(),
                    want.to_bits(),
                    "token {t}, column {c}"
                );
            }
        }
    }
}
