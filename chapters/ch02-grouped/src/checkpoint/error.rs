//! Why a checkpoint did not load. Every variant names the file, field or tensor, and what was
//! expected beside what was found, so the message alone says what to fix.

use super::config::{Family, ARCHITECTURES, MODEL_TYPES};
use crate::error::MoeError;
use std::fmt;
use std::path::PathBuf;

/// Why [`super::load`], [`super::moe_layers`] or [`crate::io`] refused a file.
#[derive(Clone, Debug, PartialEq)]
pub enum CheckpointError {
    /// A file or folder could not be read or written.
    Io { path: PathBuf, why: String },
    /// A file the checkpoint needs is not there: `config.json`, any `.safetensors`, or a shard
    /// that the index names for a tensor being loaded.
    MissingFile { path: PathBuf, what: String },
    /// `config.json` or `model.safetensors.index.json` is not the JSON expected.
    Json { path: PathBuf, why: String },
    /// A file that should be safetensors is not.
    NotSafetensors { path: PathBuf, why: String },
    /// `config.json` names no family this loader knows: neither its `model_type` is one of
    /// [`MODEL_TYPES`] nor any class of its `architectures` one of [`ARCHITECTURES`]. The fields
    /// alone never tell the family (another family may have the same ones).
    UnknownFamily {
        model_type: Option<String>,
        architectures: Vec<String>,
    },
    /// A `config.json` field is missing, of the wrong type, or out of range.
    Config {
        field: String,
        expected: String,
        found: String,
    },
    /// No tensor of the checkpoint belongs to a MoE layer.
    NoMoeLayer { layers: usize },
    /// The layer asked for exists but is dense (no router, no experts).
    NotMoeLayer {
        layer: usize,
        moe_layers: Vec<usize>,
    },
    /// The layer asked for has no tensor in the checkpoint.
    NoSuchLayer {
        layer: usize,
        layers: usize,
        moe_layers: Vec<usize>,
    },
    /// A MoE layer (it has a router) without expert weights in either storage form.
    NoExperts {
        layer: usize,
        per_expert: String,
        fused: String,
    },
    /// A layer holds its experts in both storage forms: which one is meant is not clear.
    MixedStorage { layer: usize },
    /// A tensor the layer needs is absent; `looked_in` is the file (or index) that should hold it.
    MissingTensor { name: String, looked_in: String },
    /// An entry of `model.safetensors.index.json`'s `weight_map` that does not name a file inside
    /// the checkpoint's folder (an absolute path, a `..`, or an empty name).
    ShardPath {
        index: PathBuf,
        tensor: String,
        file: String,
    },
    /// Tensors of the layer's MLP (`model.layers.{layer}.mlp.*`) that the family, under this
    /// config, does not read (a shared expert while `n_shared_experts` is 0, a bias, an expert
    /// beyond the config's number): loading without them would compute another layer.
    UnusedTensors {
        layer: usize,
        family: Family,
        tensors: Vec<String>,
    },
    /// The same tensor in two files of a checkpoint without an index.
    DuplicateTensor {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    /// A tensor of the wrong shape (the expected shape follows from `config.json`).
    Shape {
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// A tensor of the wrong rank (a file of inputs: `hidden` must be `[T, H]`).
    Rank {
        tensor: String,
        expected: usize,
        found: Vec<usize>,
    },
    /// A tensor stored in a type other than F32, BF16 or F16 (`found` as safetensors spells it:
    /// `I64`, `F8_E4M3`, ...).
    Dtype { tensor: String, found: String },
    /// A weight of the layer (the router's gate or bias, an expert, the shared expert) holds a
    /// NaN or an infinity: `index` is the first one's position in the tensor, `value` how it
    /// prints (`NaN`, `inf`, `-inf`), `count` how many the tensor holds.
    NonFinite {
        tensor: String,
        index: Vec<usize>,
        value: String,
        count: usize,
    },
    /// The weights loaded but the layer refused them (e.g. a layer whose sizes disagree).
    Invalid(MoeError),
}

fn list(v: &[usize]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The names of a table of [`super::config`], `a, b, c`.
fn names(table: &[(&str, Family)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CheckpointError::*;
        match self {
            Io { path, why } => write!(f, "{}: {why}", path.display()),
            MissingFile { path, what } => write!(f, "{} ({what}) does not exist", path.display()),
            Json { path, why } => write!(f, "{}: {why}", path.display()),
            NotSafetensors { path, why } => {
                write!(f, "{} is not a safetensors file: {why}", path.display())
            }
            UnknownFamily {
                model_type,
                architectures,
            } => write!(
                f,
                "config.json: model_type {} and architectures {architectures:?} name no family this \
                 loader knows: the model_type must be one of {}, or the architectures name one of {}",
                model_type.as_deref().map_or("(none)".to_string(), |m| format!("{m:?}")),
                names(&MODEL_TYPES),
                names(&ARCHITECTURES),
            ),
            Config {
                field,
                expected,
                found,
            } => write!(f, "config.json: `{field}` is {found}, expected {expected}"),
            NoMoeLayer { layers } => write!(
                f,
                "no MoE layer: none of the checkpoint's {layers} layers has a tensor named \
                 `model.layers.N.mlp.gate.weight` or `model.layers.N.mlp.experts.*`"
            ),
            NotMoeLayer { layer, moe_layers } => write!(
                f,
                "layer {layer} is dense, not MoE; the MoE layers are {}",
                list(moe_layers)
            ),
            NoSuchLayer {
                layer,
                layers,
                moe_layers,
            } => write!(
                f,
                "layer {layer} is not in the checkpoint ({layers} layers); the MoE layers are {}",
                list(moe_layers)
            ),
            NoExperts {
                layer,
                per_expert,
                fused,
            } => write!(
                f,
                "layer {layer} has a router but no experts: neither `{per_expert}` nor `{fused}`"
            ),
            MixedStorage { layer } => write!(
                f,
                "layer {layer} holds its experts both one tensor per expert and fused \
                 (`experts.gate_up_proj`); keep one form"
            ),
            MissingTensor { name, looked_in } => {
                write!(f, "tensor `{name}` is missing (looked in {looked_in})")
            }
            ShardPath {
                index,
                tensor,
                file,
            } => write!(
                f,
                "{}: `weight_map[{tensor:?}]` is {file:?}, expected a file inside the checkpoint's \
                 folder (a relative path without `..`)",
                index.display()
            ),
            UnusedTensors {
                layer,
                family,
                tensors,
            } => {
                let w = UnusedWords(tensors);
                write!(
                    f,
                    "layer {layer} has {} that a {family} layer of this config.json does not \
                     read: {}; loading without {} would compute another layer",
                    w.count(),
                    w.names(),
                    w.pronoun(),
                )
            }
            DuplicateTensor {
                name,
                first,
                second,
            } => write!(
                f,
                "tensor `{name}` is in both {} and {}, and no index says which to use",
                first.display(),
                second.display()
            ),
            Shape {
                tensor,
                expected,
                found,
            } => write!(
                f,
                "tensor `{tensor}` has shape {found:?}, expected {expected:?} from config.json's \
                 sizes (hidden_size, the expert count, the intermediate sizes): the config and \
                 the weights disagree"
            ),
            Rank {
                tensor,
                expected,
                found,
            } => write!(
                f,
                "tensor `{tensor}` has shape {found:?} (rank {}), expected rank {expected}",
                found.len()
            ),
            Dtype { tensor, found } => write!(
                f,
                "tensor `{tensor}` is {found}, expected F32, BF16 or F16"
            ),
            NonFinite {
                tensor,
                index,
                value,
                count,
            } => write!(
                f,
                "tensor `{tensor}` holds {value} at {index:?} ({count} non-finite {} in all): every \
                 weight must be finite (in the router's gate it makes logits non-finite, which \
                 the router ranks last; in an expert, the outputs of the tokens it serves NaN)",
                if *count == 1 { "value" } else { "values" }
            ),
            Invalid(e) => write!(f, "the loaded layer is not valid: {e}"),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckpointError::Invalid(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MoeError> for CheckpointError {
    fn from(e: MoeError) -> Self {
        CheckpointError::Invalid(e)
    }
}

/// The words of an error about tensors a checkpoint holds but its config does not read
/// ([`CheckpointError::UnusedTensors`], and chapter 7's whole-model loader's): "2 tensors",
/// "`a`, `b`", "them".
pub struct UnusedWords<'a>(pub &'a [String]);

impl UnusedWords<'_> {
    /// "1 tensor", "3 tensors".
    pub fn count(&self) -> String {
        let n = self.0.len();
        format!("{n} {}", if n == 1 { "tensor" } else { "tensors" })
    }
    /// The names, each in backticks, separated by commas.
    pub fn names(&self) -> String {
        self.0
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
    /// "it" or "them".
    pub fn pronoun(&self) -> &'static str {
        if self.0.len() == 1 {
            "it"
        } else {
            "them"
        }
    }
}
