//! Loading one MoE layer of a Hugging Face checkpoint into [`MoeWeights`].
//!
//! A checkpoint is a folder with `config.json` and one or more `.safetensors` files (with
//! `model.safetensors.index.json` when sharded). [`load`] reads the family and the layer's sizes
//! from the config ([`config`]), finds the MoE layers by their tensor names ([`layers`]), maps
//! the files ([`files`]) and packs the layer's tensors, each read once and converted to f32 on
//! the host, into `w13` [E, 2I, H] and `w2` [E, H, I] ([`pack`]).
//!
//! Families: Qwen3-MoE, Qwen2-MoE, DeepSeek-V3 (and the checkpoints that reuse its architecture,
//! such as Kimi-K2), GLM-4-MoE, told by `model_type` or `architectures`; any other is refused,
//! whatever fields it shares with these. Storage: the Hub's one tensor per expert, or
//! transformers 5.x's fused `gate_up_proj` / `down_proj` ([`Storage`]). Types: F32, BF16, F16
//! (exact in f32); anything else, FP8 checkpoints included, is refused with the tensor's name.
//! Every tensor of the layer's MLP must be read: one that the family does not read under the
//! config (a shared expert while `n_shared_experts` is 0, a bias) is refused, not left out.
//! Every refusal is a [`CheckpointError`] naming the file, field or tensor, the expected and the
//! found value.
//!
//! The whole layer is held in f32 on the host: 4 bytes × 3·E·I·H, 2.4 GB for a layer of
//! Qwen3-30B-A3B (E 128, I 768, H 2048). Nothing is allocated before every tensor's header has
//! been checked against the config, so a config larger than its files is refused, not allocated.

pub mod config;
pub mod error;
pub mod files;
pub mod layers;
pub mod pack;

pub use config::Family;
pub use error::CheckpointError;
pub use layers::Storage;

use crate::weights::MoeWeights;
use std::path::Path;

/// What [`load`] is asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The layer to load; `None`: the first MoE layer.
    pub layer: Option<usize>,
    /// Show a progress bar on stderr while packing experts larger than
    /// [`pack::PROGRESS_BYTES`] (64 MiB as stored).
    pub progress: bool,
}

/// One MoE layer, loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The layer's weights in f32, validated.
    pub weights: MoeWeights,
    /// Which layer of the model it is.
    pub layer: usize,
    pub family: Family,
    pub storage: Storage,
    /// The type the expert weights are stored in: `f32`, `bf16` or `f16` (`bf16+f32` if the
    /// experts mix types). The router's gate and bias may differ (DeepSeek-V3 keeps the bias in
    /// f32).
    pub file_dtype: String,
}

// ANCHOR: load
/// Loads MoE layer `opts.layer` (default: the first) of the checkpoint in `dir`.
pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Loaded, CheckpointError> {
    // Config first: a bad config costs no tensor read.
    let parsed = config::parse_config(&read_config(dir)?)?;
    let files = files::Files::discover(dir)?;
    let layer = layers::scan(files.names()).choose(opts.layer)?;
    let storage = layers::storage(&files, layer)?;
    let (weights, file_dtype) = pack::pack(&files, &parsed, layer, storage, opts.progress)?;
    weights.validate()?;
    Ok(Loaded {
        weights,
        layer,
        family: parsed.family,
        storage,
        file_dtype,
    })
}
// ANCHOR_END: load

/// `dir`'s config.json as JSON, once `dir` is known to be a checkpoint's folder that has one: the
/// first step of [`load`], and of chapter 7's whole-model loader.
pub fn read_config(dir: &Path) -> Result<serde_json::Value, CheckpointError> {
    if !dir.is_dir() {
        return Err(CheckpointError::Io {
            path: dir.to_path_buf(),
            why: if dir.exists() {
                "is a file, expected the checkpoint's folder (config.json and .safetensors files)"
            } else {
                "does not exist"
            }
            .to_string(),
        });
    }
    let config_path = dir.join("config.json");
    if !config_path.exists() {
        // A folder of checkpoints (tools/fixtures/ch02-hf/qwen3_moe holds `fused/` and
        // `per_expert/`) is a likely mistake: name the subfolders that are checkpoints.
        let below = checkpoints_below(dir);
        let what = match below.is_empty() {
            true => "the model's config".to_string(),
            false => format!(
                "the model's config; the checkpoints are one level down, in {}",
                below.join(" and ")
            ),
        };
        return Err(CheckpointError::MissingFile {
            path: config_path,
            what,
        });
    }
    files::read_json(&config_path)
}

/// The subfolders of `dir` that hold a config.json, as `name/`, sorted.
fn checkpoints_below(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("config.json").is_file())
        .map(|e| format!("{}/", e.file_name().to_string_lossy()))
        .collect();
    v.sort();
    v
}

/// The MoE layers of the checkpoint in `dir`, ascending (empty when it has none). Reads only the
/// safetensors headers, or the index.
pub fn moe_layers(dir: &Path) -> Result<Vec<usize>, CheckpointError> {
    let files = files::Files::discover(dir)?;
    Ok(layers::scan(files.names()).moe)
}
