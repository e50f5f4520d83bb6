//! Chapter 7's exercises, answered (built with `--features answers` in place of
//! `src/exercises.rs`).

// ANCHOR: exercise_1
/// Exercise 1: the rotary embedding, pairs `(2i, 2i + 1)` (see the stub).
pub fn rope_interleaved(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (i, (&c, &s)) in cos.iter().zip(sin).enumerate() {
        let (a, b) = (x[2 * i], x[2 * i + 1]);
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = b * c + a * s;
    }
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the common prefix of two greedy runs (see the stub).
pub fn agreeing_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
// ANCHOR_END: exercise_2
