//! The chapter's main, as a library: `examples/ch06/` parses the command line and calls [`run`].
//!
//! Without a checkpoint it builds two layers with real routers (Qwen3-30B-A3B's: softmax, top-8
//! of 128; GLM-4.5's: sigmoid + bias, top-8 of 160, scaling 2.5, a shared expert) at small hidden
//! sizes, and runs each at a decode size, a few speculative rows, the last row count of the tiny
//! GEMM and a prefill size: which logits GEMM and which of chapter 4's paths each gets, every
//! kernel the layer launches, and the output against chapter 2's literal loop. With
//! `--checkpoint` it loads a real MoE layer with chapter 2's loader and runs `--tokens` patterned
//! tokens (or `--input`'s) through it.
//!
//! stdout is the same on every backend except the measured values, printed in `⟨ ⟩` (the GEMMs
//! sum in other orders on each backend, and a near tie may route a token another way); the tests
//! check those against the tolerances.

use crate::layer::AssembledLayer;
use crate::switch::{DEFAULT_SWITCH_ROWS, SWITCH_POINTS};
use ch01_router::inputs::patterned;
use ch01_router::{RouterConfig, Routing};
use ch02_grouped::checkpoint::{self, LoadOptions};
use ch02_grouped::compare::{check_output, Tolerance};
pub use ch02_grouped::example::ExampleError;
use ch02_grouped::example::{check_rows, literal_error_line};
use ch02_grouped::{io, Dtype, LiteralLayer, MoeConfig, MoeLayer, MoeWeights, SharedExpert};
use ch04_fused_moe::example::plan_text;
use ch05_fused_router::LogitsFrom;
use half::bf16;
use moe_kernels::{record_launches, Device};
use std::io::Write;
use std::path::PathBuf;

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: std::fmt::Arguments) -> Result<(), ExampleError> {
    out.write_fmt(s)
        .map_err(|e| ExampleError::Stdout(e.to_string()))
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

/// What a `--checkpoint` run reads and does.
#[derive(Clone, Debug)]
pub struct CheckpointRun {
    pub dir: PathBuf,
    /// `hidden` [T, H] in a safetensors file; else `tokens` patterned tokens.
    pub input: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub layer: Option<usize>,
    pub tokens: usize,
    /// The logits GEMM at every batch size, instead of the switch point's.
    pub logits: Option<LogitsFrom>,
    /// Check against chapter 2's literal loop.
    pub check: bool,
}

/// Runs the example: the tour, or (with `checkpoint`) a reader's checkpoint.
pub fn run(
    checkpoint: Option<&CheckpointRun>,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    match checkpoint {
        Some(opts) => run_checkpoint(opts, device, out),
        None => tour(device, out),
    }
}

/// A kernel's label without its family (`ch05_tiny_gemm::tiny_gemm_r1` → `tiny_gemm_r1`), chapter
/// 3's kernels as `align:` and the library GEMM as `cuBLAS`.
fn short(label: &str) -> String {
    let name = label.rsplit("::").next().unwrap_or(label);
    if label == "blas::linear" {
        "cuBLAS".into()
    } else if label.starts_with("ch03_") {
        format!("align:{name}")
    } else {
        name.into()
    }
}

/// `4 launches: tiny_gemm_r1 · fused_router_block · …`.
pub fn launch_line(launched: &[String]) -> String {
    let names: Vec<String> = launched.iter().map(|l| short(l)).collect();
    format!("{} launches: {}", launched.len(), names.join(" · "))
}

/// `tiny GEMM` or `cuBLAS`.
pub fn logits_text(from: LogitsFrom) -> &'static str {
    match from {
        LogitsFrom::TinyGemm => "tiny GEMM",
        LogitsFrom::Blas => "cuBLAS",
    }
}

/// `v` rounded to bf16 and back: the values an engine holds.
fn round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// How many of the T tokens picked the same set of experts in `a` and `b`.
fn same_sets(a: &Routing, b: &Routing) -> usize {
    let set = |r: &Routing, t: usize| {
        let mut v = r.row_ids(t).to_vec();
        v.sort_unstable();
        v
    };
    (0..a.rows).filter(|&t| set(a, t) == set(b, t)).count()
}

/// The tour's two layers: real routers at small hidden sizes (the emulator runs them in seconds).
fn tour_layers() -> Vec<(&'static str, MoeWeights)> {
    let qwen3 = MoeConfig {
        hidden: 256,
        intermediate: 128,
        experts: 128,
        router: RouterConfig::qwen3(8),
        shared: None,
    };
    let glm = MoeConfig {
        hidden: 256,
        intermediate: 64,
        experts: 160,
        router: RouterConfig {
            routed_scaling: 2.5,
            ..RouterConfig::glm5(8)
        },
        shared: Some(SharedExpert {
            intermediate: 64,
            gated: false,
        }),
    };
    let make = |c: &MoeConfig, seed: u64, bias: bool| {
        let mut w = MoeWeights::patterned(c, seed, 2.0 / (c.hidden as f32).sqrt(), bias);
        w.gate = round(&w.gate); // the gate an engine holds, in bf16
        w
    };
    vec![
        (
            "Qwen3-30B-A3B's router (softmax, top-8 of 128) at H 256, I 128",
            make(&qwen3, 61, false),
        ),
        (
            "GLM-4.5's router (sigmoid + bias, top-8 of 160, scaling 2.5) and a shared expert, at H 256, I 64",
            make(&glm, 62, true),
        ),
    ]
}

/// The tour's batch sizes: one token, a few speculative rows, the largest the tiny GEMM takes
/// for a gate nobody measured, and a prefill size.
pub const TOUR_TOKENS: [usize; 4] = [1, 8, DEFAULT_SWITCH_ROWS, 256];

// ANCHOR: tour
fn tour(device: &'static Device, out: Out) -> Result<(), ExampleError> {
    say!(out, "Chapter 6: the MoE layer assembled");
    say!(out, "");
    say!(out, "The router's logits come from chapter 5's tiny GEMM up to the switch point, from cuBLAS above (bench/results/h200/ch05.csv):");
    for p in SWITCH_POINTS {
        say!(
            out,
            "  {} (H {}, E {}): the tiny GEMM up to {} rows",
            p.shape,
            p.hidden,
            p.experts,
            p.rows
        );
    }
    say!(
        out,
        "  any other gate: up to {DEFAULT_SWITCH_ROWS} rows (the smallest measured switch point)"
    );
    for (name, weights) in tour_layers() {
        let c = &weights.config;
        say!(out, "");
        say!(out, "== {name}");
        let layer = AssembledLayer::new(device, &weights)?;
        say!(
            out,
            "gate H {}, E {}: the tiny GEMM up to {} rows, cuBLAS above",
            c.hidden,
            c.experts,
            layer.switch_rows()
        );
        let literal = LiteralLayer::new(&weights, Dtype::Bf16)?;
        for (i, &rows) in TOUR_TOKENS.iter().enumerate() {
            let hidden = round(&patterned(rows * c.hidden, 70 + i as u64, 1.0));
            let (fwd, launched) = record_launches(|| layer.forward(&hidden));
            let fwd = fwd?;
            let ws = layer.workspace(rows)?;
            say!(
                out,
                "T = {rows}: {} logits; {}",
                logits_text(ws.logits_from()),
                plan_text(&ws.plan())
            );
            say!(out, "  {}", launch_line(&launched));
            // Chapter 2's literal loop in f64: on the layer's routing (the experts' error), and
            // with its own (the router's choices).
            let want = literal.experts(&hidden, &fwd.routing)?;
            let e = check_output(
                &format!("{name}, T = {rows}"),
                &want,
                &fwd.out,
                Tolerance::BF16_VS_ORACLE,
            )
            .map_err(ExampleError::Check)?;
            let own = literal.forward(&hidden)?.routing;
            say!(
                out,
                "  against the literal loop: the same experts for ⟨{}⟩ of {rows} tokens; error ⟨{:.1e}⟩ on the layer's routing (tolerance {:.0e})",
                same_sets(&own, &fwd.routing),
                e.relative,
                Tolerance::BF16_VS_ORACLE.0
            );
        }
    }
    say!(out, "");
    say!(out, "Numbers in ⟨…⟩ are measured on this machine: the GEMMs sum in another order on each backend (see --help).");
    say!(out, "Run a real checkpoint: cargo run --release --example ch06 -- --checkpoint DIR --tokens T (see --help).");
    Ok(())
}
// ANCHOR_END: tour

/// The most hidden-state values (`--tokens` × H) a `--checkpoint` run makes: 2^28 f32, 1 GiB on
/// the host for each of the input, the output and the check's copies.
pub const MAX_HIDDEN_VALUES: usize = 1 << 28;

fn run_checkpoint(
    opts: &CheckpointRun,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    // The files the run reads and writes, before the (possibly long) load.
    if let Some(path) = &opts.output {
        io::check_output_path(path, opts.input.as_deref(), &opts.dir)?;
    }
    // The input read (and refused if it is not a `hidden` [T, H]) before a real model's load.
    let input = match &opts.input {
        Some(path) if path.is_dir() => return Err(ExampleError::InputIsFolder(path.clone())),
        Some(path) if !path.is_file() => return Err(ExampleError::NoInput(path.clone())),
        Some(path) => Some(io::read_hidden(path)?),
        None => None,
    };
    let loaded = checkpoint::load(
        &opts.dir,
        &LoadOptions {
            layer: opts.layer,
            progress: true,
        },
    )?;
    let mut weights = loaded.weights;
    weights.gate = round(&weights.gate); // the gate in bf16, as the layer holds it
    let c = weights.config.clone();
    say!(out, "Chapter 6: the MoE layer assembled");
    say!(
        out,
        "{}: layer {}, {}: H {} I {} E {} k {}, {}",
        opts.dir.display(),
        loaded.layer,
        loaded.family,
        c.hidden,
        c.intermediate,
        c.experts,
        c.router.k,
        match c.shared {
            None => "no shared expert".to_string(),
            Some(s) if s.gated => format!("a gated shared expert of I {}", s.intermediate),
            Some(s) => format!("a shared expert of I {}", s.intermediate),
        }
    );
    let (hidden, rows) = match (&opts.input, input) {
        (Some(path), Some((hidden, rows, h))) => {
            if h != c.hidden {
                return Err(ExampleError::HiddenSize {
                    path: path.clone(),
                    found: h,
                    expected: c.hidden,
                });
            }
            (round(&hidden), rows)
        }
        _ => {
            // The patterned tokens, their output and the check's copies live on the host: refuse
            // a batch whose values would not fit, rather than fail to allocate it.
            let values = opts
                .tokens
                .checked_mul(c.hidden)
                .filter(|&v| v <= MAX_HIDDEN_VALUES);
            if values.is_none() {
                return Err(ExampleError::Check(format!(
                    "--tokens {}: too many tokens of hidden size {} for this example (at most {} \
                     for this layer: {} values of the hidden states)",
                    opts.tokens,
                    c.hidden,
                    MAX_HIDDEN_VALUES / c.hidden.max(1),
                    MAX_HIDDEN_VALUES
                )));
            }
            (
                round(&patterned(opts.tokens * c.hidden, 23, 1.0)),
                opts.tokens,
            )
        }
    };
    let mut layer = AssembledLayer::new(device, &weights)?;
    if let Some(from) = opts.logits {
        layer = layer.with_logits(from);
    }
    say!(
        out,
        "switch point of this gate: the tiny GEMM up to {} rows, cuBLAS above",
        layer.switch_rows()
    );
    let (fwd, launched) = record_launches(|| layer.forward(&hidden));
    let fwd = fwd?;
    if rows == 0 {
        say!(out, "no tokens: nothing to run");
        if let Some(path) = &opts.output {
            io::write_out(path, &fwd.out, 0, c.hidden)?;
            say!(
                out,
                "wrote `out` [0, {}] f32 to {}",
                c.hidden,
                path.display()
            );
        }
        return Ok(());
    }
    let ws = layer.workspace(rows)?;
    say!(
        out,
        "T = {rows}: {} logits; {}",
        logits_text(ws.logits_from()),
        plan_text(&ws.plan())
    );
    say!(out, "  {}", launch_line(&launched));
    if let Some(note) = ch02_grouped::example::non_finite_outputs(&fwd.out, &hidden) {
        say!(out, "{note}");
    }
    for t in 0..rows.min(4) {
        let ids: Vec<String> = fwd
            .routing
            .row_ids(t)
            .iter()
            .map(|e| e.to_string())
            .collect();
        say!(out, "token {t}: experts {}", ids.join(" "));
    }
    // The output first: a check that fails must not cost the reader the output.
    if let Some(path) = &opts.output {
        io::write_out(path, &fwd.out, rows, c.hidden)?;
        say!(
            out,
            "wrote `out` [{rows}, {}] f32 to {}",
            c.hidden,
            path.display()
        );
    }
    if opts.check {
        let literal = LiteralLayer::new(&weights, Dtype::Bf16)?;
        let want = literal.experts(&hidden, &fwd.routing)?;
        say!(
            out,
            "{}",
            literal_error_line(&want, &fwd.out, c.hidden, Dtype::Bf16)
        );
        check_rows(
            "the assembled layer",
            &want,
            &fwd.out,
            c.hidden,
            Dtype::Bf16,
        )
        .map_err(ExampleError::Check)?;
    }
    Ok(())
}
