//! What distinguishes one model family's router from another's: the scoring function, `k`,
//! renormalisation, grouped selection and the routed scaling factor. The selection bias is not
//! part of the config: it is a tensor of the checkpoint, passed beside the logits.

use crate::error::RouterError;

/// How a logit becomes a score (step 2 of the router).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoring {
    /// Softmax over the row (Mixtral, Qwen3): scores depend on every logit of the token.
    Softmax,
    /// σ(x) per expert (DeepSeek-V3, GLM-5, Kimi): each score depends on its own logit only.
    Sigmoid,
    /// √(ln(1 + eˣ)) per expert (DeepSeek-V4): unbounded above, unlike the sigmoid.
    SqrtSoftplus,
}

/// DeepSeek-V3's grouped selection: pick the best `topk_group` of `n_group` contiguous groups
/// of experts first, then the `k` best experts inside them (it bounds how many devices a token
/// is sent to when the groups live on different GPUs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grouping {
    pub n_group: usize,
    pub topk_group: usize,
}

/// One router's configuration. Built from a preset and adjusted field by field.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    /// Experts selected per token.
    pub k: usize,
    pub scoring: Scoring,
    /// Divide the selected scores by their sum (`norm_topk_prob` in Hugging Face configs).
    pub renormalize: bool,
    /// `None`: select from all experts.
    pub grouping: Option<Grouping>,
    /// Multiplies every weight after renormalisation; 1.0 = no scaling.
    pub routed_scaling: f32,
}

/// As the examples' flags spell it: `softmax`, `sigmoid`, `sqrt-softplus`.
impl std::fmt::Display for Scoring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scoring::Softmax => "softmax",
            Scoring::Sigmoid => "sigmoid",
            Scoring::SqrtSoftplus => "sqrt-softplus",
        })
    }
}

/// One line for a reader, e.g. `top-8 of sigmoid scores, renormalised, routed scaling 2.5` or
/// `top-8 of sigmoid scores in the best 4 of 8 groups, renormalised, routed scaling 1`.
impl std::fmt::Display for RouterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "top-{} of {} scores", self.k, self.scoring)?;
        if let Some(g) = self.grouping {
            write!(f, " in the best {} of {} groups", g.topk_group, g.n_group)?;
        }
        let renorm = if self.renormalize {
            "renormalised"
        } else {
            "not renormalised"
        };
        write!(f, ", {renorm}, routed scaling {}", self.routed_scaling)
    }
}

impl RouterConfig {
    /// Qwen3-MoE: softmax, top-`k` (8 of 128 in Qwen3-30B-A3B), `norm_topk_prob = true`.
    pub fn qwen3(k: usize) -> Self {
        RouterConfig {
            k,
            scoring: Scoring::Softmax,
            renormalize: true,
            grouping: None,
            routed_scaling: 1.0,
        }
    }

    /// Mixtral 8x7B: softmax over 8 experts, top-2, renormalised.
    pub fn mixtral() -> Self {
        RouterConfig {
            k: 2,
            ..Self::qwen3(2)
        }
    }

    /// DeepSeek-V3: sigmoid scores, selection bias, 8 of 256 experts from the best 4 of 8
    /// groups, renormalised, then scaled by 2.5.
    pub fn deepseek_v3() -> Self {
        RouterConfig {
            k: 8,
            scoring: Scoring::Sigmoid,
            renormalize: true,
            grouping: Some(Grouping {
                n_group: 8,
                topk_group: 4,
            }),
            routed_scaling: 2.5,
        }
    }

    /// GLM-5 family as the router article uses it: sigmoid + selection bias, renormalised, no
    /// groups, no scaling (the weights of a token sum to 1).
    pub fn glm5(k: usize) -> Self {
        RouterConfig {
            k,
            scoring: Scoring::Sigmoid,
            renormalize: true,
            grouping: None,
            routed_scaling: 1.0,
        }
    }

    /// DeepSeek-V4: √softplus scores, renormalised, no groups, no scaling.
    pub fn deepseek_v4(k: usize) -> Self {
        RouterConfig {
            k,
            scoring: Scoring::SqrtSoftplus,
            renormalize: true,
            grouping: None,
            routed_scaling: 1.0,
        }
    }

    /// Checks k, grouping and bias against the number of experts.
    ///
    /// Order: no experts, k, groups, scaling, bias length, bias values, so the first message
    /// names the most basic thing that is wrong.
    pub fn validate(&self, n_experts: usize, bias: Option<&[f32]>) -> Result<(), RouterError> {
        if n_experts == 0 {
            return Err(RouterError::NoExperts);
        }
        if self.k == 0 {
            return Err(RouterError::KZero);
        }
        if self.k > n_experts {
            return Err(RouterError::KTooLarge {
                k: self.k,
                experts: n_experts,
            });
        }
        if let Some(g) = self.grouping {
            // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace's MSRV is 1.85).
            #[allow(clippy::manual_is_multiple_of)]
            let divides = g.n_group != 0 && n_experts % g.n_group == 0;
            if !divides {
                return Err(RouterError::GroupsDoNotDivide {
                    n_group: g.n_group,
                    experts: n_experts,
                });
            }
            if g.topk_group > g.n_group {
                return Err(RouterError::TopkGroupTooLarge {
                    topk_group: g.topk_group,
                    n_group: g.n_group,
                });
            }
            let per_group = n_experts / g.n_group;
            if g.topk_group * per_group < self.k {
                return Err(RouterError::GroupsTooFewForK {
                    topk_group: g.topk_group,
                    per_group,
                    k: self.k,
                });
            }
        }
        if !(self.routed_scaling.is_finite() && self.routed_scaling > 0.0) {
            return Err(RouterError::BadScale {
                value: self.routed_scaling,
            });
        }
        if let Some(b) = bias {
            if b.len() != n_experts {
                return Err(RouterError::BiasLength {
                    len: b.len(),
                    experts: n_experts,
                });
            }
            if let Some((expert, &value)) = b.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(RouterError::BiasNotFinite { expert, value });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples print a router in one line; the presets as a reader should read them.
    #[test]
    fn a_router_reads_as_one_line() {
        assert_eq!(
            RouterConfig::qwen3(8).to_string(),
            "top-8 of softmax scores, renormalised, routed scaling 1"
        );
        let grouped = RouterConfig {
            grouping: Some(Grouping {
                n_group: 8,
                topk_group: 4,
            }),
            renormalize: false,
            routed_scaling: 2.5,
            ..RouterConfig::qwen3(8)
        };
        assert_eq!(
            grouped.to_string(),
            "top-8 of softmax scores in the best 4 of 8 groups, not renormalised, routed scaling 2.5"
        );
        assert_eq!(Scoring::SqrtSoftplus.to_string(), "sqrt-softplus");
    }
}
