//! Chapter 5's command line (`cargo run --example ch05 -- --help`): chapter 1's options
//! (`examples/ch01/cli.rs`), for the fused pair, with the help of the files reworded. The
//! chapter's code lives in the library (`ch05_fused_router::example`); this file only turns
//! arguments into its options. `tests/ch05_example.rs` includes this file too.

#[path = "../ch01/cli.rs"]
pub mod ch01;

use ch01_router::example::FileOptions;
use clap::Parser;
use std::path::PathBuf;

/// Chapter 5: the fused router pair (a tiny GEMM for fp32 logits, one kernel for scores, top-k
/// and weights). Without options, the toy layer, a GLM-like batch beside chapter 1's chain, and
/// every test regime.
#[derive(Parser, Debug)]
#[group(skip)] // chapter 1's `Args` is the group of these options
#[command(
    name = "ch05",
    about,
    mut_arg("input", |a| a.help(
        "Route your own hidden states: a safetensors file with `hidden` [T, H] and `gate` [E, H], \
         each bf16 or f32 (f32 is rounded to bf16, the type the tiny GEMM reads), and optionally \
         `bias` [E] f32"
    )),
    mut_arg("output", |a| a.help(
        "Write `logits` [T, E] f32, `ids` [T, k] i32 and `weights` [T, k] f32 here"
    )),
    after_help = concat!(
        "Limits of the pair: H a multiple of 8 and not 0 (the tiny GEMM reads 16-byte \
         slices), E at most 1024, k at most 32, at most 32 groups (the fused router's \
         lanes); past them, a typed error.\n\n",
        "Non-finite values: a NaN or infinite logit (from a NaN or infinite hidden state or \
         gate weight) scores 0 and ranks last, after every finite logit, as chapter 1's rule \
         says; the softmax runs over the finite logits only. The run says on stderr how many \
         rows and logits it applied to. A bias must be finite (a typed error)."
    )
)]
pub struct Args {
    #[command(flatten)]
    pub options: ch01::Args,
}

impl Args {
    /// The options of `--input`, when it was given.
    pub fn file_options(&self) -> Option<(PathBuf, FileOptions)> {
        self.options.file_options()
    }
}
