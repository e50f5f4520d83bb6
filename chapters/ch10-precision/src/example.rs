//! What `cargo run --example ch10` prints: the bias spreads and how many bf16 values they keep,
//! a scaled-down run of the flip count (a few hundred rows of each shape against the fp64
//! router), and one flip through chapter 2's layer. CPU only, deterministic, a few seconds.

use crate::flips::{bias_of, distinct_bf16, run_shape, Options, ShapeTally};
use crate::output::{median, one_flip};
use crate::shapes::{ARITHMETICS, SHAPES};
use std::io::Write;

/// Rows of each shape in the example (the committed run has 100,000).
pub const EXAMPLE_ROWS: usize = 500;
/// Tokens through the layer in the example.
pub const EXAMPLE_TOKENS: usize = 32;

/// An arithmetic's column head: `fp32_tiny_gemm` → `fp32 tiny`.
fn column(name: &str) -> String {
    name.replace("_gemm", "").replace('_', " ")
}

/// Writes the example's text to `out`.
pub fn run(out: &mut dyn Write) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    writeln!(
        out,
        "Chapter 10: precision, the router against fp64 (CPU only)\n"
    )
    .map_err(io)?;
    writeln!(
        out,
        "Synthetic biases over the router article's bias ranges, and the bf16 values they keep:"
    )
    .map_err(io)?;
    for shape in SHAPES.iter().filter(|s| !s.spreads.is_empty()) {
        for sp in shape.spreads {
            let b = bias_of(shape, sp);
            writeln!(
                out,
                "  {:<12} {:<27} [{}, {}], {} experts: {} in bf16",
                shape.title,
                sp.title,
                sp.lo,
                sp.hi,
                b.len(),
                distinct_bf16(&b)
            )
            .map_err(io)?;
        }
    }
    writeln!(
        out,
        "\n{EXAMPLE_ROWS} rows of each shape: rows whose expert set differs from the fp64 router's"
    )
    .map_err(io)?;
    let mut head = format!("  {:<14} {:<8}", "shape", "bias");
    for a in &ARITHMETICS {
        head.push_str(&format!(" {:>11}", column(a.name)));
    }
    writeln!(out, "{head}").map_err(io)?;
    let opts = Options {
        rows: EXAMPLE_ROWS,
        threads: 2,
    };
    let tallies: Vec<ShapeTally> = SHAPES.iter().map(|s| run_shape(s, opts, &|_| {})).collect();
    for t in &tallies {
        for c in &t.cases {
            let mut line = format!(
                "  {:<14} {:<8}",
                t.shape.title,
                c.spread.map_or("none", |s| s.name)
            );
            for a in &ARITHMETICS {
                match c.arith.iter().find(|x| x.arithmetic.name == a.name) {
                    Some(x) => line.push_str(&format!(" {:>11}", x.flips)),
                    None => line.push_str(&format!(" {:>11}", "-")),
                }
            }
            writeln!(out, "{line}").map_err(io)?;
        }
    }
    let results = one_flip(EXAMPLE_TOKENS).map_err(|e| e.to_string())?;
    let c = crate::output::layer_config();
    writeln!(
        out,
        "\nOne flip through chapter 2's layer (H {}, I {}, {} experts, top-{}), {} tokens:",
        c.hidden, c.intermediate, c.experts, c.router.k, EXAMPLE_TOKENS
    )
    .map_err(io)?;
    let m = |f: fn(&crate::output::TokenResult) -> f64| median(results.iter().map(f).collect());
    writeln!(
        out,
        "  median relative error of a token's output: {:.2} with one expert swapped,",
        m(|r| r.flip_rel_err),
    )
    .map_err(io)?;
    writeln!(
        out,
        "  {:.4} from the bf16 layer's rounding",
        m(|r| r.bf16_rel_err)
    )
    .map_err(io)?;
    writeln!(
        out,
        "  median weight of the swapped-out expert: {:.3}",
        m(|r| r.swapped_weight)
    )
    .map_err(io)?;
    Ok(())
}
