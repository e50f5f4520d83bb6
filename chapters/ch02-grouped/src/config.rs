//! A MoE layer's sizes and router, and its compute type.

use crate::error::MoeError;
use ch01_router::RouterConfig;

/// The shared expert: one more SwiGLU MLP that every token runs, added to the routed sum
/// (DeepSeek-V3, GLM-4-MoE: `n_shared_experts` of them, fused into one MLP of
/// `n_shared_experts × moe_intermediate_size`; Qwen2-MoE: `shared_expert_intermediate_size`,
/// with a sigmoid gate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExpert {
    /// Its intermediate size.
    pub intermediate: usize,
    /// Qwen2-MoE's `shared_expert_gate`: the shared output is multiplied by σ(x · g), g `[H]`.
    pub gated: bool,
}

/// One MoE layer: `experts` SwiGLU experts of `hidden → intermediate → hidden`, the router
/// that picks `router.k` of them per token, and an optional shared expert.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// H: the model's hidden size.
    pub hidden: usize,
    /// I: each expert's intermediate size (`moe_intermediate_size`).
    pub intermediate: usize,
    /// E: routed experts.
    pub experts: usize,
    /// Chapter 1's router: k, scoring, renormalisation, groups, routed scaling.
    pub router: RouterConfig,
    pub shared: Option<SharedExpert>,
}

/// The type the experts compute in. The router always computes in f32 (chapter 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// The engines' path: bf16 weights and activations, fp32 accumulation. The hidden states
    /// are rounded to bf16 on entry, and so is each expert's `gate|up` output and its SwiGLU;
    /// the down projection's output, the weighted sum and the layer's output stay f32.
    Bf16,
    /// Everything in f32: for oracles and fp32 checkpoints.
    F32,
}

impl Dtype {
    /// `x` as this type holds it (bf16: rounded to nearest even), back in f32.
    pub fn round(self, x: f32) -> f32 {
        match self {
            Dtype::F32 => x,
            Dtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// [`Dtype::round`] of every element.
    pub fn round_all(self, v: &[f32]) -> Vec<f32> {
        v.iter().map(|&x| self.round(x)).collect()
    }

    /// Bytes per element of weights and activations.
    pub fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }

    /// `bf16` or `f32`, as the command line spells it.
    pub fn parse(s: &str) -> Option<Dtype> {
        match s {
            "bf16" => Some(Dtype::Bf16),
            "f32" => Some(Dtype::F32),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
        })
    }
}

impl MoeConfig {
    /// Checks the sizes and the router (k against E, groups, scaling; the bias, when given,
    /// against E). The first message names the most basic thing that is wrong.
    pub fn validate(&self, bias: Option<&[f32]>) -> Result<(), MoeError> {
        let positive = |field: &'static str, v: usize| {
            if v == 0 {
                Err(MoeError::Config {
                    field,
                    expected: "at least 1".into(),
                    found: "0".into(),
                })
            } else {
                Ok(())
            }
        };
        let below_2_31 = |field: &'static str, v: usize| {
            if v > i32::MAX as usize {
                Err(MoeError::Config {
                    field,
                    expected: format!("at most {}", i32::MAX),
                    found: v.to_string(),
                })
            } else {
                Ok(())
            }
        };
        // `2 · v` (the rows of a `w13`) must be an `int` too; compared without computing `2 · v`.
        let twice_below_2_31 = |field: &'static str, v: usize| {
            if v > i32::MAX as usize / 2 {
                Err(MoeError::Config {
                    field,
                    expected: format!("at most {} (twice it must fit in an `int`)", i32::MAX / 2),
                    found: v.to_string(),
                })
            } else {
                Ok(())
            }
        };
        positive("hidden", self.hidden)?;
        positive("intermediate", self.intermediate)?;
        positive("experts", self.experts)?;
        // The kernels take sizes as `int`s (their index arithmetic is 64-bit).
        below_2_31("hidden", self.hidden)?;
        twice_below_2_31("intermediate", self.intermediate)?;
        below_2_31("experts", self.experts)?;
        if let Some(s) = self.shared {
            positive("shared expert intermediate", s.intermediate)?;
            twice_below_2_31("shared expert intermediate", s.intermediate)?;
        }
        // Every tensor of the layer must be allocatable in f32: its element count fits in usize
        // and its bytes in isize::MAX (Rust's limit on one allocation). Checked here, so that
        // `w13_len`, `w2_len` and `expert_len` below never overflow on a validated config.
        let (e, h, i) = (self.experts, self.hidden, self.intermediate);
        fits_in_memory("experts x hidden", "the router's gate [E, H]", &[e, h])?;
        fits_in_memory(
            "experts x 2 x intermediate x hidden",
            "the packed w13 [E, 2I, H]",
            &[e, 2, i, h],
        )?;
        fits_in_memory(
            "experts x hidden x intermediate",
            "the packed w2 [E, H, I]",
            &[e, h, i],
        )?;
        if let Some(s) = self.shared {
            fits_in_memory(
                "2 x shared expert intermediate x hidden",
                "the shared expert's w13 [2Is, H]",
                &[2, s.intermediate, h],
            )?;
        }
        self.router.validate(self.experts, bias)?;
        Ok(())
    }

    // The three lengths below saturate. On a validated config they are the exact products:
    // [`MoeConfig::validate`] has checked (with `checked_mul`) that each fits in usize. On a
    // config that was not validated they stop at `usize::MAX` instead of wrapping, so a caller
    // that skipped `validate` gets a failed allocation or a length mismatch, never a wrapped,
    // too small length.

    /// Elements of the packed `w13` [E, 2I, H].
    pub fn w13_len(&self) -> usize {
        self.experts
            .saturating_mul(2)
            .saturating_mul(self.intermediate)
            .saturating_mul(self.hidden)
    }

    /// Elements of the packed `w2` [E, H, I].
    pub fn w2_len(&self) -> usize {
        self.experts
            .saturating_mul(self.hidden)
            .saturating_mul(self.intermediate)
    }

    /// Elements of one expert's `w13` slice and `w2` slice together: `3 · I · H`.
    pub fn expert_len(&self) -> usize {
        3usize
            .saturating_mul(self.intermediate)
            .saturating_mul(self.hidden)
    }
}

/// Checks that a tensor of `factors` elements can be allocated in f32: the product fits in
/// usize (`checked_mul`) and its bytes are at most `isize::MAX`.
fn fits_in_memory(field: &'static str, what: &str, factors: &[usize]) -> Result<(), MoeError> {
    let max = isize::MAX as usize / std::mem::size_of::<f32>();
    match factors.iter().try_fold(1usize, |p, &f| p.checked_mul(f)) {
        Some(n) if n <= max => Ok(()),
        _ => Err(MoeError::Config {
            field,
            expected: format!(
                "at most {max} elements ({what} in f32 must be at most isize::MAX bytes)"
            ),
            // Every factor is below 2³¹ by now: a product of four fits in u128.
            found: factors
                .iter()
                .try_fold(1u128, |p, &f| p.checked_mul(f as u128))
                .map_or_else(|| "more than 2^128".to_string(), |n| n.to_string()),
        }),
    }
}
