//! A MoE layer's weights, packed the way every kernel of the book reads them.
//!
//! `w13` [E, 2I, H] holds each expert's gate rows, then its up rows, so one GEMM of a token's
//! hidden state with an expert's slice gives `[gate | up]`, the input of SwiGLU; `w2` [E, H, I]
//! holds each expert's down projection. This is the fused form transformers 5.x and the engines
//! use (`gate_up_proj`, `down_proj`); the Hub's checkpoints store one tensor per expert and
//! projection, and [`crate::checkpoint`] packs them at load.
//!
//! Weights live on the host in f32 whatever their file type: bf16 and f16 values are exact in
//! f32, so nothing is lost, and [`MoeWeights::rounded`] gives the bf16 values a bf16 layer
//! computes with.

use crate::config::{Dtype, MoeConfig, SharedExpert};
use crate::error::{expect_len, MoeError};
use ch01_router::inputs::patterned;

/// The shared expert's weights: `w13` [2·Is, H] (gate rows, then up rows), `w2` [H, Is], and
/// Qwen2-MoE's gate `[H]` when the config says it is gated.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedWeights {
    pub w13: Vec<f32>,
    pub w2: Vec<f32>,
    pub gate: Option<Vec<f32>>,
}

// ANCHOR: packed_weights
/// Everything a MoE layer holds.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeWeights {
    pub config: MoeConfig,
    /// The router's gate `[E, H]` (replicated on every device of a real deployment).
    pub gate: Vec<f32>,
    /// The selection bias `[E]` (DeepSeek-V3's `e_score_correction_bias`), when the model has one.
    pub bias: Option<Vec<f32>>,
    /// `[E, 2I, H]`
    pub w13: Vec<f32>,
    /// `[E, H, I]`
    pub w2: Vec<f32>,
    pub shared: Option<SharedWeights>,
}
// ANCHOR_END: packed_weights

/// The sizes of a layer's tensors, wherever they live (host vectors here, device buffers in
/// chapter 4): what [`check_sizes`] compares with the config.
pub struct WeightSizes {
    pub gate: usize,
    pub w13: usize,
    pub w2: usize,
    pub shared: Option<SharedSizes>,
}

/// The shared expert's tensor sizes; `gate` is `None` without Qwen2-MoE's gate.
pub struct SharedSizes {
    pub w13: usize,
    pub w2: usize,
    pub gate: Option<usize>,
}

/// Checks the config (with the router's bias) and that every tensor has the size it implies: a
/// typed error naming the first tensor that does not.
pub fn check_sizes(
    c: &MoeConfig,
    bias: Option<&[f32]>,
    sizes: &WeightSizes,
) -> Result<(), MoeError> {
    c.validate(bias)?;
    let (h, e) = (c.hidden, c.experts);
    expect_len("gate [E, H]", sizes.gate, e * h)?;
    expect_len("w13 [E, 2I, H]", sizes.w13, c.w13_len())?;
    expect_len("w2 [E, H, I]", sizes.w2, c.w2_len())?;
    match (c.shared, &sizes.shared) {
        (None, None) => {}
        (Some(s), Some(w)) => {
            expect_len("shared expert w13 [2Is, H]", w.w13, 2 * s.intermediate * h)?;
            expect_len("shared expert w2 [H, Is]", w.w2, h * s.intermediate)?;
            match (s.gated, w.gate) {
                (true, Some(g)) => expect_len("shared expert gate [H]", g, h)?,
                (false, None) => {}
                (gated, _) => {
                    return Err(MoeError::Config {
                        field: "shared expert gate",
                        expected: if gated { "a [H] gate" } else { "no gate" }.into(),
                        found: if gated { "none" } else { "a gate" }.into(),
                    })
                }
            }
        }
        (want, _) => {
            return Err(MoeError::Config {
                field: "shared expert",
                expected: if want.is_some() {
                    "its weights"
                } else {
                    "none"
                }
                .into(),
                found: if want.is_some() { "none" } else { "weights" }.into(),
            })
        }
    }
    Ok(())
}

impl MoeWeights {
    /// Checks the config and that every tensor has the size it implies.
    pub fn validate(&self) -> Result<(), MoeError> {
        check_sizes(
            &self.config,
            self.bias.as_deref(),
            &WeightSizes {
                gate: self.gate.len(),
                w13: self.w13.len(),
                w2: self.w2.len(),
                shared: self.shared.as_ref().map(|w| SharedSizes {
                    w13: w.w13.len(),
                    w2: w.w2.len(),
                    gate: w.gate.as_ref().map(Vec::len),
                }),
            },
        )
    }

    /// Expert `e`'s `[2I, H]` slice of `w13`.
    pub fn w13_of(&self, e: usize) -> &[f32] {
        let n = 2 * self.config.intermediate * self.config.hidden;
        &self.w13[e * n..(e + 1) * n]
    }

    /// Expert `e`'s `[H, I]` slice of `w2`.
    pub fn w2_of(&self, e: usize) -> &[f32] {
        let n = self.config.hidden * self.config.intermediate;
        &self.w2[e * n..(e + 1) * n]
    }

    /// The weights a layer of compute type `dtype` multiplies by: for bf16, the experts' and
    /// the shared expert's matrices rounded to bf16 (exact for a bf16 checkpoint). The router's
    /// gate and bias stay f32: the router computes in f32.
    pub fn rounded(&self, dtype: Dtype) -> MoeWeights {
        if dtype == Dtype::F32 {
            return self.clone();
        }
        MoeWeights {
            w13: dtype.round_all(&self.w13),
            w2: dtype.round_all(&self.w2),
            shared: self.shared.as_ref().map(|s| SharedWeights {
                w13: dtype.round_all(&s.w13),
                w2: dtype.round_all(&s.w2),
                gate: s.gate.as_ref().map(|g| dtype.round_all(g)),
            }),
            ..self.clone()
        }
    }

    /// Deterministic weights for `config` from `seed` (chapter 1's generator, one salt per
    /// tensor): the gate in ±`gate_scale`, expert matrices in ±1/√(fan-in) so activations keep
    /// their size through the layer, and, when `with_bias`, a bias in ±0.05 around 0.
    pub fn patterned(config: &MoeConfig, seed: u64, gate_scale: f32, with_bias: bool) -> Self {
        let (h, i, e) = (config.hidden, config.intermediate, config.experts);
        let salt = |n: u64| seed * 100 + n;
        let shared = config.shared.map(
            |SharedExpert {
                 intermediate,
                 gated,
             }| SharedWeights {
                w13: patterned(2 * intermediate * h, salt(5), 1.0 / (h as f32).sqrt()),
                w2: patterned(
                    h * intermediate,
                    salt(6),
                    1.0 / (intermediate as f32).sqrt(),
                ),
                gate: gated.then(|| patterned(h, salt(7), 1.0 / (h as f32).sqrt())),
            },
        );
        MoeWeights {
            config: config.clone(),
            gate: patterned(e * h, salt(1), gate_scale),
            bias: with_bias.then(|| patterned(e, salt(2), 0.05)),
            w13: patterned(config.w13_len(), salt(3), 1.0 / (h as f32).sqrt()),
            w2: patterned(config.w2_len(), salt(4), 1.0 / (i as f32).sqrt()),
            shared,
        }
    }
}
