//! Chapter 6's generated files: the page's example output and tree of files
//! ([`super::example_and_tree`]), the launch table read off the example's snapshot
//! ([`launch_table`]), and the facts of the switch point between the tiny GEMM and
//! cuBLAS, read off chapter 5's measurements (`bench/results/h200/ch05.csv`, `pair` against
//! `blas_fused`): for each measured shape, the crossover (the largest measured row count at which
//! the pair's cold median is at most cuBLAS + the fused router's; the rule of
//! `chapters/ch06-layer/src/switch.rs`, whose test holds its constants to this same CSV), the two
//! times there, and the two times at the next measured count. The measured section's tables and
//! facts (the layer beside the engines' designs, what the router's target leaves its top-k, each
//! part beside its floor) are `ch06/measured.rs`'s.

mod measured;
mod ncu;

use super::facts::Facts;
use super::{find, read, short, token_counts, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use std::path::Path;

const CH05: &str = "bench/results/h200/ch05.csv";
const FACTS: &str = "book/src/figures/ch06-facts.md";

/// The crossover of `shape`: the largest measured row count where `pair` ≤ `blas_fused` (cold
/// medians), 0 when there is none; and the next measured count past it, if any.
pub fn crossover(rows: &[BenchRow], shape: &str) -> (u64, Option<u64>) {
    let counts: Vec<u64> = token_counts(rows, shape)
        .into_iter()
        .filter(|&n| {
            find(rows, shape, n, "pair").is_some() && find(rows, shape, n, "blas_fused").is_some()
        })
        .collect();
    let wins = |n: u64| {
        let (p, b) = (
            find(rows, shape, n, "pair").expect("filtered"),
            find(rows, shape, n, "blas_fused").expect("filtered"),
        );
        p.cold_median_us <= b.cold_median_us
    };
    let last = counts
        .iter()
        .copied()
        .filter(|&n| wins(n))
        .max()
        .unwrap_or(0);
    (last, counts.into_iter().find(|&n| n > last))
}

/// The shapes of `pair` rows, in the CSV's order.
fn shapes(rows: &[BenchRow]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.imp == "pair") {
        if !v.contains(&r.shape) {
            v.push(r.shape.clone());
        }
    }
    v
}

/// The facts file: per shape (`qwen3`, `glm`) `{s}_switch_rows`, `{s}_switch_pair_cold`,
/// `{s}_switch_blas_cold`, and where a count was measured past the switch `{s}_next_rows`,
/// `{s}_next_pair_cold`, `{s}_next_blas_cold`; then the measured section's facts and files
/// ([`measured`]).
fn facts(root: &Path) -> Result<Vec<Generated>, String> {
    let rows = parse_csv(&read(root, CH05)?, CH05)?;
    let mut f = Facts::default();
    for shape in shapes(&rows) {
        let s = short(&shape);
        let (switch, next) = crossover(&rows, &shape);
        f.add(format!("{s}_switch_rows"), switch.to_string(), CH05);
        let cold = |n: u64, imp: &str| {
            find(&rows, &shape, n, imp)
                .map(|r| format!("{:.1}", r.cold_median_us))
                .ok_or_else(|| format!("{CH05}: no {imp} row at {n} rows of {shape}"))
        };
        if switch > 0 {
            f.add(format!("{s}_switch_pair_cold"), cold(switch, "pair")?, CH05);
            f.add(
                format!("{s}_switch_blas_cold"),
                cold(switch, "blas_fused")?,
                CH05,
            );
        }
        if let Some(n) = next {
            f.add(format!("{s}_next_rows"), n.to_string(), CH05);
            f.add(format!("{s}_next_pair_cold"), cold(n, "pair")?, CH05);
            f.add(format!("{s}_next_blas_cold"), cold(n, "blas_fused")?, CH05);
        }
    }
    let mut out = measured::generate(root, &rows, &mut f)?.unwrap_or_default();
    out.extend(ncu::generate(root, &mut f)?);
    out.insert(
        0,
        Generated {
            path: FACTS.into(),
            content: f.render("Chapter 6's numbers"),
        },
    );
    Ok(out)
}

const SNAPSHOT: &str = "tests/snapshots/ch06_example__ch06_example.snap";
const LAUNCHES: &str = "book/src/figures/ch06-launches.md";

/// The launch table, from the example's snapshot (what the layer launched, recorded as it was
/// queued, and checked by `tests/ch06_example.rs`): one row per layer and batch size, with the
/// logits GEMM, chapter 4's plan, the launch count and the kernels.
pub fn launch_table(snapshot: &str) -> Result<String, String> {
    let mut out = String::from(
        "| router | tokens | logits | chapter 4's plan | launches | kernels, in order |\n|---|---|---|---|---|---|\n",
    );
    let (mut layer, mut rows) = (String::new(), 0);
    let mut lines = snapshot.lines();
    while let Some(line) = lines.next() {
        if let Some(name) = line.strip_prefix("== ") {
            // `Qwen3-30B-A3B's router (softmax, …) at …` → `Qwen3-30B-A3B`
            let name = name.split(" (").next().unwrap_or(name);
            layer = name.trim_end_matches("'s router").to_string();
            continue;
        }
        let Some(batch) = line.strip_prefix("T = ") else {
            continue;
        };
        let bad = || format!("{SNAPSHOT}: cannot read `{line}`");
        let (t, rest) = batch.split_once(": ").ok_or_else(bad)?;
        let (logits, plan) = rest.split_once(" logits; ").ok_or_else(bad)?;
        // `decode path, fusion swiglu_sumk, geometry w4_c1` → `decode · swiglu_sumk · w4_c1`
        let plan = plan
            .replace(" path, fusion ", " · ")
            .replace(", geometry ", " · ")
            .replace(", tiles ", " · ")
            .replace(", BLOCK_M ", " · BLOCK_M ");
        let next = lines.next().unwrap_or("");
        let (n, kernels) = next
            .trim_start()
            .split_once(" launches: ")
            .ok_or_else(|| format!("{SNAPSHOT}: no launch line after `{line}`"))?;
        let kernels: Vec<String> = kernels.split(" · ").map(|k| format!("`{k}`")).collect();
        out += &format!(
            "| {layer} | {t} | {logits} | {plan} | {n} | {} |\n",
            kernels.join(", ")
        );
        rows += 1;
    }
    if rows == 0 {
        return Err(format!("{SNAPSHOT}: no batch lines (`T = …`)"));
    }
    Ok(out)
}

/// Every generated file of chapter 6's page.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let snap = crate::snap::strip_header(&read(root, SNAPSHOT)?)
        .map_err(|e| format!("{SNAPSHOT}: {e}"))?;
    let mut v = facts(root)?;
    v.push(Generated {
        path: LAUNCHES.into(),
        content: launch_table(&snap)?,
    });
    v.extend(super::example_and_tree(root, 6)?);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(shape: &str, imp: &str, rows: u64, cold: f64) -> BenchRow {
        let line = format!(
            "chapter,shape,impl,rows,launches,cold_median_us,cold_p10_us,cold_p90_us,warm_median_us,warm_p10_us,warm_p90_us,floor_us,bytes,flops,cold_gbs,cold_tflops,samples,device\n\
             ch05,{shape},{imp},{rows},2,{cold},{cold},{cold},{cold},{cold},{cold},1,1,1,1,1,1,X\n"
        );
        parse_csv(&line, "t").unwrap().remove(0)
    }

    #[test]
    fn the_launch_table_reads_the_example() {
        let snap = "intro\n\n== Qwen3's router (softmax), at H 8\nT = 1: tiny GEMM logits; decode path, fusion f, geometry w4_c1\n  2 launches: a · b\n  against ...\n";
        let t = launch_table(snap).unwrap();
        assert!(
            t.ends_with("| Qwen3 | 1 | tiny GEMM | decode · f · w4_c1 | 2 | `a`, `b` |\n"),
            "{t}"
        );
        assert!(launch_table("nothing").is_err());
        assert!(launch_table("T = 1: x logits; y\n").is_err());
    }

    #[test]
    fn the_crossover_is_the_last_win() {
        let rows = vec![
            row("a", "pair", 1, 5.0),
            row("a", "blas_fused", 1, 6.0),
            row("a", "pair", 16, 7.0),
            row("a", "blas_fused", 16, 6.5),
            row("a", "pair", 64, 6.0),
            row("a", "blas_fused", 64, 6.0),
            row("a", "pair", 96, 9.0),
            row("a", "blas_fused", 96, 7.0),
            row("b", "pair", 1, 9.0),
            row("b", "blas_fused", 1, 8.0),
        ];
        assert_eq!(crossover(&rows, "a"), (64, Some(96)));
        assert_eq!(crossover(&rows, "b"), (0, Some(1)));
    }
}
