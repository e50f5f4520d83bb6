//! Chapter 4's command line (`cargo run --example ch04 -- --help`): chapter 2's options
//! (`examples/ch02/cli.rs`), for the fused layer, with two of their help lines reworded. The
//! chapter's code lives in the library (`ch04_fused_moe::example`); this file only turns arguments
//! into its options. `tests/ch04_example.rs` includes this file too.

#[path = "../ch02/cli.rs"]
pub mod ch02;

use ch04_fused_moe::example::CheckpointOptions;
use clap::Parser;

/// Chapter 4: the fused MoE layer on tensor cores. Without options, chapter 2's two small layers
/// through the fused kernels, against the literal loop and chapter 2's grouped loop.
#[derive(Parser, Debug)]
#[group(skip)] // chapter 2's `Args` is the group of these options
#[command(
    name = "ch04",
    about,
    mut_arg("dtype", |a| a.help(
        "The experts' compute type. The fused layer computes in bf16 only (its kernels multiply on \
         bf16 tensor cores): f32 is refused with an error, as chapter 2's option is kept"
    )),
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
