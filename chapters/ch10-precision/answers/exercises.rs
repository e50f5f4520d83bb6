//! Chapter 10's exercises, answered (built in place of `src/exercises.rs` with
//! `--features answers`).

// ANCHOR: exercise_1
/// Exercise 1: the distinct bf16 values of `bias`, compared by their bits.
pub fn distinct_in_bf16(bias: &[f32]) -> usize {
    let mut bits: Vec<u16> = bias
        .iter()
        .map(|&b| half::bf16::from_f32(b).to_bits())
        .collect();
    bits.sort_unstable();
    bits.dedup();
    bits.len()
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: rows whose sorted ids differ.
pub fn flips(want: &[u32], got: &[u32], k: usize) -> usize {
    assert_eq!(want.len(), got.len(), "two [T, k] selections");
    want.chunks(k)
        .zip(got.chunks(k))
        .filter(|(a, b)| {
            let (mut a, mut b) = (a.to_vec(), b.to_vec());
            a.sort_unstable();
            b.sort_unstable();
            a != b
        })
        .count()
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: the pairwise sum.
pub fn pairwise_sum(v: &[f32]) -> f32 {
    match v.len() {
        0 => 0.0,
        1 => v[0],
        n => {
            let (a, b) = v.split_at(n / 2);
            pairwise_sum(a) + pairwise_sum(b)
        }
    }
}
// ANCHOR_END: exercise_3
