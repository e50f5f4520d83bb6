//! Chapter 6's command line (`cargo run --example ch06 -- --help`). The chapter's code lives in
//! the library (`ch06_layer::example`); this file only turns arguments into its options.
//! `tests/ch06_example.rs` includes this file too.

use ch05_fused_router::LogitsFrom;
use ch06_layer::example::CheckpointRun;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// The help heading of the options that only a `--checkpoint` run reads.
pub const CHECKPOINT_OPTIONS: &str = "Options of a checkpoint run (each needs --checkpoint)";

/// The end of `--help`: what the `⟨…⟩` of the output are.
pub const MEASURED_HELP: &str = "Numbers in ⟨…⟩ are measured on this machine (cuBLAS, the \
    tensor cores and the emulator sum in different orders, so the last digits differ, and a token \
    at a near tie may pick another expert); the book's copy of the output shows them as ⟨…⟩, and \
    the tests hold them to the tolerance printed beside them.";

/// Chapter 6: the MoE layer assembled (chapter 5's router, chapter 3's align, chapter 4's
/// experts, in one enqueue). Without options, two layers with real routers at small hidden sizes,
/// at decode and prefill batch sizes, against chapter 2's literal loop.
#[derive(Parser, Debug)]
#[command(name = "ch06", about, after_help = MEASURED_HELP)]
pub struct Args {
    /// A Hugging Face checkpoint directory (config.json and .safetensors files) holding a MoE
    /// layer: Qwen3-MoE, Qwen2-MoE, DeepSeek-V3 or GLM-4-MoE.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    /// How many patterned tokens to run (without --input).
    #[arg(long, value_name = "T", default_value_t = 4, requires = "checkpoint", conflicts_with = "input", help_heading = CHECKPOINT_OPTIONS, allow_negative_numbers = true)]
    pub tokens: usize,
    /// `hidden` [T, H] (f32, bf16 or f16) in a safetensors file, rounded to bf16.
    #[arg(long, value_name = "FILE.safetensors", requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub input: Option<PathBuf>,
    /// Write `out` [T, H] f32 here.
    #[arg(long, value_name = "FILE.safetensors", requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub output: Option<PathBuf>,
    /// The model's layer index N, as in `model.layers.N.` (default: the first MoE layer).
    #[arg(long, value_name = "N", requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS, allow_negative_numbers = true)]
    pub layer: Option<usize>,
    /// The router's logits GEMM at every batch size, instead of the switch point's choice.
    #[arg(long, value_enum, requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub logits: Option<LogitsArg>,
    /// Skip the f64 literal loop that checks the layer's output.
    #[arg(long, requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub no_check: bool,
}

/// `--logits` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogitsArg {
    /// Chapter 5's tiny GEMM.
    Tiny,
    /// cuBLAS (on the emulator: a reference GEMM).
    Blas,
}

impl Args {
    /// The options of `--checkpoint`, when it was given.
    pub fn checkpoint_run(&self) -> Option<CheckpointRun> {
        Some(CheckpointRun {
            dir: self.checkpoint.clone()?,
            input: self.input.clone(),
            output: self.output.clone(),
            layer: self.layer,
            tokens: self.tokens,
            logits: self.logits.map(|l| match l {
                LogitsArg::Tiny => LogitsFrom::TinyGemm,
                LogitsArg::Blas => LogitsFrom::Blas,
            }),
            check: !self.no_check,
        })
    }
}
