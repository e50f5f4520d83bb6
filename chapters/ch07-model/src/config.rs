//! `config.json` → the whole model's sizes: chapter 2's MoE layer config, plus the attention, the
//! norms, the rotary embeddings, the dense MLP and the vocabulary.
//!
//! Two families run whole: Qwen3-MoE and GLM-4-MoE. Both have grouped-query attention with
//! rotary embeddings; they differ in the defaults below and in where the biases and norms sit.
//! DeepSeek-V3's MoE layer loads in chapter 2, but its attention (MLA: queries, keys and values
//! through low-rank projections, a split rotary part) is another attention, not in this chapter:
//! a DeepSeek-V3 checkpoint is refused by name, and so is Qwen2-MoE (no fixture checks it here).

use crate::error::ModelError;
use ch02_grouped::checkpoint::config::{parse_config, ParsedConfig};
use ch02_grouped::checkpoint::{CheckpointError, Family};
use serde_json::Value;

/// The families this chapter runs whole.
pub const FAMILIES: [Family; 2] = [Family::Qwen3Moe, Family::Glm4Moe];

/// The model's sizes and the choices its family makes.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Chapter 2's MoE layer: family, sizes, router, shared expert (the same for every MoE layer).
    pub moe: ParsedConfig,
    /// V: `vocab_size`.
    pub vocab: usize,
    /// H: `hidden_size`.
    pub hidden: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_key_value_heads`: each serves `heads / kv_heads` query heads.
    pub kv_heads: usize,
    /// `head_dim` (default `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// The leading dimensions of each head that rotate: `head_dim × partial_rotary_factor`
    /// (GLM-4-MoE: half; Qwen3-MoE: all).
    pub rotary_dim: usize,
    /// The rotary base θ (`rope_theta`).
    pub rope_theta: f64,
    /// `rms_norm_eps`.
    pub rms_eps: f32,
    /// The dense MLP's intermediate size (`intermediate_size`), for the layers without experts.
    pub dense_intermediate: usize,
    /// `attention_bias`: q, k and v projections with a bias.
    pub qkv_bias: bool,
    /// The output projection with a bias (Qwen3-MoE: `attention_bias`; GLM-4-MoE: never).
    pub o_bias: bool,
    /// RMSNorm over each head of q and k before the rotation (Qwen3-MoE: always; GLM-4-MoE:
    /// `use_qk_norm`).
    pub qk_norm: bool,
    /// `tie_word_embeddings`: the LM head is the embedding matrix.
    pub tied: bool,
    /// `max_position_embeddings`: the most positions (prompt and generated tokens) the model
    /// was made for. A config without it gets its family's default in transformers (Qwen3-MoE:
    /// 32,768; GLM-4-MoE: 131,072), as transformers' config class would fill in.
    pub max_positions: usize,
    /// Whether `max_positions` was in config.json (false: the family's default).
    pub max_positions_given: bool,
}

impl ModelConfig {
    pub fn family(&self) -> Family {
        self.moe.family
    }
}

fn bad(field: &str, expected: &str, found: impl std::fmt::Display) -> ModelError {
    ModelError::Checkpoint(CheckpointError::Config {
        field: field.to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
    })
}

/// The field's value; absent and `null` are both `None`.
fn get<'a>(json: &'a Value, field: &str) -> Option<&'a Value> {
    json.get(field).filter(|v| !v.is_null())
}

fn count(json: &Value, field: &str) -> Result<Option<usize>, ModelError> {
    match get(json, field) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| bad(field, "a non-negative integer", v)),
    }
}

fn positive(json: &Value, field: &str) -> Result<usize, ModelError> {
    match count(json, field)? {
        None => Err(bad(field, "a positive integer", "missing")),
        Some(0) => Err(bad(field, "a positive integer", 0)),
        // The kernels and the cache index with `int`s and products of these.
        Some(n) if n > 1 << 24 => Err(bad(field, "at most 2^24", n)),
        Some(n) => Ok(n),
    }
}

fn number(json: &Value, field: &str, default: f64) -> Result<f64, ModelError> {
    match get(json, field) {
        None => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| bad(field, "a finite number above 0", v)),
    }
}

fn flag(json: &Value, field: &str, default: bool) -> Result<bool, ModelError> {
    match get(json, field) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| bad(field, "true or false", v)),
    }
}

// ANCHOR: parse
/// Reads the whole model's config (chapter 2 reads the MoE part) and checks it, before any
/// tensor is read.
pub fn parse_model_config(json: &Value) -> Result<ModelConfig, ModelError> {
    let moe = parse_config(json)?;
    let family = moe.family;
    if !FAMILIES.contains(&family) {
        return Err(ModelError::UnsupportedFamily { family });
    }
    let glm = family == Family::Glm4Moe;
    let hidden = moe.config.hidden;
    let heads = positive(json, "num_attention_heads")?;
    let kv_heads = positive(json, "num_key_value_heads")?;
    #[allow(clippy::manual_is_multiple_of)] // MSRV 1.85
    if heads % kv_heads != 0 {
        return Err(bad(
            "num_key_value_heads",
            &format!("a divisor of num_attention_heads = {heads}"),
            kv_heads,
        ));
    }
    // transformers: `head_dim`, else hidden_size // num_attention_heads.
    let head_dim = match count(json, "head_dim")? {
        Some(_) => positive(json, "head_dim")?,
        None if hidden >= heads => hidden / heads,
        None => return Err(bad("head_dim", "a positive integer", "missing")),
    };
    // transformers 5.x writes the rotary settings into `rope_parameters`; the Hub's configs (and
    // transformers 4.x) have `rope_theta` and `partial_rotary_factor` at the top. Only the
    // original rotary embedding is computed here: a scaled one (YaRN, linear, dynamic) is refused.
    let rope = get(json, "rope_parameters").or_else(|| get(json, "rope_scaling"));
    let rope_type = rope
        .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
        .and_then(Value::as_str)
        .unwrap_or("default");
    if rope_type != "default" {
        return Err(bad(
            "rope_parameters.rope_type",
            "\"default\" (the original rotary embedding; scaled variants are not in this chapter)",
            format!("{rope_type:?}"),
        ));
    }
    let in_rope = |field: &str, default: f64| match rope.filter(|r| get(r, field).is_some()) {
        Some(r) => number(r, field, default).map_err(|_| {
            bad(
                &format!("rope_parameters.{field}"),
                "a finite number above 0",
                &r[field],
            )
        }),
        None => number(json, field, default),
    };
    let rope_theta = in_rope("rope_theta", 10000.0)?;
    // Glm4MoeConfig defaults `partial_rotary_factor` to 0.5; Qwen3-MoE rotates every dimension.
    let factor = in_rope("partial_rotary_factor", if glm { 0.5 } else { 1.0 })?;
    let rotary_dim = (head_dim as f64 * factor) as usize; // transformers: int(head_dim × factor)
    #[allow(clippy::manual_is_multiple_of)] // MSRV 1.85
    if rotary_dim == 0 || rotary_dim > head_dim || rotary_dim % 2 != 0 {
        return Err(bad(
            "partial_rotary_factor",
            &format!("a factor giving an even number of rotated dimensions in 2..={head_dim}"),
            factor,
        ));
    }
    // Qwen3-MoE's sliding-window attention (`use_sliding_window`, off in every released
    // checkpoint) attends to the last `sliding_window` positions only: not computed here.
    if !glm && flag(json, "use_sliding_window", false)? {
        return Err(bad(
            "use_sliding_window",
            "false (sliding-window attention is not in this chapter)",
            true,
        ));
    }
    let attention_bias = flag(json, "attention_bias", false)?;
    // The rotary embedding computes any position, but past this one the model was never trained
    // (and a request that long is a typo, not a run): the example refuses it before generating.
    let given = count(json, "max_position_embeddings")?;
    let max_positions = match given {
        None if glm => 131_072, // Glm4MoeConfig's default
        None => 32_768,         // Qwen3MoeConfig's default
        Some(0) => return Err(bad("max_position_embeddings", "a positive integer", 0)),
        Some(n) => n,
    };
    Ok(ModelConfig {
        vocab: positive(json, "vocab_size")?,
        hidden,
        layers: positive(json, "num_hidden_layers")?,
        heads,
        kv_heads,
        head_dim,
        rotary_dim,
        rope_theta,
        rms_eps: number(json, "rms_norm_eps", if glm { 1e-5 } else { 1e-6 })? as f32,
        dense_intermediate: positive(json, "intermediate_size")?,
        qkv_bias: attention_bias,
        o_bias: attention_bias && !glm,
        qk_norm: if glm {
            flag(json, "use_qk_norm", false)?
        } else {
            true
        },
        tied: flag(json, "tie_word_embeddings", false)?,
        max_positions,
        max_positions_given: given.is_some(),
        moe,
    })
}
// ANCHOR_END: parse
