//! Chapter 3's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! `kernels/ch03_exercises.cu`, and passes on your solution (or on the answers, with
//! `--features answers`). They are ignored in a plain `cargo test`; run them with
//! `tools/steps exercises 3`, which is `cargo test -p ch03-align --test exercises -- --ignored`.
//! The kernel runs on the backend `MOE_BACKEND` selects (the GPU when there is one).

use ch03_align::exercises;
use ch03_align::layout::{capacity, max_tiles, Aligned};
use ch03_align::literal::align_literal;
use ch03_align::reference::align_reference;
use ch03_align::regimes::{regime, REGIMES};
use ch03_align::AlignError;
use moe_kernels::record_launches;
use moe_kernels::testing::device;

/// Every way to give `pairs` pairs to `experts` experts, as counts per expert.
fn compositions(pairs: usize, experts: usize, f: &mut impl FnMut(&[usize])) {
    fn go(left: usize, slots: &mut Vec<usize>, experts: usize, f: &mut impl FnMut(&[usize])) {
        if slots.len() + 1 == experts {
            slots.push(left);
            f(slots);
            slots.pop();
            return;
        }
        for c in 0..=left {
            slots.push(c);
            go(left - c, slots, experts, f);
            slots.pop();
        }
    }
    go(pairs, &mut Vec::new(), experts, f);
}

/// Exercise 1, against an exhaustive search: every routing of up to 12 pairs over up to 5
/// experts, laid out by the CPU reference; the largest padded total is the answer, and no
/// routing passes it.
#[test]
#[ignore = "an exercise: tools/steps exercises 3"]
fn exercise_1_the_tight_capacity_is_the_worst_routing() {
    for experts in 1..=5 {
        for block_m in [1, 2, 4, 8] {
            for pairs in 0..=12 {
                let mut worst = 0;
                compositions(pairs, experts, &mut |counts| {
                    let ids: Vec<i64> = counts
                        .iter()
                        .enumerate()
                        .flat_map(|(e, &c)| std::iter::repeat_n(e as i64, c))
                        .collect();
                    let a = align_reference(&ids, experts, block_m);
                    worst = worst.max(a.num_tokens_post_padded as usize);
                });
                let tight = exercises::tight_capacity(pairs, experts, block_m);
                let shape = format!("{pairs} pairs, {experts} experts, BLOCK_M {block_m}");
                assert_eq!(tight, worst, "{shape}");
                // The chapter's buffers hold it: `capacity` is at most one tile's worth larger,
                // and `max_tiles` tiles are exactly the tight bound.
                assert!(tight <= capacity(pairs, experts, block_m), "{shape}");
                assert!(
                    capacity(pairs, experts, block_m) - tight < block_m,
                    "{shape}"
                );
                assert_eq!(
                    max_tiles(pairs, experts, block_m) * block_m,
                    tight,
                    "{shape}"
                );
            }
        }
    }
}

/// The runs of tiles of one expert: `(expert, first slot, end slot)`.
fn runs(a: &Aligned, block_m: usize) -> Vec<(i32, usize, usize)> {
    let mut out: Vec<(i32, usize, usize)> = Vec::new();
    for (tile, &e) in a.expert_ids[..a.tiles(block_m)].iter().enumerate() {
        match out.last_mut() {
            Some((last, _, end)) if *last == e => *end += block_m,
            _ => out.push((e, tile * block_m, (tile + 1) * block_m)),
        }
    }
    out
}

/// `got` holds the same pairs in each expert's run as `want`, in any order; everything else
/// (tiles, total, placeholders past the total) is the same bits. Returns how many runs hold
/// their pairs in another order than `want`.
fn same_runs_as_sets(what: &str, got: &Aligned, want: &Aligned, block_m: usize) -> usize {
    assert_eq!(got.expert_ids, want.expert_ids, "{what}: expert_ids");
    assert_eq!(
        got.num_tokens_post_padded, want.num_tokens_post_padded,
        "{what}: total"
    );
    assert_eq!(
        got.sorted_ids.len(),
        want.sorted_ids.len(),
        "{what}: capacity"
    );
    let total = want.num_tokens_post_padded as usize;
    assert_eq!(
        got.sorted_ids[total..],
        want.sorted_ids[total..],
        "{what}: past the total"
    );
    let mut reordered = 0;
    for (e, first, end) in runs(want, block_m) {
        let (g, w) = (&got.sorted_ids[first..end], &want.sorted_ids[first..end]);
        let (mut gs, mut ws) = (g.to_vec(), w.to_vec());
        gs.sort_unstable();
        ws.sort_unstable();
        assert_eq!(
            gs, ws,
            "{what}: the run of expert {e}, slots {first}..{end}"
        );
        reordered += usize::from(g != w);
    }
    reordered
}

/// Exercise 2: on every regime, and on garbage ids, the atomic cursor lays out the same pairs
/// per expert as the stable kernel's literal sort, in one launch. The order within a run may
/// differ; the test says how often it did (on the emulator, lanes take their atomics one after
/// another, so the order is the same each run but not the pairs' order; on a GPU it changes).
#[test]
#[ignore = "an exercise: tools/steps exercises 3"]
fn exercise_2_the_atomic_cursor_gives_the_same_runs_as_sets() {
    let dev = device();
    let mut reordered = Vec::new();
    for name in REGIMES {
        let r = regime(name).unwrap();
        let ids: Vec<i32> = r.ids.iter().map(|&e| e as i32).collect();
        let want = align_literal(&r.ids, r.experts, r.block_m);
        let (got, launched) =
            record_launches(|| exercises::align_atomic_on_device(dev, &ids, r.experts, r.block_m));
        let got = got.unwrap_or_else(|e| panic!("{name}: {e}"));
        let n = same_runs_as_sets(name, &got, &want, r.block_m);
        reordered.push(format!("{name} {n}"));
        let want_launches = if ids.is_empty() { 0 } else { 1 };
        assert_eq!(launched.len(), want_launches, "{name}: {launched:?}");
        if want_launches == 1 {
            assert_eq!(
                launched[0], "ch03_exercises::ex_align_atomic_cursor",
                "{name}"
            );
        }
    }
    // Garbage ids are skipped, never written out of bounds.
    let experts = 60;
    let ids: Vec<i32> = (0..3000)
        .map(|p| match p % 7 {
            0 => -1,
            1 => experts,
            2 => i32::MAX,
            3 => i32::MIN,
            _ => (p * 31) % experts,
        })
        .collect();
    let wide: Vec<i64> = ids.iter().map(|&e| e as i64).collect();
    let got = exercises::align_atomic_on_device(dev, &ids, experts as usize, 16).unwrap();
    same_runs_as_sets(
        "garbage ids",
        &got,
        &align_reference(&wide, experts as usize, 16),
        16,
    );
    // Shapes the kernel cannot take are typed errors.
    assert_eq!(
        exercises::align_atomic_on_device(dev, &[0], 8, 24).unwrap_err(),
        AlignError::BlockM { value: 24 }
    );
    assert!(matches!(
        exercises::align_atomic_on_device(dev, &[0], 5000, 16).unwrap_err(),
        AlignError::Limit {
            what: "experts",
            ..
        }
    ));
    eprintln!(
        "runs in another order than the stable sort, per regime: {}",
        reordered.join(", ")
    );
}

/// Exercise 3, against a search through the CPU reference: evenly spread ids (pair `p` on
/// expert `p mod E`) laid out with each BLOCK_M, the cost counted from the layout.
#[test]
#[ignore = "an exercise: tools/steps exercises 3"]
fn exercise_3_best_block_m_minimises_padding_plus_tiles() {
    for experts in [8, 60, 64, 128, 256, 384] {
        for tokens in [1usize, 2, 4, 8, 16, 64, 100, 512, 1000, 4096, 8192] {
            let pairs = tokens * 8;
            let ids: Vec<i64> = (0..pairs).map(|p| (p % experts) as i64).collect();
            let layouts: Vec<(usize, usize, usize)> = [16, 32, 64, 128]
                .into_iter()
                .map(|bm| {
                    let a = align_reference(&ids, experts, bm);
                    (bm, a.num_tokens_post_padded as usize, a.tiles(bm))
                })
                .collect();
            for tile_cost in [0, 1, 8, 32, 200, 100_000] {
                let mut want = layouts[0];
                for &l in &layouts[1..] {
                    if l.1 + tile_cost * l.2 < want.1 + tile_cost * want.2 {
                        want = l;
                    }
                }
                let got = exercises::best_block_m(pairs, experts, tile_cost);
                assert_eq!(
                    got, want.0,
                    "{pairs} pairs over {experts} experts, tile cost {tile_cost}: {layouts:?} (BLOCK_M, slots, tiles)"
                );
            }
            // Padding alone never asks for a bigger tile.
            assert_eq!(exercises::best_block_m(pairs, experts, 0), 16);
        }
    }
}
