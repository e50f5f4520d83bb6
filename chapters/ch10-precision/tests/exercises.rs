//! Chapter 10's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 10`, which is
//! `cargo test -p ch10-precision --test exercises -- --ignored`.

use ch01_router::inputs::patterned;
use ch10_precision::exercises::{distinct_in_bf16, flips, pairwise_sum};
use ch10_precision::flips::{bias_of, distinct_bf16};
use ch10_precision::shapes::{GLM53, KIMI_K3, SHAPES};

/// Exercise 1: small cases by hand, then every shape's synthetic biases against the crate's
/// count (GLM-5.3-Flash's range keeps 7 values, as the article's Figure 4 shows for the real ones).
#[test]
#[ignore = "an exercise: tools/steps exercises 10"]
fn exercise_1_distinct_bf16_values() {
    assert_eq!(distinct_in_bf16(&[]), 0);
    // 11.54 and 11.55 round to the same bf16 (neighbours 0.0625 apart); 11.96 does not.
    assert_eq!(distinct_in_bf16(&[11.54, 11.55, 11.96]), 2);
    assert_eq!(distinct_in_bf16(&[-0.76, -0.759, 0.15]), 3);
    for shape in &SHAPES {
        for sp in shape.spreads {
            let b = bias_of(shape, sp);
            assert_eq!(
                distinct_in_bf16(&b),
                distinct_bf16(&b),
                "{} {}",
                shape.name,
                sp.name
            );
        }
    }
    assert_eq!(distinct_in_bf16(&GLM53.biases(288, 7)), 7);
    assert!(distinct_in_bf16(&KIMI_K3.biases(288, 7)) > 100);
}

/// Exercise 2: the same set in another order is no flip; one id changed is.
#[test]
#[ignore = "an exercise: tools/steps exercises 10"]
fn exercise_2_flips_compare_sets() {
    let want = [1, 2, 3, 4, 5, 6];
    assert_eq!(flips(&want, &[3, 2, 1, 6, 5, 4], 3), 0);
    assert_eq!(flips(&want, &[1, 2, 7, 4, 5, 6], 3), 1);
    assert_eq!(flips(&want, &[1, 2, 4, 3, 5, 6], 3), 2);
    assert_eq!(flips(&[], &[], 8), 0);
}

/// The definition of exercise 3, written out for the test.
fn split_sum(v: &[f32]) -> f32 {
    if v.is_empty() {
        return 0.0;
    }
    if v.len() == 1 {
        return v[0];
    }
    let mid = v.len() / 2;
    split_sum(&v[..mid]) + split_sum(&v[mid..])
}

/// Exercise 3: the exact bits of the definition, odd lengths included; and on 4096 products
/// of bf16-sized values its error against the f64 sum is below the plain loop's.
#[test]
#[ignore = "an exercise: tools/steps exercises 10"]
fn exercise_3_pairwise_sum() {
    assert_eq!(pairwise_sum(&[]), 0.0);
    assert_eq!(pairwise_sum(&[2.5]), 2.5);
    // 1e8 + 1 + 1 + ... : the order decides which ones survive.
    let v = [1e8f32, 1.0, 1.0, 1.0, 1.0, -1e8];
    assert_eq!(pairwise_sum(&v).to_bits(), split_sum(&v).to_bits());
    for n in [3usize, 7, 100, 4095, 4096] {
        let v = patterned(n, 77 + n as u64, 1.0);
        assert_eq!(
            pairwise_sum(&v).to_bits(),
            split_sum(&v).to_bits(),
            "n = {n}"
        );
    }
    let v: Vec<f32> = patterned(4096, 78, 1.0)
        .iter()
        .map(|&x| 1.0 + x.abs())
        .collect();
    let exact: f64 = v.iter().map(|&x| x as f64).sum();
    let mut seq = 0f32;
    for &x in &v {
        seq += x;
    }
    let (pe, se) = (
        (pairwise_sum(&v) as f64 - exact).abs(),
        (seq as f64 - exact).abs(),
    );
    assert!(pe < se, "pairwise {pe} vs sequential {se}");
}
