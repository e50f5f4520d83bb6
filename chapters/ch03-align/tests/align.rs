//! The three implementations of the layout on every regime and every backend: the literal sort
//! and pad, the CPU reference and the kernel give the same bits; garbage ids never make the
//! kernel write out of bounds; launch counts; determinism; typed errors.

use ch03_align::device::geometry::ALIGN_ONE_BLOCK_MAX_PAIRS;
use ch03_align::device::{
    align_arrival_on_device, align_on_device, align_unchecked_on_device, split, DeviceAlign,
};
use ch03_align::layout::{capacity, check, choose_block_m, max_tiles, padding_share};
use ch03_align::literal::align_literal;
use ch03_align::reference::align_reference;
use ch03_align::regimes::{regime, REGIMES};
use ch03_align::text::draw;
use ch03_align::AlignError;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{record_launches, Device};

// ANCHOR: every_regime
fn kernel_matches_the_literal_sort_on_every_regime(dev: &'static Device) {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let pairs = r.ids.len();
        let lit = align_literal(&r.ids, r.experts, r.block_m);
        let reference = align_reference(&r.ids, r.experts, r.block_m);
        assert_eq!(reference, lit, "{name}: reference vs literal");
        let got = align_on_device(dev, &r.ids, r.experts, r.block_m).unwrap();
        if pairs == 0 {
            assert_eq!(got.num_tokens_post_padded, 0, "{name}");
            continue;
        }
        assert_same_bits(
            &format!("{name}: sorted_ids"),
            &got.sorted_ids,
            &lit.sorted_ids,
        );
        assert_same_bits(
            &format!("{name}: expert_ids"),
            &got.expert_ids,
            &lit.expert_ids,
        );
        assert_eq!(
            got.num_tokens_post_padded, lit.num_tokens_post_padded,
            "{name}"
        );
        let text = format!(
            "{name}: {} (T {} k {} E {} BLOCK_M {})\n{}",
            r.about,
            r.tokens,
            r.k,
            r.experts,
            r.block_m,
            draw(&lit, pairs, r.block_m, 12)
        );
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(format!("ch03_{name}"), text);
        });
    }
}
// ANCHOR_END: every_regime

/// The regimes do what their names say.
fn regimes_do_what_their_names_say(_dev: &'static Device) {
    let a = |name: &str| {
        let r = regime(name).unwrap();
        let out = align_reference(&r.ids, r.experts, r.block_m);
        (r, out)
    };
    let (r, out) = a("all_to_one_expert");
    assert_eq!(out.tiles(r.block_m), 40usize.div_ceil(16));
    assert!(out.expert_ids[..out.tiles(r.block_m)]
        .iter()
        .all(|&e| e == 5));
    let (r, out) = a("block_boundary_exact");
    assert_eq!(
        out.num_tokens_post_padded as usize,
        r.ids.len(),
        "no padding at all"
    );
    let (r, out) = a("tiny_batch_many_empty_experts");
    // 3 tokens x 4 distinct experts: 12 pairs; each expert that got one has one tile, and no
    // other expert appears.
    let mut used: Vec<i64> = r.ids.clone();
    used.sort_unstable();
    used.dedup();
    assert_eq!(out.tiles(r.block_m), used.len());
    for &e in &out.expert_ids[..out.tiles(r.block_m)] {
        assert!(
            used.contains(&(e as i64)),
            "expert {e} has a tile but no pair"
        );
    }
    let (r, out) = a("imbalanced_routing");
    let tiles = &out.expert_ids[..out.tiles(r.block_m)];
    assert!(
        (0..r.experts as i32).any(|e| tiles.iter().filter(|&&x| x == e).count() >= 2),
        "some expert spans several tiles"
    );
    let (r, _) = a("five_warps_last_one_short");
    assert_eq!((r.ids.len(), r.experts), (4 * 32 + 1, 96));
    let (r, _) = a("one_block_limit");
    assert_eq!(r.ids.len(), ALIGN_ONE_BLOCK_MAX_PAIRS);
    let (r, _) = a("one_pair_past_one_block");
    assert_eq!(r.ids.len(), ALIGN_ONE_BLOCK_MAX_PAIRS + 1);
    assert_eq!(split(r.ids.len()), (2, ALIGN_ONE_BLOCK_MAX_PAIRS));
    let (r, out) = a("block_m_1");
    assert_eq!(out.num_tokens_post_padded as usize, r.ids.len());
    let (r, _) = a("one_past_one_block");
    assert_eq!(r.ids.len(), ALIGN_ONE_BLOCK_MAX_PAIRS + 8);
    let (r, _) = a("large_prefill");
    assert_eq!(split(r.ids.len()), (64, 512));
    let (r, _) = a("long_prefill_uneven_blocks");
    let (blocks, per_block) = split(r.ids.len());
    assert_eq!((blocks, per_block), (43, 1536));
    assert!(r.ids.len() < blocks * per_block, "the last block is short");
    let (r, _) = a("k1_experts_not_a_power_of_two");
    assert!(!r.experts.is_power_of_two() && r.k == 1);
    // Every regime but the constructed ones routes each token to k distinct experts.
    for name in REGIMES {
        let r = regime(name).unwrap();
        for row in r.ids.chunks(r.k.max(1)) {
            let mut v = row.to_vec();
            v.sort_unstable();
            v.dedup();
            assert!(
                v.len() == row.len() || *name == "all_to_one_expert",
                "{name}"
            );
        }
    }
}

fn one_launch_up_to_the_one_block_limit_then_two(dev: &'static Device) {
    for (name, want) in [
        ("decode_1tok", &["align_one_block"][..]),
        ("five_warps_last_one_short", &["align_one_block"]),
        ("one_block_limit", &["align_one_block"]),
        ("one_past_one_block", &["align_count", "align_scatter"]),
        ("one_pair_past_one_block", &["align_count", "align_scatter"]),
        ("e512_block_m_1024", &["align_count", "align_scatter"]),
        ("large_prefill", &["align_count", "align_scatter"]),
        (
            "long_prefill_uneven_blocks",
            &["align_count", "align_scatter"],
        ),
    ] {
        let r = regime(name).unwrap();
        let a = DeviceAlign::new(dev, r.ids.len(), r.experts, r.block_m).unwrap();
        assert_eq!(a.launches(), want.len(), "{name}");
        let out = a.alloc_outputs(dev).unwrap();
        let ids = dev
            .upload(&r.ids.iter().map(|&e| e as i32).collect::<Vec<_>>())
            .unwrap();
        let (res, launched) = record_launches(|| a.enqueue(&ids, &out));
        res.unwrap();
        let names: Vec<&str> = launched
            .iter()
            .map(|n| n.rsplit("::").next().unwrap_or(n))
            .collect();
        assert_eq!(names, want, "{name}");
    }
}

/// Same input, same bits, every run (integer atomics only count; the scatter is stable).
fn same_bits_every_run(dev: &'static Device) {
    for name in ["spec_decode_6rows", "large_prefill"] {
        let r = regime(name).unwrap();
        let first = align_on_device(dev, &r.ids, r.experts, r.block_m).unwrap();
        for _ in 0..5 {
            assert_eq!(
                align_on_device(dev, &r.ids, r.experts, r.block_m).unwrap(),
                first,
                "{name}"
            );
        }
    }
}

/// The measured twin with an atomic cursor: every run holds the same pairs as the stable order's,
/// and the tiles and total are the same; only the order inside a run may differ (on the
/// emulator it rarely does: its threads take turns).
fn arrival_order_holds_the_same_pairs(dev: &'static Device) {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let want = align_reference(&r.ids, r.experts, r.block_m);
        let got = align_arrival_on_device(dev, &r.ids, r.experts, r.block_m).unwrap();
        assert_eq!(got.expert_ids, want.expert_ids, "{name}");
        assert_eq!(
            got.num_tokens_post_padded, want.num_tokens_post_padded,
            "{name}"
        );
        let bm = r.block_m;
        // Sorting inside each tile is not enough (a pair could move between tiles of one
        // expert), so compare each expert's whole run, sorted.
        let per_expert = |a: &ch03_align::Aligned| {
            let mut m = std::collections::BTreeMap::<i32, Vec<i32>>::new();
            for (tile, &e) in a.expert_ids.iter().enumerate() {
                if e >= 0 {
                    m.entry(e)
                        .or_default()
                        .extend_from_slice(&a.sorted_ids[tile * bm..(tile + 1) * bm]);
                }
            }
            m.values_mut().for_each(|v| v.sort_unstable());
            m
        };
        assert_eq!(per_expert(&got), per_expert(&want), "{name}");
        let tail = want.num_tokens_post_padded as usize;
        assert_eq!(got.sorted_ids[tail..], want.sorted_ids[tail..], "{name}");
    }
}

/// Garbage ids (negative, past E, huge) are skipped by the kernel, which stays in bounds and
/// lays out the valid pairs exactly as the reference does; the host refuses them with a typed
/// error first.
fn garbage_ids_stay_in_bounds(dev: &'static Device) {
    for (pairs, experts) in [(37usize, 60usize), (3000, 288), (40000, 500)] {
        let ids: Vec<i32> = (0..pairs)
            .map(|p| match p % 7 {
                0 => -1,
                1 => experts as i32,
                2 => i32::MAX,
                3 => i32::MIN,
                _ => ((p * 31) % experts) as i32,
            })
            .collect();
        let wide: Vec<i64> = ids.iter().map(|&e| e as i64).collect();
        let bm = 16;
        let got = align_unchecked_on_device(dev, &ids, experts, bm).unwrap();
        let want = align_reference(&wide, experts, bm);
        assert_eq!(got, want, "{pairs} pairs");
        assert_eq!(
            align_on_device(dev, &wide, experts, bm).unwrap_err(),
            AlignError::IdOutOfRange {
                pair: 0,
                id: -1,
                experts
            }
        );
    }
}

fn bad_inputs_are_typed_errors(dev: &'static Device) {
    assert_eq!(check(&[0], 8, 24), Err(AlignError::BlockM { value: 24 }));
    assert_eq!(check(&[0], 8, 0), Err(AlignError::BlockM { value: 0 }));
    assert_eq!(check(&[0], 0, 16), Err(AlignError::NoExperts));
    assert_eq!(
        check(&[3, 9], 8, 16),
        Err(AlignError::IdOutOfRange {
            pair: 1,
            id: 9,
            experts: 8
        })
    );
    assert!(matches!(
        DeviceAlign::new(dev, 8, 1000, 16).err().unwrap(),
        AlignError::Limit {
            what: "experts",
            ..
        }
    ));
    assert!(matches!(
        DeviceAlign::new(dev, 1 << 30, 512, 1024).err().unwrap(),
        AlignError::Limit {
            what: "padded slots",
            ..
        }
    ));
    // An empty batch through enqueue itself (what chapter 4 calls): nothing to place, the total 0.
    let a = DeviceAlign::new(dev, 0, 16, 16).unwrap();
    let out = a.alloc_outputs(dev).unwrap();
    let none = dev.alloc::<i32>(0).unwrap();
    a.enqueue(&none, &out).unwrap();
    assert_eq!(out.num_post.to_vec().unwrap(), vec![0]);
    // Buffers of the wrong size.
    let a = DeviceAlign::new(dev, 8, 16, 16).unwrap();
    let out = a.alloc_outputs(dev).unwrap();
    let ids = dev.upload(&[1i32; 7]).unwrap();
    assert_eq!(
        a.enqueue(&ids, &out).unwrap_err(),
        AlignError::Shape {
            what: "ids [T·k]",
            expected: 8,
            got: 7
        }
    );
}

moe_kernels::backend_tests!(
    kernel_matches_the_literal_sort_on_every_regime,
    regimes_do_what_their_names_say,
    one_launch_up_to_the_one_block_limit_then_two,
    same_bits_every_run,
    arrival_order_holds_the_same_pairs,
    garbage_ids_stay_in_bounds,
    bad_inputs_are_typed_errors,
);

#[test]
fn capacity_bounds_the_padded_total() {
    // Exhaustively over small shapes, on the worst routing: as many experts as possible hold one
    // pair (each pads to a whole tile), the rest of the pairs on expert 0. The padded total must
    // fit, and where there are no more pairs than experts it fills the capacity exactly.
    for experts in 1..12 {
        for bm in [1, 2, 4, 8, 16] {
            for pairs in 0..40 {
                let ids: Vec<i64> = (0..pairs)
                    .map(|p| if p < experts { p as i64 } else { 0 })
                    .collect();
                let a = align_reference(&ids, experts, bm);
                let total = a.num_tokens_post_padded as usize;
                let cap = capacity(pairs, experts, bm);
                assert!(
                    total <= cap,
                    "{pairs} pairs, {experts} experts, BLOCK_M {bm}"
                );
                if pairs <= experts {
                    assert_eq!(total, cap, "{pairs} pairs, {experts} experts, BLOCK_M {bm}");
                }
                assert!(total / bm <= max_tiles(pairs, experts, bm));
            }
        }
    }
}

#[test]
fn block_m_rule_and_padding_share() {
    assert_eq!(choose_block_m(8, 128), 16);
    assert_eq!(choose_block_m(4096 * 8, 128), 128);
    assert_eq!(choose_block_m(64 * 8, 128), 16);
    assert_eq!(choose_block_m(512 * 8, 128), 32);
    // One pair per expert, tiles of 16: 15 of every 16 slots are padding.
    assert!((padding_share(128, 128, 16) - 15.0 / 16.0).abs() < 1e-12);
    // 32 pairs per expert: no padding with tiles of 16 or 32.
    assert_eq!(padding_share(32 * 128, 128, 32), 0.0);
    assert_eq!(padding_share(0, 128, 16), 0.0);
}
