//! Chapter 4's command line (`cargo run --example ch04 -- --help`): chapter 2's options, for the
//! fused layer. The chapter's code lives in the library (`ch04_fused_moe::example`); this file
//! only turns arguments into its options. `tests/ch04_example.rs` includes this file too.

use ch02_grouped::Dtype;
use ch04_fused_moe::example::CheckpointOptions;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// Chapter 4: the fused MoE layer on tensor cores. Without options, chapter 2's two small layers
/// through the fused kernels, against the literal loop and chapter 2's grouped loop.
#[derive(Parser, Debug)]
#[command(name = "ch04", about)]
pub struct Args {
    /// A Hugging Face checkpoint directory (config.json and .safetensors files) holding a MoE
    /// layer: Qwen3-MoE, Qwen2-MoE, DeepSeek-V3 or GLM-4-MoE.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    /// `hidden` [T, H] (f32, bf16 or f16) in a safetensors file; without it, 4 patterned tokens.
    #[arg(long, value_name = "FILE.safetensors", requires = "checkpoint")]
    pub input: Option<PathBuf>,
    /// Write `out` [T, H] f32 here.
    #[arg(long, value_name = "FILE.safetensors", requires = "checkpoint")]
    pub output: Option<PathBuf>,
    /// The experts' compute type. The fused layer computes in bf16 only (its kernels multiply on
    /// bf16 tensor cores): f32 is refused with an error, as chapter 2's option is kept.
    #[arg(long, value_enum, default_value_t = DtypeArg::Bf16, requires = "checkpoint")]
    pub dtype: DtypeArg,
    /// The model's layer index N, as in `model.layers.N.` (default: the first MoE layer; a dense
    /// layer is refused with the list of MoE layers).
    #[arg(long, value_name = "N", requires = "checkpoint")]
    pub layer: Option<usize>,
    /// Skip the f64 literal loop that checks the fused layer's output (it takes a while for a
    /// large batch of a real model).
    #[arg(long, requires = "checkpoint")]
    pub no_check: bool,
}

/// `--dtype` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DtypeArg {
    Bf16,
    F32,
}

impl Args {
    /// The options of `--checkpoint`, when it was given.
    pub fn checkpoint_options(&self) -> Option<CheckpointOptions> {
        Some(CheckpointOptions {
            dir: self.checkpoint.clone()?,
            input: self.input.clone(),
            output: self.output.clone(),
            dtype: match self.dtype {
                DtypeArg::Bf16 => Dtype::Bf16,
                DtypeArg::F32 => Dtype::F32,
            },
            layer: self.layer,
            check: !self.no_check,
        })
    }
}
