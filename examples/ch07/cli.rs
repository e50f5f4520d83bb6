//! Chapter 7's command line (`cargo run --example ch07 -- --help`). The chapter's code lives in
//! the library (`ch07_model::example`); this file only turns arguments into its options.
//! `tests/ch07_example.rs` includes this file too.

use ch02_grouped::Dtype;
use ch07_model::example::GenerateRun;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// The help heading of the options that only a `--checkpoint` run reads.
pub const CHECKPOINT_OPTIONS: &str = "Options of a checkpoint run (each needs --checkpoint)";

/// The end of `--help`: what the `⟨…⟩` of the output are.
pub const MEASURED_HELP: &str = "Numbers in ⟨…⟩ are measured on this machine (times; and how \
    many bf16 tokens follow transformers', since the tensor cores and the emulator sum in \
    different orders); the book's copy of the output shows them as ⟨…⟩.";

/// Chapter 7: a whole model on our MoE layer. Without options, the committed tiny Qwen3-MoE and
/// GLM-4-MoE models generate 32 greedy tokens from each of three prompts, with every MoE layer in
/// f32 (the tokens must be transformers') and in bf16 (chapter 6's layer).
#[derive(Parser, Debug)]
#[command(name = "ch07", about, after_help = MEASURED_HELP)]
pub struct Args {
    /// A Hugging Face checkpoint directory (config.json and .safetensors files) of a whole
    /// Qwen3-MoE or GLM-4-MoE model.
    #[arg(long, value_name = "DIR", requires = "prompt_ids")]
    pub checkpoint: Option<PathBuf>,
    /// The prompt, as token ids separated by commas.
    #[arg(long, value_name = "IDS", value_delimiter = ',', requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS, allow_negative_numbers = true)]
    pub prompt_ids: Vec<u32>,
    /// How many tokens to generate.
    #[arg(long, value_name = "N", default_value_t = 32, requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS, allow_negative_numbers = true)]
    pub tokens: usize,
    /// The MoE layers' compute type: bf16 (chapter 6's assembled layer) or f32 (chapter 2's
    /// grouped layer on the device, the path that reproduces transformers' fp32 tokens).
    #[arg(long, value_enum, default_value_t = DtypeArg::Bf16, requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub dtype: DtypeArg,
}

/// `--dtype` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    Bf16,
    F32,
}

impl Args {
    /// The options of `--checkpoint`, when it was given.
    pub fn generate_run(&self) -> Option<GenerateRun> {
        Some(GenerateRun {
            dir: self.checkpoint.clone()?,
            prompt: self.prompt_ids.clone(),
            tokens: self.tokens,
            dtype: match self.dtype {
                DtypeArg::Bf16 => Dtype::Bf16,
                DtypeArg::F32 => Dtype::F32,
            },
        })
    }
}
