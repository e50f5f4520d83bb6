//! Chapter 11's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 11`, which is `cargo test -p
//! ch11-merged-gate --test exercises -- --ignored`.

use ch01_router::inputs::patterned;
use ch11_merged_gate::exercises;
use ch11_merged_gate::radix::{order, radix_select_row};

/// Exercise 1: the passes, against the host's literal loop, on rows with and without ties at the
/// cut, and on a row where k takes everything (no pass).
#[test]
#[ignore = "an exercise: tools/steps exercises 11"]
fn exercise_1_passes_match_the_literal_loop() {
    for (salt, n, k, ties) in [(1u64, 896, 16, false), (2, 896, 16, true), (3, 64, 1, true)] {
        let mut keys = patterned(n, salt, 1.0);
        if ties {
            for i in (0..n).step_by(3) {
                keys[i] = 0.5;
            }
        }
        let ordered: Vec<u32> = keys.iter().map(|&x| order(x)).collect();
        let (_, want) = radix_select_row(&ordered, k);
        assert_eq!(exercises::passes_needed(&ordered, k), want, "salt {salt}");
    }
    let all: Vec<u32> = (0..8).map(|i| order(i as f32)).collect();
    assert_eq!(exercises::passes_needed(&all, 8), 0);
    // Every key equal: the ids decide, down to the last bits.
    let equal = vec![order(0.25); 100];
    assert_eq!(
        exercises::passes_needed(&equal, 7),
        radix_select_row(&equal, 7).1
    );
}

/// Exercise 2: the sort's top-k is radix select's, ties and -inf included.
#[test]
#[ignore = "an exercise: tools/steps exercises 11"]
fn exercise_2_sort_agrees_with_radix_select() {
    let mut keys = patterned(300, 9, 2.0);
    for i in (0..300).step_by(11) {
        keys[i] = 1.0;
    }
    keys[5] = f32::NEG_INFINITY;
    for k in [1, 16, 32, 300] {
        let ordered: Vec<u32> = keys.iter().map(|&x| order(x)).collect();
        let (want, _) = radix_select_row(&ordered, k);
        assert_eq!(exercises::topk_by_sort(&keys, k), want, "k {k}");
    }
}

/// Exercise 3: the bytes at one row and at 1,024 rows of Kimi K3's front, counted by hand.
#[test]
#[ignore = "an exercise: tools/steps exercises 11"]
fn exercise_3_activation_bytes() {
    // One row: separate 2·2·7168 + 3584·2 + 896·4·2; merged 7168·2 + 4480·4·2 + 3584·2.
    assert_eq!(
        exercises::activation_bytes(1, 7168, 896, 3584),
        (28672 + 7168 + 7168, 14336 + 35840 + 7168)
    );
    let (s, m) = exercises::activation_bytes(1024, 7168, 896, 3584);
    assert_eq!((s, m), (1024 * 43008, 1024 * 57344));
}
