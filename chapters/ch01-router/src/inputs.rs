//! Deterministic test inputs, without an RNG crate: the same values on every machine, in every
//! language a later chapter might port the generator to.

/// One step of splitmix64 (Steele, Lea, Flood 2014): a cheap bijective mix of 64 bits whose
/// outputs pass the usual statistical tests, so consecutive indices give unrelated values.
fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ANCHOR: patterned
/// `len` values in `[-scale, scale)`, a pure function of `(index, salt)`.
///
/// Each value hashes its index with the salt and keeps the top 24 bits, which an f32 holds
/// exactly, so `2u - 1` is exact and the only rounding is the final multiplication by `scale`.
/// Different salts give unrelated sequences: one salt per tensor of a test case.
pub fn patterned(len: usize, salt: u64, scale: f32) -> Vec<f32> {
    let seed = splitmix64(salt);
    (0..len)
        .map(|i| {
            let h = splitmix64(seed ^ i as u64);
            let u = (h >> 40) as f32 / (1u32 << 24) as f32; // [0, 1), 24 bits
            (2.0 * u - 1.0) * scale
        })
        .collect()
}
// ANCHOR_END: patterned

/// The router input of the book's exercise 1 and of `tools/make-input router`: `rows` x
/// `experts` logits in [-3, 3) and a bias around the toy layer's 8 (8 ± 0.05; GLM-5.3-Flash's lie near 11.7), from `seed`.
pub fn router_input(rows: usize, experts: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let logits = patterned(rows * experts, seed * 1000 + 101, 3.0);
    let bias = patterned(experts, seed * 1000 + 102, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect();
    (logits, bias)
}
