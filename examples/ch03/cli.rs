//! Chapter 3's command line (`cargo run --example ch03 -- --help`). The chapter's code lives in
//! the library (`ch03_align::example`); this file only turns arguments into its options.
//! `tests/ch03_example.rs` includes this file too.

use ch03_align::example::InputOptions;
use clap::Parser;
use std::path::PathBuf;

/// The help heading of the options that only an `--input` run reads (clap refuses them without
/// it: `requires = "input"`).
pub const INPUT_OPTIONS: &str = "Options of an --input run (each needs --input)";

/// Chapter 3: sorting (token, expert) pairs by expert and padding each expert's run to BLOCK_M
/// (`moe_align_block_size`). Without options, the book's worked example and every regime, the
/// kernel against the literal sort.
#[derive(Parser, Debug)]
#[command(name = "ch03", about)]
pub struct Args {
    /// Align your own routing: a safetensors file with `topk_ids` [T, k] i32 (chapter 1's
    /// `--output` file, whose tensor is `ids`, works too). Needs --experts.
    #[arg(long, value_name = "FILE.safetensors", requires = "experts")]
    pub input: Option<PathBuf>,
    /// E, the layer's expert count: every id must lie in 0..E (required with --input).
    #[arg(
        long,
        value_name = "E",
        requires = "input",
        help_heading = INPUT_OPTIONS,
        allow_negative_numbers = true
    )]
    pub experts: Option<usize>,
    /// The tile: a power of two from 1 to 1024 (default: the chapter's rule, by pairs per
    /// expert).
    #[arg(
        long,
        value_name = "N",
        requires = "input",
        help_heading = INPUT_OPTIONS,
        allow_negative_numbers = true
    )]
    pub block_m: Option<usize>,
    /// Write `sorted_ids`, `expert_ids` and `num_tokens_post_padded` [1] (all i32) here.
    #[arg(
        long,
        value_name = "OUT.safetensors",
        requires = "input",
        help_heading = INPUT_OPTIONS
    )]
    pub output: Option<PathBuf>,
}

impl Args {
    /// The options of `--input`, when it was given (clap has made sure `--experts` came too).
    pub fn input_options(&self) -> Option<InputOptions> {
        Some(InputOptions {
            input: self.input.clone()?,
            experts: self.experts?,
            block_m: self.block_m,
            output: self.output.clone(),
        })
    }
}
