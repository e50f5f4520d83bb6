//! `tools/make-input`: writes an input file for a chapter's example, with the book's own
//! deterministic generator (`ch01_router::inputs::patterned`): the same file on every machine,
//! and no Python, numpy or safetensors package needed to make it.
//!
//!     tools/make-input router --rows 1000 --experts 288 --bias --out router_in.safetensors
//!     cargo run --example ch01 -- --input router_in.safetensors --bias-bf16
//!
//! Exit codes: 0 written, 1 the file could not be written, 2 usage error.

use candle_core::{Device, Tensor};
use ch01_router::inputs::router_input;
use clap::{Parser, Subcommand};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "make-input",
    about = "Write an example input file for a chapter's example."
)]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Chapter 1: `logits` [T, E] f32 in [-3, 3), and with --bias a `bias` `[E]` f32 around
    /// the toy layer's 8 (8 ± 0.05; GLM-5.3-Flash's lie near 11.7).
    Router(RouterArgs),
}

#[derive(clap::Args)]
struct RouterArgs {
    /// Tokens (rows of logits).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    rows: u32,
    /// Experts (columns of logits).
    #[arg(long, default_value_t = 288, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    experts: u32,
    /// Also write a selection bias.
    #[arg(long)]
    bias: bool,
    /// Picks another set of values (0 gives the book's file).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where to write the file.
    #[arg(long, value_name = "FILE.safetensors")]
    out: PathBuf,
}

fn write_router(a: &RouterArgs) -> Result<String, String> {
    let (rows, experts) = (a.rows as usize, a.experts as usize);
    let (logits, bias) = router_input(rows, experts, a.seed);
    let cpu = Device::Cpu;
    let mut t = HashMap::new();
    t.insert(
        "logits".to_string(),
        Tensor::from_vec(logits, (rows, experts), &cpu).map_err(|e| e.to_string())?,
    );
    if a.bias {
        t.insert(
            "bias".to_string(),
            Tensor::from_vec(bias, experts, &cpu).map_err(|e| e.to_string())?,
        );
    }
    candle_core::safetensors::save(&t, &a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    Ok(format!(
        "wrote {}: logits [{rows}, {experts}] f32{}",
        a.out.display(),
        if a.bias {
            format!(", bias [{experts}] f32")
        } else {
            String::new()
        }
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match &cli.what {
        What::Router(a) => write_router(a),
    };
    match r {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make-input: {e}");
            ExitCode::FAILURE
        }
    }
}
