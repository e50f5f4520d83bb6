//! Chapter 4's command line (`cargo run --example ch04 -- --help`): chapter 2's options
//! (`examples/ch02/cli.rs`), for the fused layer, with two of their help lines reworded. The
//! chapter's code lives in the library (`ch04_fused_moe::example`); this file only turns arguments
//! into its options. `tests/ch04_example.rs` includes this file too.

#[path = "../ch02/cli.rs"]
pub mod ch02;

use ch02::DtypeArg;
use ch04_fused_moe::example::CheckpointOptions;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Parser;

/// Chapter 4: the fused MoE layer on tensor cores. Without options, chapter 2's two small layers
/// through the fused kernels, against the literal loop and chapter 2's grouped loop.
#[derive(Parser, Debug)]
#[group(skip)] // chapter 2's `Args` is the group of these options
#[command(
    name = "ch04",
    about,
    after_help = ch02::MEASURED_HELP,
    // bf16 is the only value: `--help` lists it alone and clap refuses f32 as it refuses any
    // other value (chapter 2's option, kept so that a chapter 2 command line reads the same).
    mut_arg("dtype", |a| a
        .help(
            "The experts' compute type: bf16 only (the fused kernels multiply on bf16 tensor \
             cores; chapter 2's f32 has no fused counterpart)"
        )
        .value_parser(PossibleValuesParser::new(["bf16"]).map(|_| DtypeArg::Bf16))),
    mut_arg("no_check", |a| a.help(
        "Skip the f64 literal loop that checks the fused layer's output (it takes a while for a \
         large batch of a real model)"
    ))
)]
pub struct Args {
    #[command(flatten)]
    pub options: ch02::Args,
}

impl Args {
    /// The options of `--checkpoint`, when it was given.
    pub fn checkpoint_options(&self) -> Option<CheckpointOptions> {
        self.options.checkpoint_options()
    }
}
