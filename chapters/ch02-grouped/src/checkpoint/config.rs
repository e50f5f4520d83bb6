//! `config.json` → the model family and the layer's [`MoeConfig`].
//!
//! The family comes from `model_type`, else from `architectures` ([`detect_family`]); a config
//! that names neither a known `model_type` nor a known class is refused. Sizes (`hidden_size`,
//! `moe_intermediate_size`, the number of experts, `num_experts_per_tok`,
//! `shared_expert_intermediate_size`) are required. Flags that change what the router computes
//! (`norm_topk_prob`, `n_group`, `topk_group`, `routed_scaling_factor`, `n_shared_experts`) take
//! the default of transformers' config class for the family when absent (or `null`), so a config
//! computes here what it computes in transformers 5.17. Three fields are refused unless they say
//! what this loader (and transformers) computes: `hidden_act` must be `"silu"` (the experts are
//! SwiGLU); DeepSeek-V3's and GLM-4-MoE's `scoring_func` must be `"sigmoid"` and `topk_method`
//! `"noaux_tc"`. transformers 5.17 reads neither of these two (its routers always take the sigmoid
//! and the grouped selection), so a config that says otherwise would load as something it is not.

use super::error::CheckpointError;
use crate::config::{MoeConfig, SharedExpert};
use crate::error::MoeError;
use ch01_router::{Grouping, RouterConfig, RouterError, Scoring};
use serde_json::Value;
use std::fmt;

/// The model families whose MoE layers load. They differ in the config's field names, the
/// router, and the shared expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `qwen3_moe`: softmax top-k, no shared expert.
    Qwen3Moe,
    /// `qwen2_moe`: softmax top-k, a shared expert behind a sigmoid gate.
    Qwen2Moe,
    /// `deepseek_v3` (and Kimi-K2's `DeepseekV3ForCausalLM`): sigmoid scores, selection bias,
    /// grouped selection, routed scaling, shared experts.
    DeepseekV3,
    /// `glm4_moe`: DeepSeek-V3's router and shared experts under other defaults.
    Glm4Moe,
}

impl Family {
    /// The `model_type` of its `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Qwen3Moe => "qwen3_moe",
            Family::Qwen2Moe => "qwen2_moe",
            Family::DeepseekV3 => "deepseek_v3",
            Family::Glm4Moe => "glm4_moe",
        }
    }

    /// DeepSeek-V3's router: sigmoid, `e_score_correction_bias`, groups, `shared_experts`.
    pub fn is_deepseek_like(self) -> bool {
        matches!(self, Family::DeepseekV3 | Family::Glm4Moe)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Qwen3Moe => "Qwen3-MoE",
            Family::Qwen2Moe => "Qwen2-MoE",
            Family::DeepseekV3 => "DeepSeek-V3",
            Family::Glm4Moe => "GLM-4-MoE",
        })
    }
}

/// The `model_type`s this loader knows, and their families.
pub const MODEL_TYPES: [(&str, Family); 4] = [
    ("qwen3_moe", Family::Qwen3Moe),
    ("qwen2_moe", Family::Qwen2Moe),
    ("deepseek_v3", Family::DeepseekV3),
    ("glm4_moe", Family::Glm4Moe),
];

/// The `architectures` classes this loader knows, and their families.
pub const ARCHITECTURES: [(&str, Family); 4] = [
    ("Qwen3MoeForCausalLM", Family::Qwen3Moe),
    ("Qwen2MoeForCausalLM", Family::Qwen2Moe),
    ("DeepseekV3ForCausalLM", Family::DeepseekV3),
    ("Glm4MoeForCausalLM", Family::Glm4Moe),
];

/// The family a config describes: its `model_type` when this loader knows it; else (no
/// `model_type`, or another one, as Kimi-K2's `kimi_k2` with `DeepseekV3ForCausalLM`) the first
/// class of its `architectures` that it knows. Nothing else: a config is never placed in a family
/// by the fields it has, since another family's layer (Ling's `bailing_moe`, with `num_experts`
/// and `moe_intermediate_size`) has the same fields and computes something else.
pub fn detect_family(json: &Value) -> Result<Family, CheckpointError> {
    let model_type = json.get("model_type").and_then(Value::as_str);
    let architectures: Vec<String> = json
        .get("architectures")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let known = |table: &[(&str, Family)], name: &str| {
        table.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
    };
    model_type
        .and_then(|m| known(&MODEL_TYPES, m))
        .or_else(|| architectures.iter().find_map(|a| known(&ARCHITECTURES, a)))
        .ok_or_else(|| CheckpointError::UnknownFamily {
            model_type: model_type.map(String::from),
            architectures,
        })
}

/// Reads the fields of one config, saying which field was wrong.
struct Fields<'a>(&'a Value);

fn bad(field: &str, expected: &str, found: impl fmt::Display) -> CheckpointError {
    CheckpointError::Config {
        field: field.to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

impl Fields<'_> {
    /// The field's value; absent and `null` are both `None`.
    fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    fn count(&self, field: &str) -> Result<Option<usize>, CheckpointError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => match v.as_u64().map(usize::try_from) {
                Some(Ok(n)) => Ok(Some(n)),
                Some(Err(_)) => Err(bad(field, &format!("at most {}", usize::MAX), v)),
                None => Err(bad(field, "a non-negative integer", v)),
            },
        }
    }

    fn required_count(&self, field: &str) -> Result<usize, CheckpointError> {
        self.count(field)?
            .ok_or_else(|| bad(field, "a non-negative integer", "missing"))
    }

    fn flag(&self, field: &str, default: bool) -> Result<bool, CheckpointError> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| bad(field, "true or false", v)),
        }
    }

    fn number(&self, field: &str, default: f64) -> Result<f64, CheckpointError> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| bad(field, "a number", v)),
        }
    }

    fn text(&self, field: &str) -> Result<Option<&str>, CheckpointError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| bad(field, "a string", v)),
        }
    }

    /// The first of `names` present; if several are, they must agree (transformers 5.x writes
    /// Qwen3-MoE's `num_experts` as `num_local_experts`, the Hub's configs say `num_experts`).
    fn one_of(&self, names: &[&'static str]) -> Result<(&'static str, usize), CheckpointError> {
        let mut found: Option<(&'static str, usize)> = None;
        for &name in names {
            if let Some(n) = self.count(name)? {
                match found {
                    None => found = Some((name, n)),
                    Some((first, m)) if m != n => {
                        return Err(bad(name, &format!("{m}, as `{first}` says"), n))
                    }
                    Some(_) => {}
                }
            }
        }
        found.ok_or_else(|| bad(&names.join("` or `"), "a non-negative integer", "missing"))
    }
}

/// A layer's config as `config.json` gives it, with the names of the fields it came from, so a
/// value that [`MoeConfig::validate`] refuses is reported under its `config.json` name.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedConfig {
    pub family: Family,
    pub config: MoeConfig,
    /// The field that gave the number of experts (`num_experts`, `num_local_experts` or
    /// `n_routed_experts`).
    pub experts_field: &'static str,
}

/// Reads the layer's sizes and router from `config.json` and checks them (before any tensor is
/// read, so a bad config costs nothing).
pub fn parse_config(json: &Value) -> Result<ParsedConfig, CheckpointError> {
    if !json.is_object() {
        return Err(bad(
            "(the whole file)",
            "a JSON object",
            "another JSON value",
        ));
    }
    let family = detect_family(json)?;
    let f = Fields(json);
    // The experts (and the shared expert) are SwiGLU: `act(gate) · up` with act = SiLU. Every
    // family's transformers config defaults `hidden_act` to "silu"; another activation is another
    // layer.
    match f.text("hidden_act")? {
        None | Some("silu") => {}
        Some(other) => {
            return Err(bad(
                "hidden_act",
                "\"silu\" (the SwiGLU experts this loader computes)",
                format!("{other:?}"),
            ))
        }
    }
    let hidden = f.required_count("hidden_size")?;
    let intermediate = f.required_count("moe_intermediate_size")?;
    let k = f.required_count("num_experts_per_tok")?;
    let (experts_field, experts, router, shared, shared_overflow) = match family {
        Family::Qwen3Moe | Family::Qwen2Moe => {
            let (field, experts) = f.one_of(&["num_experts", "num_local_experts"])?;
            // transformers: Qwen3MoeConfig and Qwen2MoeConfig default `norm_topk_prob` to false.
            let router = RouterConfig {
                k,
                scoring: Scoring::Softmax,
                renormalize: f.flag("norm_topk_prob", false)?,
                grouping: None,
                routed_scaling: 1.0,
            };
            let shared = if family == Family::Qwen2Moe {
                match f.required_count("shared_expert_intermediate_size")? {
                    0 => None,
                    intermediate => Some(SharedExpert {
                        intermediate,
                        gated: true,
                    }),
                }
            } else {
                None
            };
            (field, experts, router, shared, None)
        }
        Family::DeepseekV3 | Family::Glm4Moe => {
            let (field, experts) = f.one_of(&["n_routed_experts", "num_local_experts"])?;
            // transformers' defaults: DeepseekV3Config n_group 8, topk_group 4, scaling 2.5;
            // Glm4MoeConfig n_group 1, topk_group 1, scaling 1.0; both norm_topk_prob true and
            // n_shared_experts 1.
            let (n_group, topk_group, scaling) = match family {
                Family::DeepseekV3 => (8, 4, 2.5),
                _ => (1, 1, 1.0),
            };
            let n_group = f.count("n_group")?.unwrap_or(n_group);
            let topk_group = f.count("topk_group")?.unwrap_or(topk_group);
            // transformers 5.17's DeepseekV3TopkRouter and Glm4MoeTopkRouter always score with the
            // sigmoid (`scores = router_logits.sigmoid()` in `forward`) and never read
            // `scoring_func`; so does this loader. A config that asks for another function says
            // something transformers does not compute: it is refused, not silently overridden.
            match f.text("scoring_func")? {
                None | Some("sigmoid") => {}
                Some(other) => {
                    return Err(bad(
                        "scoring_func",
                        "\"sigmoid\" (transformers' DeepSeek-V3 and GLM-4-MoE routers always use the sigmoid)",
                        format!("{other:?}"),
                    ))
                }
            }
            // DeepSeek-V2's `greedy` / `group_limited_greedy` score groups by their best expert,
            // not by the sum of their best two: another router.
            match f.text("topk_method")? {
                None | Some("noaux_tc") => {}
                Some(other) => {
                    return Err(bad(
                        "topk_method",
                        "\"noaux_tc\" (DeepSeek-V3's grouped selection)",
                        format!("{other:?}"),
                    ))
                }
            }
            let router = RouterConfig {
                k,
                scoring: Scoring::Sigmoid,
                renormalize: f.flag("norm_topk_prob", true)?,
                // One group kept out of one selects from every expert: no grouping.
                grouping: if (n_group, topk_group) == (1, 1) {
                    None
                } else {
                    Some(Grouping {
                        n_group,
                        topk_group,
                    })
                },
                routed_scaling: f.number("routed_scaling_factor", scaling)? as f32,
            };
            // The `n_shared_experts` shared experts are one MLP of n_shared · I. A product that
            // overflows usize is refused after the other sizes are checked (an
            // `moe_intermediate_size` out of range is the more basic error), with the message
            // `validate` gives a product that fits but is too large.
            let n_shared = f.count("n_shared_experts")?.unwrap_or(1);
            let (shared, overflow) = match n_shared.checked_mul(intermediate) {
                _ if n_shared == 0 => (None, None),
                Some(is) => (
                    Some(SharedExpert {
                        intermediate: is,
                        gated: false,
                    }),
                    None,
                ),
                None => (
                    None,
                    Some(bad(
                        "n_shared_experts x moe_intermediate_size",
                        &format!("at most {} (twice it must fit in an `int`)", i32::MAX / 2),
                        n_shared as u128 * intermediate as u128,
                    )),
                ),
            };
            (field, experts, router, shared, overflow)
        }
    };
    let config = MoeConfig {
        hidden,
        intermediate,
        experts,
        router,
        shared,
    };
    config
        .validate(None)
        .map_err(|e| config_error(e, family, experts_field))?;
    if let Some(e) = shared_overflow {
        return Err(e);
    }
    Ok(ParsedConfig {
        family,
        config,
        experts_field,
    })
}

/// A refusal of [`MoeConfig::validate`], under the `config.json` name of the field it is about.
fn config_error(e: MoeError, family: Family, experts_field: &str) -> CheckpointError {
    let k_field = "num_experts_per_tok";
    match e {
        MoeError::Config {
            field,
            expected,
            found,
        } => {
            let qwen2 = family == Family::Qwen2Moe;
            let field = match field {
                "hidden" => "hidden_size".to_string(),
                "intermediate" => "moe_intermediate_size".to_string(),
                "experts" => experts_field.to_string(),
                "shared expert intermediate" if qwen2 => {
                    "shared_expert_intermediate_size".to_string()
                }
                "shared expert intermediate" => {
                    "n_shared_experts x moe_intermediate_size".to_string()
                }
                "experts x hidden" => format!("{experts_field} x hidden_size"),
                "experts x 2 x intermediate x hidden" => {
                    format!("{experts_field} x 2 x moe_intermediate_size x hidden_size")
                }
                "experts x hidden x intermediate" => {
                    format!("{experts_field} x hidden_size x moe_intermediate_size")
                }
                "2 x shared expert intermediate x hidden" if qwen2 => {
                    "2 x shared_expert_intermediate_size x hidden_size".to_string()
                }
                "2 x shared expert intermediate x hidden" => {
                    "2 x n_shared_experts x moe_intermediate_size x hidden_size".to_string()
                }
                other => other.to_string(),
            };
            bad(&field, &expected, found)
        }
        MoeError::Router(r) => match r {
            RouterError::NoExperts => bad(experts_field, "at least 1", 0),
            RouterError::KZero => bad(k_field, "at least 1", 0),
            RouterError::KTooLarge { k, experts } => bad(
                k_field,
                &format!("at most the number of experts, {experts} (`{experts_field}`)"),
                k,
            ),
            RouterError::GroupsDoNotDivide { n_group, experts } => bad(
                "n_group",
                &format!("a divisor of the number of experts, {experts} (`{experts_field}`)"),
                n_group,
            ),
            RouterError::TopkGroupTooLarge {
                topk_group,
                n_group,
            } => bad("topk_group", &format!("at most `n_group` = {n_group}"), topk_group),
            RouterError::GroupsTooFewForK {
                topk_group,
                per_group,
                k,
            } => bad(
                "topk_group",
                &format!(
                    "at least {} (the kept groups of {per_group} experts must hold `{k_field}` = {k})",
                    k.div_ceil(per_group)
                ),
                topk_group,
            ),
            RouterError::BadScale { value } => {
                bad("routed_scaling_factor", "a finite number above 0", value)
            }
            other => CheckpointError::Invalid(MoeError::Router(other)),
        },
        other => CheckpointError::Invalid(other),
    }
}
