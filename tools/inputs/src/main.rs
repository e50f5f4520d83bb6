//! `tools/make-input`: writes an input file for a chapter's example, with the book's own
//! deterministic generator (`ch01_router::inputs::patterned`): the same file on every machine,
//! and no Python, numpy or safetensors package needed to make it.
//!
//!     tools/make-input router --rows 1000 --experts 288 --bias --out router_in.safetensors
//!     cargo run --example ch01 -- --input router_in.safetensors --bias-bf16
//!     tools/make-input gate --rows 16 --hidden 4096 --experts 288 --bias --out gate_in.safetensors
//!     cargo run --release --example ch05 -- --input gate_in.safetensors --scoring sigmoid
//!
//! Exit codes: 0 written, 1 the file could not be written, 2 usage error.

use candle_core::{DType, Device, Tensor};
use ch01_router::inputs::{patterned, router_input};
use clap::{Parser, Subcommand};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
    /// Chapter 5: `hidden` `[T, H]` and `gate` `[E, H]` bf16 (hidden states in [-1, 1), gate
    /// rows in [-0.02, 0.02), a logit's spread about a checkpoint's), and with --bias a `bias`
    /// `[E]` f32 around 8 as `router` writes it.
    Gate(GateArgs),
}

#[derive(clap::Args)]
struct GateArgs {
    /// Tokens (rows of hidden states).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    rows: u32,
    /// The hidden size H.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    hidden: u32,
    /// Experts (rows of the gate weight).
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

/// The hidden states, gate weight and (with --bias) the bias of `GateArgs`, each tensor from its
/// own salt of the book's generator; the two matrices rounded to bf16 as a checkpoint stores them.
fn write_gate(a: &GateArgs) -> Result<String, String> {
    let (rows, hidden, experts) = (a.rows as usize, a.hidden as usize, a.experts as usize);
    if rows * hidden > 1 << 28 || experts * hidden > 1 << 28 {
        return Err(format!(
            "{rows} × {hidden} hidden values or {experts} × {hidden} gate values: more than 2^28, \
             too large for an example's input"
        ));
    }
    let cpu = Device::Cpu;
    let bf16 = |v: Vec<f32>, shape: (usize, usize)| -> Result<Tensor, String> {
        Tensor::from_vec(v, shape, &cpu)
            .and_then(|t| t.to_dtype(DType::BF16))
            .map_err(|e| e.to_string())
    };
    let mut t = HashMap::new();
    let salt = a.seed * 1000;
    t.insert(
        "hidden".to_string(),
        bf16(patterned(rows * hidden, salt + 501, 1.0), (rows, hidden))?,
    );
    t.insert(
        "gate".to_string(),
        bf16(
            patterned(experts * hidden, salt + 502, 0.02),
            (experts, hidden),
        )?,
    );
    let bias = a.bias.then(|| router_input(0, experts, a.seed).1);
    save(
        t,
        bias,
        &a.out,
        &format!("hidden [{rows}, {hidden}] bf16, gate [{experts}, {hidden}] bf16"),
    )
}

/// Writes `t`, with `bias` as the `bias` tensor when given, to `out`, and says what it wrote
/// (`what`, then the bias).
fn save(
    mut t: HashMap<String, Tensor>,
    bias: Option<Vec<f32>>,
    out: &Path,
    what: &str,
) -> Result<String, String> {
    let mut said = format!("wrote {}: {what}", out.display());
    if let Some(bias) = bias {
        let n = bias.len();
        t.insert(
            "bias".to_string(),
            Tensor::from_vec(bias, n, &Device::Cpu).map_err(|e| e.to_string())?,
        );
        said += &format!(", bias [{n}] f32");
    }
    candle_core::safetensors::save(&t, out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(said)
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
    save(
        t,
        a.bias.then_some(bias),
        &a.out,
        &format!("logits [{rows}, {experts}] f32"),
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match &cli.what {
        What::Router(a) => write_router(a),
        What::Gate(a) => write_gate(a),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gate_args(out: PathBuf, bias: bool) -> GateArgs {
        GateArgs {
            rows: 3,
            hidden: 64,
            experts: 8,
            bias,
            seed: 0,
            out,
        }
    }

    #[test]
    fn gate_writes_what_chapter_5_reads() {
        let dir = std::env::temp_dir().join(format!("make-input-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("gate.safetensors");
        let msg = write_gate(&gate_args(out.clone(), true)).unwrap();
        assert!(
            msg.contains("hidden [3, 64] bf16, gate [8, 64] bf16, bias [8] f32"),
            "{msg}"
        );
        let t = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
        let mut names: Vec<&String> = t.keys().collect();
        names.sort();
        assert_eq!(names, ["bias", "gate", "hidden"]);
        assert_eq!(t["hidden"].dims(), [3, 64]);
        assert_eq!(t["hidden"].dtype(), DType::BF16);
        assert_eq!(t["gate"].dims(), [8, 64]);
        assert_eq!(t["gate"].dtype(), DType::BF16);
        assert_eq!(t["bias"].dtype(), DType::F32);
        // The values are the generator's, in its ranges: the gate's within ±0.02 (and one bf16
        // rounding, 2⁻⁸ of it, past), the bias 8 ± 0.05.
        let gate: Vec<f32> = t["gate"]
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(gate.iter().all(|v| v.abs() <= 0.02 * (1.0 + 1.0 / 256.0)));
        assert!(gate.iter().any(|&v| v != 0.0));
        let bias: Vec<f32> = t["bias"].to_vec1().unwrap();
        assert!(bias.iter().all(|b| (b - 8.0).abs() <= 0.05), "{bias:?}");
        // Without --bias, no bias tensor.
        write_gate(&gate_args(out.clone(), false)).unwrap();
        let t = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
        assert!(!t.contains_key("bias"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn gate_refuses_a_file_too_large_with_a_message() {
        let mut a = gate_args(PathBuf::from("/nonexistent/x.safetensors"), false);
        a.rows = 65_536;
        a.hidden = 65_536;
        let e = write_gate(&a).unwrap_err();
        assert!(e.contains("too large"), "{e}");
        // A folder that does not exist: the path is named.
        let e = write_gate(&gate_args(
            PathBuf::from("/nonexistent/x.safetensors"),
            false,
        ))
        .unwrap_err();
        assert!(e.contains("/nonexistent/x.safetensors"), "{e}");
    }
}
