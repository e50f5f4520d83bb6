//! The committed fixtures of `tools/fixtures/ch07-hf/` (made by
//! `tools/fixtures/ch07_make_model_fixtures.py`): a tiny random model per family and
//! transformers' greedy tokens from three prompts.

use crate::error::ModelError;
use ch02_grouped::checkpoint::files::{self, read_json};
use ch02_grouped::checkpoint::CheckpointError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The fixture folders, one per family.
pub const FIXTURES: [&str; 2] = ["qwen3_moe", "glm4_moe"];

/// The folder of fixture `name` (one of [`FIXTURES`]).
pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/ch07-hf")
        .join(name)
}

/// One fixture's `greedy.json`: what transformers generated.
#[derive(Clone, Debug, PartialEq)]
pub struct Greedy {
    /// The checkpoint folder (`model/`).
    pub model: PathBuf,
    /// The three prompts of token ids.
    pub prompts: Vec<Vec<u32>>,
    /// transformers' greedy continuation of each prompt.
    pub tokens: Vec<Vec<u32>>,
    /// The smallest gap between the best and the second-best logit over every greedy choice.
    pub min_logit_gap: f64,
    /// transformers' logits `[N, V]` at each greedy step of the first prompt.
    pub logits: Vec<f32>,
}

fn ids(v: &Value, field: &str, path: &Path) -> Result<Vec<Vec<u32>>, ModelError> {
    let bad = || {
        ModelError::Checkpoint(CheckpointError::Json {
            path: path.to_path_buf(),
            why: format!("`{field}` is not a list of lists of token ids"),
        })
    };
    v.get(field)
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|p| {
            p.as_array()
                .ok_or_else(bad)?
                .iter()
                .map(|t| {
                    t.as_u64()
                        .and_then(|t| u32::try_from(t).ok())
                        .ok_or_else(bad)
                })
                .collect()
        })
        .collect()
}

impl Greedy {
    /// Reads the fixture folder `dir`.
    pub fn read(dir: &Path) -> Result<Greedy, ModelError> {
        let path = dir.join("greedy.json");
        let json = read_json(&path)?;
        let prompts = ids(&json, "prompts", &path)?;
        let tokens = ids(&json, "tokens", &path)?;
        if prompts.len() != tokens.len() {
            return Err(ModelError::Checkpoint(CheckpointError::Json {
                path,
                why: "`prompts` and `tokens` differ in length".into(),
            }));
        }
        let logits_path = dir.join("logits.safetensors");
        let st = files::map(&logits_path)?;
        let logits = files::raw(&st, "logits.0", &logits_path)?.to_f32();
        Ok(Greedy {
            logits,
            model: dir.join("model"),
            prompts,
            tokens,
            min_logit_gap: json
                .get("min_logit_gap")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        })
    }
}
