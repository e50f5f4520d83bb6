//! One library GEMM as a backend receives it: plain numbers and addresses, no buffers, so the
//! backend trait can name it without knowing about devices.

/// Element types a library GEMM takes and gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    Bf16,
}

/// `y[rows, out] = x[rows, in] · w[out, in]ᵀ` (or `+=` with `accumulate`), every matrix
/// row-major with the given leading dimensions (in elements), products accumulated in fp32.
/// This is a linear layer without a bias: the shape every expert GEMM of the book has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmCall {
    pub rows: usize,
    pub in_features: usize,
    pub out_features: usize,
    pub x: u64,
    pub ldx: usize,
    pub w: u64,
    pub ldw: usize,
    pub y: u64,
    pub ldy: usize,
    /// The type of `x` and `w`.
    pub input: Dtype,
    /// The type of `y`.
    pub output: Dtype,
    pub accumulate: bool,
}
