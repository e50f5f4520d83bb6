//! Why a model did not load or run. Checkpoint problems are chapter 2's [`CheckpointError`]
//! (each names the file, field or tensor); the model adds its own few.

use ch02_grouped::checkpoint::error::UnusedWords;
use ch02_grouped::checkpoint::{CheckpointError, Family};
use ch02_grouped::MoeError;
use std::fmt;

/// Why [`crate::load()`], [`crate::Model`] or the example refused.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelError {
    /// The checkpoint: a missing file or tensor, a wrong shape, a bad config field, an unknown
    /// family (chapter 2's loader and its errors, extended to the whole model).
    Checkpoint(CheckpointError),
    /// A family chapter 2 loads but this chapter does not run whole.
    UnsupportedFamily { family: Family },
    /// Tensors of the model that this family, under its config, does not read (a bias while
    /// `attention_bias` is false, a q_norm where there is none): running without them would
    /// compute another model.
    UnusedTensors { tensors: Vec<String> },
    /// A token id at or past the vocabulary.
    Token { token: u32, vocab: usize },
    /// An empty prompt: there is no position to predict from.
    EmptyPrompt,
    /// A MoE layer or the device refused.
    Layer(MoeError),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Checkpoint(e) => write!(f, "{e}"),
            ModelError::UnsupportedFamily { family } => write!(
                f,
                "config.json: the family {family} ({}) loads in chapter 2 but does not run whole in \
                 chapter 7, which runs qwen3_moe and glm4_moe{}",
                family.model_type(),
                if *family == Family::DeepseekV3 {
                    " (DeepSeek-V3's attention, MLA, is not in this chapter)"
                } else {
                    ""
                }
            ),
            ModelError::UnusedTensors { tensors } => {
                let w = UnusedWords(tensors);
                write!(
                    f,
                    "the checkpoint has {} that this config.json does not read: {}; running \
                     without {} would compute another model",
                    w.count(),
                    w.names(),
                    w.pronoun(),
                )
            }
            ModelError::Token { token, vocab } => write!(
                f,
                "token id {token} is not in the vocabulary (vocab_size {vocab}: ids 0 to {})",
                vocab.saturating_sub(1)
            ),
            ModelError::EmptyPrompt => write!(f, "the prompt is empty: give at least one token id"),
            ModelError::Layer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<CheckpointError> for ModelError {
    fn from(e: CheckpointError) -> Self {
        ModelError::Checkpoint(e)
    }
}

impl From<MoeError> for ModelError {
    fn from(e: MoeError) -> Self {
        ModelError::Layer(e)
    }
}

impl From<moe_kernels::KernelError> for ModelError {
    fn from(e: moe_kernels::KernelError) -> Self {
        ModelError::Layer(MoeError::from(e))
    }
}
