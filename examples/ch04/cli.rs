//! Chapter 4's command line (`cargo run --example ch04 -- --help`): chapter 2's options
//! (`examples/ch02/cli.rs`), for the fused layer, with two of their help lines reworded. The
//! chapter's code lives in the library (`ch04_fused_moe::example`); this file only turns arguments
//! into its options. `tests/ch04_example.rs` includes this file too.

#[path = "../ch02/cli.rs"]
pub mod ch02;

use ch02::DtypeArg;
use ch04_fused_moe::choose::{TileConfig, HOPPER_CONFIGS, TILE_CONFIGS};
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
    /// Force the tiled path onto one tile configuration of kernels/ch04/configs.def (versions
    /// 1 to 3 anywhere, 4 to 11 on an sm_90a GPU or the emulator): the tour checks its bits
    /// against the default tile's, a checkpoint runs on it
    #[arg(long, value_name = "NAME", value_parser = parse_tile)]
    pub tile: Option<TileConfig>,
}

/// A tile configuration by name, or clap's error listing every name.
fn parse_tile(s: &str) -> Result<TileConfig, String> {
    TileConfig::parse(s).ok_or_else(|| {
        let names: Vec<String> = TILE_CONFIGS
            .iter()
            .chain(HOPPER_CONFIGS.iter())
            .map(|c| c.name())
            .collect();
        format!(
            "no tile configuration {s:?}; the configurations: {}",
            names.join(", ")
        )
    })
}

impl Args {
    /// The options of `--checkpoint`, when it was given.
    pub fn checkpoint_options(&self) -> Option<CheckpointOptions> {
        self.options.checkpoint_options()
    }
}
