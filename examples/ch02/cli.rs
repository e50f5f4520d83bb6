//! Chapter 2's command line (`cargo run --example ch02 -- --help`). The chapter's code lives in
//! the library (`ch02_grouped::example`); this file only turns arguments into its options.
//! `tests/ch02_example.rs` includes this file too.

use ch02_grouped::example::CheckpointOptions;
use ch02_grouped::Dtype;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// The help heading of the options that only a `--checkpoint` run reads (clap refuses them
/// without it: `requires = "checkpoint"`).
pub const CHECKPOINT_OPTIONS: &str = "Options of a checkpoint run (each needs --checkpoint)";

/// The end of `--help`: what the `⟨…⟩` of the output are.
pub const MEASURED_HELP: &str = "Numbers in ⟨…⟩ are measured on this machine (the GEMMs of \
    cuBLAS, of the emulator and of candle sum in different orders, so their last digits differ \
    from one machine to the next); the book's copy of the output shows them as ⟨…⟩, and the tests \
    hold them to the tolerance printed beside them.";

/// Chapter 2: the MoE layer, grouped by expert. Without options, two small built-in layers
/// through the literal loop, the CPU grouped loop and the device grouped loop.
#[derive(Parser, Debug)]
#[command(name = "ch02", about, after_help = MEASURED_HELP)]
pub struct Args {
    /// A Hugging Face checkpoint directory (config.json and .safetensors files) holding a MoE
    /// layer: Qwen3-MoE, Qwen2-MoE, DeepSeek-V3 or GLM-4-MoE.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    /// `hidden` [T, H] (f32, bf16 or f16) in a safetensors file; without it, 4 patterned tokens.
    #[arg(long, value_name = "FILE.safetensors", requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub input: Option<PathBuf>,
    /// Write `out` [T, H] f32 here.
    #[arg(long, value_name = "FILE.safetensors", requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub output: Option<PathBuf>,
    /// The experts' compute type: bf16 (the engines' path) or f32.
    #[arg(long, value_enum, default_value_t = DtypeArg::Bf16, requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
    pub dtype: DtypeArg,
    /// The model's layer index N, as in `model.layers.N.` (default: the first MoE layer; a dense
    /// layer is refused with the list of MoE layers).
    #[arg(
        long,
        value_name = "N",
        requires = "checkpoint",
        help_heading = CHECKPOINT_OPTIONS,
        allow_negative_numbers = true
    )]
    pub layer: Option<usize>,
    /// Skip the f64 literal loop that checks the device's output (it takes a while for a
    /// large batch of a real model).
    #[arg(long, requires = "checkpoint", help_heading = CHECKPOINT_OPTIONS)]
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

/// The command-line checks of the example tests of chapter 2 and of the chapters that reuse its
/// options (`tests/ch02_example.rs`, `tests/ch04_example.rs`): each option of a checkpoint run
/// without `--checkpoint` is a usage error that names it, a bad `--dtype` or `--layer` is
/// refused, and no option at all means the tour. `parse` is the chapter's
/// `Args::try_parse_from`, saying whether it found checkpoint options.
#[cfg(test)]
pub fn check_options_need_a_checkpoint(
    program: &str,
    parse: impl Fn(&[&str]) -> Result<bool, clap::Error>,
) {
    for options in [
        &["--input", "x.safetensors"][..],
        &["--output", "out.safetensors"],
        &["--dtype", "bf16"],
        &["--layer", "3"],
        &["--no-check"],
    ] {
        let argv = [&[program][..], options].concat();
        let err = parse(&argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{argv:?}"
        );
        assert!(err.to_string().contains("--checkpoint"), "{argv:?}: {err}");
    }
    let with = |bad: &[&str]| parse(&[&[program, "--checkpoint", "d"][..], bad].concat());
    let err = with(&["--dtype", "f16"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue, "{err}");
    let err = with(&["--layer", "x"]).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            clap::error::ErrorKind::InvalidValue | clap::error::ErrorKind::ValueValidation
        ),
        "--layer x: {err}"
    );
    assert!(!parse(&[program]).unwrap());
    // --help says which options need --checkpoint (under their own heading, after it), and what
    // the output's ⟨…⟩ are.
    let help = parse(&[program, "--help"]).unwrap_err().to_string();
    let heading = help.find(CHECKPOINT_OPTIONS).expect(&help);
    for option in ["--input", "--output", "--dtype", "--layer", "--no-check"] {
        assert!(help[heading..].contains(option), "{option}: {help}");
    }
    assert!(!help[..heading].contains("--no-check"), "{help}");
    assert!(help.contains(MEASURED_HELP), "{help}");
}
