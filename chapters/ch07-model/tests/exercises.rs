//! Chapter 7's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 7`, which is
//! `cargo test -p ch07-model --test exercises -- --ignored`.

use ch07_model::cpu::{rope, rope_angles};
use ch07_model::exercises::{agreeing_prefix, rope_interleaved};

/// Exercise 1: the interleaved rotation is the rotate-half one on permuted dimensions (pair i is
/// (2i, 2i+1) instead of (i, i + R/2)); it keeps each pair's length; position 0 changes nothing;
/// the dimensions past the rotary part pass unchanged.
#[test]
#[ignore = "an exercise: tools/steps exercises 7"]
fn exercise_1_the_interleaved_rotary_embedding() {
    let d = 8;
    let x: Vec<f32> = (0..d).map(|i| 0.3 * i as f32 - 1.0).collect();
    for (pos, rotary) in [(0, 8), (5, 8), (17, 4), (3, 2)] {
        let (cos, sin) = rope_angles(pos, rotary, 10000.0);
        let mut got = x.clone();
        rope_interleaved(&mut got, &cos, &sin);
        // The same rotation through the rotate-half form: move pair i to (i, i + R/2) and back.
        let half = rotary / 2;
        let mut perm = x.clone();
        for i in 0..half {
            perm[i] = x[2 * i];
            perm[i + half] = x[2 * i + 1];
        }
        rope(&mut perm, &cos, &sin);
        let mut want = x.clone();
        for i in 0..half {
            want[2 * i] = perm[i];
            want[2 * i + 1] = perm[i + half];
        }
        assert_eq!(got, want, "position {pos}, rotary {rotary}");
        assert_eq!(
            got[rotary..],
            x[rotary..],
            "position {pos}: the rest passes"
        );
        if pos == 0 {
            assert_eq!(got, x);
        } else {
            assert_ne!(got, x, "position {pos} must rotate");
        }
    }
}

/// Exercise 2: the common prefix, on runs that part at the start, in the middle, never, and
/// runs of different lengths.
#[test]
#[ignore = "an exercise: tools/steps exercises 7"]
fn exercise_2_the_agreeing_prefix() {
    assert_eq!(agreeing_prefix(&[1, 2, 3], &[4, 2, 3]), 0);
    assert_eq!(agreeing_prefix(&[1, 2, 3, 4], &[1, 2, 9, 4]), 2);
    assert_eq!(agreeing_prefix(&[5, 6, 7], &[5, 6, 7]), 3);
    assert_eq!(agreeing_prefix(&[5, 6], &[5, 6, 7]), 2);
    assert_eq!(agreeing_prefix(&[], &[1]), 0);
}
