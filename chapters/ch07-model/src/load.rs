//! Loading a whole model: chapter 2's checkpoint code (its file discovery, its tensor reader, its
//! MoE packer) for every layer, plus the tensors around the MoE layers.
//!
//! | tensor | shape |
//! |---|---|
//! | `model.embed_tokens.weight` | `[V, H]` |
//! | `model.layers.N.input_layernorm.weight`, `post_attention_layernorm.weight` | `[H]` |
//! | `model.layers.N.self_attn.q_proj.weight` (+ `.bias` with `attention_bias`) | `[heads·D, H]` |
//! | `model.layers.N.self_attn.k_proj.weight`, `v_proj.weight` (+ `.bias`) | `[kv_heads·D, H]` |
//! | `model.layers.N.self_attn.o_proj.weight` (+ `.bias`: Qwen3-MoE with `attention_bias`) | `[H, heads·D]` |
//! | `model.layers.N.self_attn.q_norm.weight`, `k_norm.weight` (Qwen3-MoE; GLM with `use_qk_norm`) | `[D]` |
//! | dense layers: `model.layers.N.mlp.{gate,up}_proj.weight`, `down_proj.weight` | `[Id, H]`, `[H, Id]` |
//! | MoE layers: chapter 2's [`pack`](ch02_grouped::checkpoint::pack::pack) | `w13 [E, 2I, H]`, `w2 [E, H, I]`, ... |
//! | `model.norm.weight` | `[H]` |
//! | `lm_head.weight` (absent with `tie_word_embeddings`) | `[V, H]` |
//!
//! Which layers are MoE is told by the tensor names, as in chapter 2. Every tensor is checked for
//! its shape and for finite values, and every tensor of the model's layers that the config does
//! not read is refused ([`ModelError::UnusedTensors`]); tensors of layers past
//! `num_hidden_layers` (GLM's multi-token-prediction layer) are not part of the decoder and are
//! left alone. Everything is held in f32 on the host until [`crate::Model::new`] uploads the MoE
//! layers.

use crate::config::{parse_model_config, ModelConfig};
use crate::error::ModelError;
use ch02_grouped::checkpoint::files::Files;
use ch02_grouped::checkpoint::layers::{self, mlp_prefix};
use ch02_grouped::checkpoint::read_config;
use ch02_grouped::checkpoint::{pack, CheckpointError};
use ch02_grouped::MoeWeights;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;

/// One attention block's weights.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionWeights {
    /// `[heads·D, H]`, and its bias `[heads·D]`
    pub q: Vec<f32>,
    pub q_bias: Option<Vec<f32>>,
    /// `[kv_heads·D, H]`, and its bias `[kv_heads·D]`
    pub k: Vec<f32>,
    pub k_bias: Option<Vec<f32>>,
    /// `[kv_heads·D, H]`, and its bias `[kv_heads·D]`
    pub v: Vec<f32>,
    pub v_bias: Option<Vec<f32>>,
    /// `[H, heads·D]`, and its bias `[H]`
    pub o: Vec<f32>,
    pub o_bias: Option<Vec<f32>>,
    /// `[D]` each: RMSNorm weights over one head of q and of k
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
}

/// The dense SwiGLU MLP of the layers without experts: `down(silu(gate·x) ⊙ up·x)`.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseWeights {
    /// `[Id, H]`
    pub gate: Vec<f32>,
    /// `[Id, H]`
    pub up: Vec<f32>,
    /// `[H, Id]`
    pub down: Vec<f32>,
}

/// A layer's MLP: dense, or chapter 2's MoE layer.
#[derive(Clone, Debug, PartialEq)]
pub enum MlpWeights {
    Dense(DenseWeights),
    Moe(Box<MoeWeights>),
}

/// One decoder layer.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights {
    /// `[H]`: the RMSNorm before the attention
    pub input_norm: Vec<f32>,
    pub attention: AttentionWeights,
    /// `[H]`: the RMSNorm before the MLP
    pub post_norm: Vec<f32>,
    pub mlp: MlpWeights,
}

/// The whole model in f32 on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelWeights {
    pub config: ModelConfig,
    /// `[V, H]`
    pub embed: Vec<f32>,
    pub layers: Vec<LayerWeights>,
    /// `[H]`: the final RMSNorm
    pub norm: Vec<f32>,
    /// `[V, H]` (a copy of `embed` when the config ties them)
    pub lm_head: Vec<f32>,
}

impl ModelWeights {
    /// The layers whose MLP is a MoE layer, ascending.
    pub fn moe_layers(&self) -> Vec<usize> {
        (0..self.layers.len())
            .filter(|&l| matches!(self.layers[l].mlp, MlpWeights::Moe(_)))
            .collect()
    }
}

/// Reads tensors by name, checking each one's shape and values, and remembers what it read.
struct Reader<'a> {
    files: &'a Files,
    read: RefCell<BTreeSet<String>>,
}

impl Reader<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, CheckpointError> {
        let raw = self.files.get(name)?;
        raw.expect_shape(shape)?;
        self.read.borrow_mut().insert(name.to_string());
        raw.to_f32_finite()
    }

    fn optional(
        &self,
        present: bool,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<Vec<f32>>, CheckpointError> {
        present.then(|| self.tensor(name, shape)).transpose()
    }
}

fn attention(r: &Reader, c: &ModelConfig, l: usize) -> Result<AttentionWeights, CheckpointError> {
    let p = format!("model.layers.{l}.self_attn.");
    let (h, d) = (c.hidden, c.head_dim);
    let (q_rows, kv_rows) = (c.heads * d, c.kv_heads * d);
    let w = |name: &str, shape: &[usize]| r.tensor(&format!("{p}{name}"), shape);
    let b = |on: bool, name: &str, n: usize| r.optional(on, &format!("{p}{name}"), &[n]);
    Ok(AttentionWeights {
        q: w("q_proj.weight", &[q_rows, h])?,
        q_bias: b(c.qkv_bias, "q_proj.bias", q_rows)?,
        k: w("k_proj.weight", &[kv_rows, h])?,
        k_bias: b(c.qkv_bias, "k_proj.bias", kv_rows)?,
        v: w("v_proj.weight", &[kv_rows, h])?,
        v_bias: b(c.qkv_bias, "v_proj.bias", kv_rows)?,
        o: w("o_proj.weight", &[h, q_rows])?,
        o_bias: b(c.o_bias, "o_proj.bias", h)?,
        q_norm: b(c.qk_norm, "q_norm.weight", d)?,
        k_norm: b(c.qk_norm, "k_norm.weight", d)?,
    })
}

// ANCHOR: load
/// Loads the whole model in `dir` (config.json and safetensors files, one or sharded). With
/// `progress`, chapter 2's progress bar shows while large MoE layers pack.
pub fn load(dir: &Path, progress: bool) -> Result<ModelWeights, ModelError> {
    // Config first (chapter 2's checks of the folder and its config.json): a bad config costs no
    // tensor read.
    let c = parse_model_config(&read_config(dir)?)?;
    let files = Files::discover(dir)?;
    let moe = layers::scan(files.names()).moe;
    let r = Reader {
        files: &files,
        read: RefCell::new(BTreeSet::new()),
    };
    let (v, h) = (c.vocab, c.hidden);
    let embed = r.tensor("model.embed_tokens.weight", &[v, h])?;
    let mut layers = Vec::with_capacity(c.layers);
    for l in 0..c.layers {
        let p = format!("model.layers.{l}.");
        let input_norm = r.tensor(&format!("{p}input_layernorm.weight"), &[h])?;
        let attention = attention(&r, &c, l)?;
        let post_norm = r.tensor(&format!("{p}post_attention_layernorm.weight"), &[h])?;
        let mlp = if moe.contains(&l) {
            // Chapter 2's packer reads and checks every tensor of the layer's MLP (and refuses
            // those its family does not read).
            let storage = layers::storage(&files, l)?;
            let (w, _file_dtype) = pack::pack(&files, &c.moe, l, storage, progress)?;
            w.validate().map_err(CheckpointError::Invalid)?;
            let prefix = mlp_prefix(l);
            r.read.borrow_mut().extend(
                files
                    .names()
                    .filter(|n| n.starts_with(&prefix))
                    .map(String::from),
            );
            MlpWeights::Moe(Box::new(w))
        } else {
            let id = c.dense_intermediate;
            let m = mlp_prefix(l);
            MlpWeights::Dense(DenseWeights {
                gate: r.tensor(&format!("{m}gate_proj.weight"), &[id, h])?,
                up: r.tensor(&format!("{m}up_proj.weight"), &[id, h])?,
                down: r.tensor(&format!("{m}down_proj.weight"), &[h, id])?,
            })
        };
        layers.push(LayerWeights {
            input_norm,
            attention,
            post_norm,
            mlp,
        });
    }
    let norm = r.tensor("model.norm.weight", &[h])?;
    let lm_head = if c.tied {
        embed.clone()
    } else {
        r.tensor("lm_head.weight", &[v, h])?
    };
    let unused = unused(&files, &r.read.borrow(), c.layers);
    if !unused.is_empty() {
        return Err(ModelError::UnusedTensors { tensors: unused });
    }
    Ok(ModelWeights {
        config: c,
        embed,
        layers,
        norm,
        lm_head,
    })
}
// ANCHOR_END: load

/// The tensors of the decoder (everything but the layers past the last, such as GLM's
/// multi-token-prediction layer) that were not read.
fn unused(files: &Files, read: &BTreeSet<String>, layers: usize) -> Vec<String> {
    let past_the_last = |name: &str| {
        name.strip_prefix("model.layers.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(n, _)| n.parse::<usize>().ok())
            .is_some_and(|n| n >= layers)
    };
    files
        .names()
        .filter(|n| !read.contains(*n) && !past_the_last(n))
        .map(String::from)
        .collect()
}
