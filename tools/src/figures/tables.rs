//! The chapter tables as Markdown, pivoted to fit a page (STYLE.md item 14): for each shape, one
//! line per implementation and one column per row count; each cell `cold / warm` in µs, the
//! chain's with its ratio to the PyTorch peer measured in the same run, and a last line with the
//! chain's achieved bandwidth and FLOP rate.

use super::svg::{describe_shape, impls, shapes};
use crate::bench_row::{BenchRow, StepRow};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// A time in µs with about three significant digits.
pub fn fmt_us(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The head of a pivoted table: `| | 1 row | 2 rows | … |` and its alignment line (`unit` is
/// `row` or `token`).
pub fn count_header(counts: &[u64], unit: &str) -> String {
    let names: Vec<String> = counts
        .iter()
        .map(|n| format!("{n} {unit}{}", if *n == 1 { "" } else { "s" }))
        .collect();
    format!(
        "| | {} |\n|---|{}\n",
        names.join(" | "),
        "---:|".repeat(counts.len())
    )
}

fn row_counts<'a>(rows: impl Iterator<Item = &'a u64>) -> Vec<u64> {
    rows.copied().collect::<BTreeSet<_>>().into_iter().collect()
}

/// `7` or `8–9`: the launch counts an implementation has across row counts.
fn launch_range(rows: &[&BenchRow]) -> String {
    let lo = rows.iter().map(|r| r.launches).min().unwrap_or(0);
    let hi = rows.iter().map(|r| r.launches).max().unwrap_or(0);
    let n = if lo == hi {
        format!("{lo}")
    } else {
        format!("{lo}–{hi}")
    };
    format!("{n} launch{}", if hi == 1 { "" } else { "es" })
}

/// The chain's cold median over the peer's, at one shape and row count.
pub fn ratio(rows: &[BenchRow], shape: &str, n: u64, imp: &str, peer: &str) -> Option<f64> {
    let cold = |i: &str| {
        rows.iter()
            .find(|r| r.shape == shape && r.rows == n && r.imp == i)
            .map(|r| r.cold_median_us)
    };
    Some(cold(imp)? / cold(peer)?)
}

/// The measurements table the chapter quotes, one block per shape.
pub fn measurements(rows: &[BenchRow]) -> String {
    let rows: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    let mut s = String::new();
    for shape in shapes(&rows) {
        let here: Vec<&BenchRow> = rows.iter().filter(|r| r.shape == shape).collect();
        let counts = row_counts(here.iter().map(|r| &r.rows));
        let _ = writeln!(
            s,
            "**{}**: µs per call, cold / warm (chain: cold ratio to PyTorch)\n",
            describe_shape(&shape)
        );
        s += &count_header(&counts, "row");
        for imp in impls(&rows) {
            let mine: Vec<&BenchRow> = here.iter().copied().filter(|r| r.imp == imp).collect();
            if mine.is_empty() {
                continue;
            }
            let cells: Vec<String> = counts
                .iter()
                .map(|&n| {
                    let Some(r) = mine.iter().find(|r| r.rows == n) else {
                        return String::new();
                    };
                    let mut c = format!(
                        "{} / {}",
                        fmt_us(r.cold_median_us),
                        fmt_us(r.warm_median_us)
                    );
                    if imp == "chain" {
                        if let Some(x) = ratio(&rows, &shape, n, "chain", "torch_5line") {
                            let _ = write!(c, " ({x:.2}×)");
                        }
                    }
                    c
                })
                .collect();
            let _ = writeln!(
                s,
                "| {imp} ({}) | {} |",
                launch_range(&mine),
                cells.join(" | ")
            );
        }
        let floors: Vec<String> = counts
            .iter()
            .map(|&n| {
                here.iter()
                    .find(|r| r.rows == n)
                    .map(|r| fmt_us(r.floor_us))
                    .unwrap_or_default()
            })
            .collect();
        let _ = writeln!(s, "| floor | {} |", floors.join(" | "));
        // llm.c's habit: the rate beside the time. The chain's cold time as achieved bandwidth
        // (its fewest bytes) and arithmetic rate.
        let rate = |f: &dyn Fn(&BenchRow) -> String| -> String {
            counts
                .iter()
                .map(|&n| {
                    here.iter()
                        .find(|r| r.rows == n && r.imp == "chain")
                        .map(|r| f(r))
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let _ = writeln!(
            s,
            "| chain, cold: GB/s | {} |",
            rate(&|r| format!("{:.0}", r.cold_gbs))
        );
        let _ = writeln!(
            s,
            "| chain, cold: TFLOP/s | {} |\n",
            rate(&|r| format!("{:.2}", r.cold_tflops))
        );
    }
    s
}

/// Parses the steps CSV (`tools/bench` writes it beside the chapter's CSV).
pub fn parse_steps(text: &str, name: &str) -> Result<Vec<StepRow>, String> {
    let table = crate::csv::Table::parse(text, name)?;
    let want: Vec<&str> = crate::bench_row::STEP_COLUMNS.split(',').collect();
    if table.header().1 != want {
        return Err(format!(
            "{name}: header is not `{}`",
            crate::bench_row::STEP_COLUMNS
        ));
    }
    table
        .rows()
        .iter()
        .map(|row| {
            let f = &row.fields;
            let bad = |c: usize| {
                format!(
                    "{name}:{}: column {} (`{}`) is not valid",
                    row.line,
                    c + 1,
                    want[c]
                )
            };
            let num = |c: usize| f[c].parse::<f64>().map_err(|_| bad(c));
            Ok(StepRow {
                chapter: f[0].clone(),
                shape: f[1].clone(),
                rows: f[2].parse().map_err(|_| bad(2))?,
                step: f[3].parse().map_err(|_| bad(3))?,
                kernel: f[4].clone(),
                prefix_cold_us: num(5)?,
                prefix_warm_us: num(6)?,
                cold_us: num(7)?,
                warm_us: num(8)?,
            })
        })
        .collect()
}

/// The chain's per-kernel breakdown: for each shape, one line per kernel and one column per row
/// count, each cell `cold / warm` µs: the difference between the chain stopped after this
/// kernel and after the one before. A difference is the sum of two noisy medians, so one that
/// comes out below zero (a kernel cheaper than the noise) is shown as `≈0`.
pub fn steps(rows: &[StepRow]) -> String {
    let mut out = String::new();
    let mut shapes: Vec<&str> = Vec::new();
    for r in rows {
        if !shapes.contains(&r.shape.as_str()) {
            shapes.push(&r.shape);
        }
    }
    let cell = |v: f64| {
        if v < 0.05 {
            "≈0".to_string()
        } else {
            format!("{v:.2}")
        }
    };
    for shape in shapes {
        let of: Vec<&StepRow> = rows.iter().filter(|r| r.shape == shape).collect();
        let counts = row_counts(of.iter().map(|r| &r.rows));
        let mut kernels: Vec<(u32, &str)> =
            of.iter().map(|r| (r.step, r.kernel.as_str())).collect();
        kernels.sort();
        kernels.dedup();
        let _ = writeln!(
            out,
            "**{}**: µs per kernel, cold / warm\n",
            describe_shape(shape)
        );
        let _ = writeln!(
            out,
            "| kernel | {} |",
            counts
                .iter()
                .map(|n| format!("{n} row{}", if *n == 1 { "" } else { "s" }))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(out, "|---|{}", "---:|".repeat(counts.len()));
        for (step, kernel) in &kernels {
            let cells: Vec<String> = counts
                .iter()
                .map(|&n| {
                    of.iter()
                        .find(|r| r.rows == n && r.step == *step && r.kernel == *kernel)
                        .map(|r| format!("{} / {}", cell(r.cold_us), cell(r.warm_us)))
                        .unwrap_or_default()
                })
                .collect();
            let _ = writeln!(out, "| {step}. `{kernel}` | {} |", cells.join(" | "));
        }
        let whole: Vec<String> = counts
            .iter()
            .map(|&n| {
                of.iter()
                    .filter(|r| r.rows == n)
                    .max_by_key(|r| r.step)
                    .map(|r| format!("{} / {}", cell(r.prefix_cold_us), cell(r.prefix_warm_us)))
                    .unwrap_or_default()
            })
            .collect();
        let _ = writeln!(out, "| the whole chain | {} |\n", whole.join(" | "));
    }
    out
}
