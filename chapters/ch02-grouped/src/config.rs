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
    /// Qwen2-MoE's `shared_expert_gate`: the shared output is multiplied by σ(x · g), g [H].
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
        positive("hidden", self.hidden)?;
        positive("intermediate", self.intermediate)?;
        positive("experts", self.experts)?;
        if let Some(s) = self.shared {
            positive("shared expert intermediate", s.intermediate)?;
            below_2_31("shared expert intermediate", 2 * s.intermediate)?;
        }
        // The kernels take sizes as `int`s (their index arithmetic is 64-bit).
        below_2_31("hidden", self.hidden)?;
        below_2_31("2 x intermediate", 2 * self.intermediate)?;
        below_2_31("experts", self.experts)?;
        self.router.validate(self.experts, bias)?;
        Ok(())
    }

    /// Elements of the packed `w13` [E, 2I, H].
    pub fn w13_len(&self) -> usize {
        self.experts * 2 * self.intermediate * self.hidden
    }

    /// Elements of the packed `w2` [E, H, I].
    pub fn w2_len(&self) -> usize {
        self.experts * self.hidden * self.intermediate
    }

    /// Elements of one expert's `w13` slice and `w2` slice together: `3 · I · H`.
    pub fn expert_len(&self) -> usize {
        3 * self.intermediate * self.hidden
    }
}
