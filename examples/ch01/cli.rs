//! Chapter 1's command line (`cargo run --example ch01 -- --help`). The chapter's code lives in
//! the library (`ch01_router::example`); this file only turns arguments into its options, so the
//! chapter crate does not depend on clap. `tests/ch01_example.rs` includes this file too.

use ch01_router::config::{Grouping, RouterConfig, Scoring};
use ch01_router::example::FileOptions;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// The help heading of the options that only an `--input` run reads (clap refuses them without
/// it: `requires = "input"`).
pub const INPUT_OPTIONS: &str = "Options of an --input run (each needs --input)";

/// Chapter 1: the reference router, on the CPU and as a chain of plain kernels. Without
/// options, a tour of the router article's toy example and of every test regime.
#[derive(Parser, Debug)]
#[command(
    name = "ch01",
    about,
    after_help = "Non-finite logits: a NaN or infinite logit in the file scores 0 and ranks last, \
                  after every finite logit (the chapter's rule); the softmax runs over the finite \
                  logits only. The run says on stderr how many logits and rows it applied to. A \
                  bias must be finite (a typed error)."
)]
pub struct Args {
    /// Route your own logits: a safetensors file with `logits` [T, E] f32 and optionally
    /// `bias` [E] f32 (`tools/make-input router` writes one).
    #[arg(long, value_name = "FILE.safetensors")]
    pub input: Option<PathBuf>,
    /// Write `ids` [T, k] i32 and `weights` [T, k] f32 here.
    #[arg(long, value_name = "FILE.safetensors", requires = "input", help_heading = INPUT_OPTIONS)]
    pub output: Option<PathBuf>,
    /// Experts per token.
    #[arg(
        long,
        default_value_t = 8,
        requires = "input",
        help_heading = INPUT_OPTIONS,
        allow_negative_numbers = true
    )]
    pub k: usize,
    /// How logits become scores.
    #[arg(long, value_enum, default_value_t = ScoringArg::Sigmoid, requires = "input", help_heading = INPUT_OPTIONS)]
    pub scoring: ScoringArg,
    /// Do not renormalise the k selected weights to sum to 1.
    #[arg(long, requires = "input", help_heading = INPUT_OPTIONS)]
    pub no_renormalize: bool,
    /// Grouped selection (DeepSeek-V3): `N_GROUP:TOPK_GROUP`, e.g. `8:4`.
    #[arg(
        long,
        value_name = "N:TOPK",
        value_parser = parse_groups,
        requires = "input",
        help_heading = INPUT_OPTIONS,
        allow_hyphen_values = true
    )]
    pub groups: Option<Grouping>,
    /// Routed scaling factor applied to the weights (finite, above 0).
    #[arg(
        long,
        default_value_t = 1.0,
        value_parser = parse_scale,
        requires = "input",
        help_heading = INPUT_OPTIONS,
        allow_hyphen_values = true
    )]
    pub scale: f32,
    /// Round the bias to bf16 before routing, and count the rows that then select a different
    /// set of experts than with the bias as stored.
    #[arg(long, requires = "input", help_heading = INPUT_OPTIONS)]
    pub bias_bf16: bool,
    /// How many rows to print.
    #[arg(
        long,
        default_value_t = 4,
        requires = "input",
        help_heading = INPUT_OPTIONS,
        allow_negative_numbers = true
    )]
    pub show: usize,
}

/// `--scoring` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ScoringArg {
    Softmax,
    Sigmoid,
    SqrtSoftplus,
}

/// A finite f32 above 0, so that clap's message names `--scale` (the router's own check says
/// the same without naming the option); a number too large for an f32 is said to be so (f32
/// parsing turns it into infinity). Hyphen values are taken (`-inf`, `-1`), to be refused here.
fn parse_scale(s: &str) -> Result<f32, String> {
    let v: f32 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_infinite() && s.trim().parse::<f64>().is_ok_and(f64::is_finite) {
        return Err(format!("{s} is past the largest f32 ({:e})", f32::MAX));
    }
    if !(v.is_finite() && v > 0.0) {
        return Err(format!(
            "the routed scaling factor must be a finite number above 0, got {v}"
        ));
    }
    Ok(v)
}

fn parse_groups(s: &str) -> Result<Grouping, String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("expected N_GROUP:TOPK_GROUP, got {s:?}"))?;
    let n_group = a
        .trim()
        .parse()
        .map_err(|_| format!("N_GROUP {a:?} is not a number"))?;
    let topk_group = b
        .trim()
        .parse()
        .map_err(|_| format!("TOPK_GROUP {b:?} is not a number"))?;
    Ok(Grouping {
        n_group,
        topk_group,
    })
}

impl Args {
    /// The options of `--input`, when it was given.
    pub fn file_options(&self) -> Option<(PathBuf, FileOptions)> {
        let input = self.input.clone()?;
        let config = RouterConfig {
            k: self.k,
            scoring: match self.scoring {
                ScoringArg::Softmax => Scoring::Softmax,
                ScoringArg::Sigmoid => Scoring::Sigmoid,
                ScoringArg::SqrtSoftplus => Scoring::SqrtSoftplus,
            },
            renormalize: !self.no_renormalize,
            grouping: self.groups,
            routed_scaling: self.scale,
        };
        Some((
            input,
            FileOptions {
                config,
                bias_bf16: self.bias_bf16,
                show: self.show,
                output: self.output.clone(),
            },
        ))
    }
}
