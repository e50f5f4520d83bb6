//! The parts of the decoder that are not this book's subject, written plainly on the CPU in f32:
//! matrix-vector products, RMSNorm, the rotary embedding, one head's attention over the cache,
//! SiLU and the argmax. Each follows transformers' definition (read for 5.17); none is fast, and
//! none needs to be for the tiny models the tests run.

// ANCHOR: linear
/// `x [T, n_in] · wᵀ (+ b)` with `w [n_out, n_in]`, `b [n_out]`: `[T, n_out]`, as `nn.Linear`.
pub fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, n_in: usize, n_out: usize) -> Vec<f32> {
    debug_assert_eq!(w.len(), n_out * n_in);
    let rows = x.len() / n_in;
    let mut y = vec![0f32; rows * n_out];
    for (xr, yr) in x.chunks_exact(n_in).zip(y.chunks_exact_mut(n_out)) {
        for (o, (yo, wr)) in yr.iter_mut().zip(w.chunks_exact(n_in)).enumerate() {
            *yo = dot(xr, wr) + b.map_or(0.0, |b| b[o]);
        }
    }
    y
}
// ANCHOR_END: linear

/// `Σ aᵢ·bᵢ` in f32, over eight running sums (so the compiler vectorises it).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

// ANCHOR: rms_norm
/// RMSNorm of every row of `x [T, n]`: `w ⊙ x / sqrt(mean(x²) + eps)`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let n = w.len();
    let mut y = vec![0f32; x.len()];
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let mean = xr.iter().map(|&v| v * v).sum::<f32>() / n as f32;
        let r = 1.0 / (mean + eps).sqrt();
        for ((yv, &xv), &wv) in yr.iter_mut().zip(xr).zip(w) {
            *yv = wv * (xv * r);
        }
    }
    y
}
// ANCHOR_END: rms_norm

/// The rotary embedding's angles for position `pos`: `cos` and `sin` of `pos · θ^(−2i/R)` for
/// `i < R/2`, R = `rotary_dim`, in f32 as transformers computes them.
pub fn rope_angles(pos: usize, rotary_dim: usize, theta: f64) -> (Vec<f32>, Vec<f32>) {
    (0..rotary_dim / 2)
        .map(|i| {
            // inv_freq = 1 / θ^(2i / R) in f32, then times the position in f32.
            let exponent = (2 * i) as f32 / rotary_dim as f32;
            let inv_freq = (1.0 / theta.powf(exponent as f64)) as f32;
            let angle = inv_freq * pos as f32;
            ((angle as f64).cos() as f32, (angle as f64).sin() as f32)
        })
        .unzip()
}

// ANCHOR: rope
/// Rotates one head `x [D]` in place for the angles of [`rope_angles`]: transformers'
/// "rotate half" convention, where dimension `i` pairs with `i + R/2` (not with `i + 1`), on the
/// first `R` dimensions; the others pass unchanged (GLM's partial rotary).
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * cos[i] - b * sin[i];
        x[i + half] = b * cos[i] + a * sin[i];
    }
}
// ANCHOR_END: rope

// ANCHOR: attend
/// One query head `q [D]` against `n` cached positions of its KV head: `keys`, `values`
/// `[n, stride]` with the head at offset `at`: `softmax(q·kⱼ / √D) · v`, `[D]`.
pub fn attend(q: &[f32], keys: &[f32], values: &[f32], stride: usize, at: usize) -> Vec<f32> {
    let d = q.len();
    let scale = 1.0 / (d as f32).sqrt();
    let scores: Vec<f32> = keys
        .chunks_exact(stride)
        .map(|k| dot(q, &k[at..at + d]) * scale)
        .collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = scores.iter().map(|&s| (s - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    let mut out = vec![0f32; d];
    for (p, v) in e.iter().zip(values.chunks_exact(stride)) {
        for (o, &vv) in out.iter_mut().zip(&v[at..at + d]) {
            *o += p / sum * vv;
        }
    }
    out
}
// ANCHOR_END: attend

/// `x · σ(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// The id of the largest value, the lowest id on a tie (as `torch.argmax`); a NaN is never
/// chosen over a number.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] || v[best].is_nan() && !x.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// The gap between the largest and the second-largest value (infinite with one value).
pub fn top2_gap(v: &[f32]) -> f32 {
    let best = argmax(v) as usize;
    let second = v
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best)
        .map(|(_, &x)| x)
        .fold(f32::NEG_INFINITY, f32::max);
    v[best] - second
}
