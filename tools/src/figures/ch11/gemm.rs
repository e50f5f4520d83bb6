//! The stacked GEMM's switch, from `bench ch11` on the GPU machine (`tools/bench/src/ch11.rs`,
//! `gemm_cases`): `bench/results/h100/ch11_gemm.csv` times the merged form's one GEMM over the
//! stacked weight `[E + P, H]` alone, as chapter 5's tiny GEMM (`tiny_gemm`, in chapter 5's form
//! for the rows) and as the library GEMM with fp32 output (`blas_f32`), from 1 to 32 rows.
//!
//! Made from it: `ch11-gemm.md`, the table (rows, both times, their ratio, the one the merged form
//! runs and whether it is the faster), and facts: the largest row count where the tiny GEMM is
//! faster, the smallest where the library GEMM is, and whether the merged form's switch
//! (`STACKED_TINY_MAX_ROWS`, read from `chapters/ch11-merged-gate/src/merged.rs`) picks the faster
//! at every row count. Until the CSV is committed the file says so in one marked line and no fact
//! is added.

use crate::bench_row::{parse_csv, BenchRow};
use crate::figures::facts::Facts;
use crate::figures::tables::fmt_us;
use crate::figures::{not_measured_yet, read, Generated};
use std::fmt::Write as _;
use std::path::Path;

const CSV: &str = "bench/results/h100/ch11_gemm.csv";
const OUT: &str = "book/src/figures/ch11-gemm.md";
const SOURCE: &str = "chapters/ch11-merged-gate/src/merged.rs";
const CONSTANT: &str = "STACKED_TINY_MAX_ROWS";
const TINY: &str = "tiny_gemm";
const BLAS: &str = "blas_f32";

/// `pub const STACKED_TINY_MAX_ROWS: usize = N;` in the chapter's source.
pub fn switch_in(source: &str) -> Result<u64, String> {
    let prefix = format!("pub const {CONSTANT}: usize = ");
    source
        .lines()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.trim_end_matches(';').trim().parse().ok())
        .ok_or_else(|| format!("{SOURCE}: no `{prefix}N;` line"))
}

/// (rows, tiny GEMM, library GEMM) cold medians, for every row count timed both ways.
pub fn pairs(rows: &[BenchRow]) -> Result<Vec<(u64, f64, f64)>, String> {
    let mut counts: Vec<u64> = rows.iter().map(|r| r.rows).collect();
    counts.sort_unstable();
    counts.dedup();
    let cold = |n: u64, imp: &str| {
        rows.iter()
            .find(|r| r.rows == n && r.imp == imp)
            .map(|r| r.cold_median_us)
    };
    let v: Vec<(u64, f64, f64)> = counts
        .into_iter()
        .filter_map(|n| Some((n, cold(n, TINY)?, cold(n, BLAS)?)))
        .collect();
    if v.is_empty() {
        return Err(format!(
            "{CSV}: no row count timed both ways ({TINY}, {BLAS})"
        ));
    }
    Ok(v)
}

/// The table and the facts, for the merged form's switch `switch`.
pub fn table_and_facts(pairs: &[(u64, f64, f64)], switch: u64, f: &mut Facts) -> String {
    let mut s = String::from(
        "| rows | tiny GEMM, µs | library GEMM (fp32 out), µs | tiny ÷ library | the merged form runs |\n\
         |---:|---:|---:|---:|---|\n",
    );
    let mut wrong = Vec::new();
    for &(n, tiny, blas) in pairs {
        let picks_tiny = n <= switch;
        let right = picks_tiny == (tiny < blas);
        if !right {
            wrong.push(n.to_string());
        }
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {:.2} | {}{} |",
            fmt_us(tiny),
            fmt_us(blas),
            tiny / blas,
            if picks_tiny { "tiny" } else { "library" },
            if right { "" } else { " (**the slower**)" }
        );
    }
    let last_tiny = pairs.iter().filter(|p| p.1 < p.2).map(|p| p.0).max();
    let first_blas = pairs.iter().filter(|p| p.1 >= p.2).map(|p| p.0).min();
    f.add("gemm_switch", switch.to_string(), SOURCE);
    f.add(
        "gemm_tiny_faster_up_to",
        last_tiny.map_or("none".into(), |n| n.to_string()),
        CSV,
    );
    f.add(
        "gemm_blas_faster_from",
        first_blas.map_or("none".into(), |n| n.to_string()),
        CSV,
    );
    f.add(
        "gemm_switch_verdict",
        if wrong.is_empty() {
            "picks the faster GEMM at every row count timed".into()
        } else {
            format!("picks the slower GEMM at {} rows", wrong.join(", "))
        },
        CSV,
    );
    for &(n, tiny, blas) in pairs {
        f.add(format!("gemm_{n}_tiny"), fmt_us(tiny), CSV);
        f.add(format!("gemm_{n}_blas"), fmt_us(blas), CSV);
    }
    s
}

pub fn generate(root: &Path, f: &mut Facts) -> Result<Generated, String> {
    if !root.join(CSV).exists() {
        return Ok(not_measured_yet(
            OUT,
            CSV,
            "chapter 11's stacked-GEMM table",
            "`tools/bench ch11` on the GPU machine writes it, and `tools/plot` makes this table from it.",
        ));
    }
    let rows = parse_csv(&read(root, CSV)?, CSV)?;
    let switch = switch_in(&read(root, SOURCE)?)?;
    Ok(Generated {
        path: OUT.into(),
        content: table_and_facts(&pairs(&rows)?, switch, f),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: &str = "kimi_k3_stacked_h7168_n4480";

    fn rows(times: &[(u64, f64, f64)]) -> Vec<BenchRow> {
        times
            .iter()
            .flat_map(|&(n, t, b)| {
                [
                    BenchRow::flat("ch11", SHAPE, TINY, n, t),
                    BenchRow::flat("ch11", SHAPE, BLAS, n, b),
                ]
            })
            .collect()
    }

    #[test]
    fn the_switch_is_read_from_the_source() {
        let src = "/// doc\npub const STACKED_TINY_MAX_ROWS: usize = 7;\n";
        assert_eq!(switch_in(src), Ok(7));
        assert!(switch_in("pub const OTHER: usize = 7;").is_err());
    }

    #[test]
    fn the_table_says_where_the_switch_picks_the_slower() {
        let p = pairs(&rows(&[(1, 20.0, 24.0), (4, 22.0, 23.0), (8, 30.0, 24.0)])).unwrap();
        let mut f = Facts::default();
        let t = table_and_facts(&p, 7, &mut f);
        assert!(!t.contains("the slower"), "{t}");
        let facts = f.render("t");
        assert!(facts.contains("every row count timed"), "{facts}");
        assert!(facts.contains("gemm_tiny_faster_up_to"), "{facts}");
        let mut f = Facts::default();
        let t = table_and_facts(&p, 2, &mut f);
        assert!(t.contains("| 4 | "), "{t}");
        assert!(t.contains("library (**the slower**)"), "{t}");
        assert!(f.render("t").contains("slower GEMM at 4 rows"));
    }

    #[test]
    fn a_csv_without_both_gemms_is_an_error() {
        let only_tiny = vec![BenchRow::flat("ch11", SHAPE, TINY, 1, 20.0)];
        assert!(pairs(&only_tiny).is_err());
    }
}
