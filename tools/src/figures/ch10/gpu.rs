//! Chapter 10's GPU files, from `bench ch10` on the H200 (`tools/bench/src/ch10.rs`):
//! `bench/results/h200/ch10_batch.csv` (64 probe tokens through chapter 6's layer and through
//! the deterministic mode at batch sizes 1 to 8,192: how many change their expert set, how many
//! any output bit, against the same token alone) and `bench/results/h200/ch10.csv` (both layers
//! timed at chapter 4's token counts in one session). Made from them: the batch table, the cost
//! table and their facts (`ch10-gpu-facts.md`). Until both CSVs are committed nothing is made
//! and stderr says so.

use super::super::facts::Facts;
use super::super::tables::fmt_us;
use super::super::{read, short, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use std::fmt::Write as _;
use std::path::Path;

const BATCH: &str = "bench/results/h200/ch10_batch.csv";
const COST: &str = "bench/results/h200/ch10.csv";
const BATCH_TABLE: &str = "book/src/figures/ch10-batch-table.md";
const COST_TABLE: &str = "book/src/figures/ch10-cost-table.md";
const FACTS: &str = "book/src/figures/ch10-gpu-facts.md";

/// The two layers, as the CSVs name them, and as the tables do.
const LAYERS: [(&str, &str); 2] = [
    ("layer", "chapter 6's layer"),
    ("layer_deterministic", "the deterministic mode"),
];

/// One line of `ch10_batch.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRow {
    pub shape: String,
    pub layer: String,
    pub batch: u64,
    pub probes: u64,
    pub sets: u64,
    pub bits: u64,
}

/// `ch10_batch.csv`'s lines, checked: counts never above the probes.
pub fn parse_batch(text: &str, name: &str) -> Result<Vec<BatchRow>, String> {
    let t = Table::parse(text, name)?;
    let mut v = Vec::new();
    for r in t.records() {
        let n = |c: &str| {
            r(c).parse::<u64>()
                .map_err(|_| format!("{name}: `{}` is not a count ({c})", r(c)))
        };
        let row = BatchRow {
            shape: r("shape"),
            layer: r("layer"),
            batch: n("batch")?,
            probes: n("probes")?,
            sets: n("set_changed")?,
            bits: n("bits_changed")?,
        };
        if row.sets > row.probes || row.bits > row.probes {
            return Err(format!(
                "{name}: {} {} batch {}: more changes than its {} probes",
                row.shape, row.layer, row.batch, row.probes
            ));
        }
        if !LAYERS.iter().any(|l| l.0 == row.layer) {
            return Err(format!("{name}: unknown layer `{}`", row.layer));
        }
        v.push(row);
    }
    if v.is_empty() {
        return Err(format!("{name}: no rows"));
    }
    Ok(v)
}

/// The shapes in the order the CSV first names them.
fn shapes<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for n in names {
        if !v.iter().any(|x| x == n) {
            v.push(n.to_string());
        }
    }
    v
}

/// The batch table: per shape and layer, the probes whose expert set changed and those whose
/// output bits changed, one column per batch size.
pub fn batch_table(rows: &[BatchRow]) -> String {
    let mut s = String::new();
    for shape in shapes(rows.iter().map(|r| r.shape.as_str())) {
        let of: Vec<&BatchRow> = rows.iter().filter(|r| r.shape == shape).collect();
        let mut batches: Vec<u64> = of.iter().map(|r| r.batch).collect();
        batches.sort_unstable();
        batches.dedup();
        let probes = of[0].probes;
        let _ = writeln!(
            s,
            "**{shape}**, {probes} probe tokens against each alone: expert sets changed / output bits changed\n"
        );
        let _ = write!(s, "| batch size |");
        for b in &batches {
            let _ = write!(s, " {b} |");
        }
        let _ = write!(s, "\n|---|");
        for _ in &batches {
            let _ = write!(s, "---:|");
        }
        s.push('\n');
        for (layer, label) in LAYERS {
            let _ = write!(s, "| {label} |");
            for b in &batches {
                match of.iter().find(|r| r.layer == layer && r.batch == *b) {
                    Some(r) => {
                        let _ = write!(s, " {} / {} |", r.sets, r.bits);
                    }
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

/// The cold median of `imp` at `t` tokens of `shape`.
fn cold(rows: &[BenchRow], shape: &str, t: u64, imp: &str) -> Option<f64> {
    super::super::find(rows, shape, t, imp).map(|r| r.cold_median_us)
}

/// The cost table and its facts: both layers' cold medians at every token count, the ratio.
fn cost(rows: &[BenchRow], f: &mut Facts) -> String {
    let mut s = String::from(
        "| shape | tokens | chapter 6's layer, µs | deterministic mode, µs | deterministic ÷ layer |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for shape in shapes(
        rows.iter()
            .filter(|r| r.imp == "layer")
            .map(|r| r.shape.as_str()),
    ) {
        let mut ts: Vec<u64> = rows
            .iter()
            .filter(|r| r.shape == shape && r.imp == "layer")
            .map(|r| r.rows)
            .collect();
        ts.sort_unstable();
        let sh = short(&shape);
        let (mut worst, mut worst_at, mut best) = (0.0f64, 0u64, f64::INFINITY);
        for t in ts {
            let (Some(a), Some(b)) = (
                cold(rows, &shape, t, "layer"),
                cold(rows, &shape, t, "layer_deterministic"),
            ) else {
                continue;
            };
            let r = b / a;
            if r > worst {
                (worst, worst_at) = (r, t);
            }
            best = best.min(r);
            let _ = writeln!(
                s,
                "| {shape} | {t} | {} | {} | {r:.2} |",
                fmt_us(a),
                fmt_us(b)
            );
            f.add(format!("{sh}_t{t}_layer_cold"), fmt_us(a), COST);
            f.add(format!("{sh}_t{t}_det_cold"), fmt_us(b), COST);
            f.add(format!("{sh}_t{t}_det_ratio"), format!("{r:.2}"), COST);
        }
        if worst_at > 0 {
            f.add(format!("{sh}_det_ratio_max"), format!("{worst:.2}"), COST);
            f.add(format!("{sh}_det_ratio_max_at"), worst_at.to_string(), COST);
            f.add(format!("{sh}_det_ratio_min"), format!("{best:.2}"), COST);
        }
    }
    s
}

/// The files, or none (with a note on stderr) until both CSVs are committed.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    if !root.join(BATCH).exists() || !root.join(COST).exists() {
        eprintln!("plot: no {BATCH} and {COST} yet: chapter 10's GPU tables are not made");
        return Ok(Vec::new());
    }
    let batch = parse_batch(&read(root, BATCH)?, BATCH)?;
    let timed = parse_csv(&read(root, COST)?, COST)?;
    let mut f = Facts::default();
    f.add("probes", batch[0].probes.to_string(), BATCH);
    for shape in shapes(batch.iter().map(|r| r.shape.as_str())) {
        let sh = short(&shape);
        for (layer, name) in [("layer", "layer"), ("layer_deterministic", "det")] {
            let of = || {
                batch
                    .iter()
                    .filter(|r| r.shape == shape && r.layer == layer)
            };
            let most_sets = of().map(|r| r.sets).max().unwrap_or(0);
            let most_bits = of().map(|r| r.bits).max().unwrap_or(0);
            f.add(
                format!("{sh}_{name}_sets_max"),
                most_sets.to_string(),
                BATCH,
            );
            f.add(
                format!("{sh}_{name}_bits_max"),
                most_bits.to_string(),
                BATCH,
            );
            if let Some(first) = of().filter(|r| r.bits > 0).map(|r| r.batch).min() {
                f.add(format!("{sh}_{name}_bits_from"), first.to_string(), BATCH);
            }
        }
    }
    let cost_table = cost(&timed, &mut f);
    Ok(vec![
        Generated {
            path: BATCH_TABLE.into(),
            content: batch_table(&batch),
        },
        Generated {
            path: COST_TABLE.into(),
            content: cost_table,
        },
        Generated {
            path: FACTS.into(),
            content: f.render("Chapter 10's GPU numbers"),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH_CSV: &str = "shape,layer,batch,probes,set_changed,bits_changed\n\
        glm_h4096_i1024_e288_k8,layer,1,64,0,0\n\
        glm_h4096_i1024_e288_k8,layer,64,64,1,60\n\
        glm_h4096_i1024_e288_k8,layer_deterministic,1,64,0,0\n\
        glm_h4096_i1024_e288_k8,layer_deterministic,64,64,0,0\n";

    #[test]
    fn batch_table_and_facts_read_the_csv() {
        let rows = parse_batch(BATCH_CSV, "b.csv").unwrap();
        let t = batch_table(&rows);
        assert!(t.contains("| chapter 6's layer | 0 / 0 | 1 / 60 |"), "{t}");
        assert!(
            t.contains("| the deterministic mode | 0 / 0 | 0 / 0 |"),
            "{t}"
        );
        let timed = vec![
            BenchRow::flat("ch10", "glm_x", "layer", 8, 100.0),
            BenchRow::flat("ch10", "glm_x", "layer_deterministic", 8, 150.0),
        ];
        let mut f = Facts::default();
        let c = cost(&timed, &mut f);
        assert!(c.contains("| glm_x | 8 | 100 | 150 | 1.50 |"), "{c}");
        assert_eq!(f.get("glm_det_ratio_max"), Some("1.50"));
        assert_eq!(f.get("glm_det_ratio_max_at"), Some("8"));
    }

    #[test]
    fn bad_batch_csvs_are_errors() {
        let e = parse_batch(
            "shape,layer,batch,probes,set_changed,bits_changed\ns,layer,1,8,9,0\n",
            "b.csv",
        )
        .unwrap_err();
        assert!(e.contains("more changes than its 8 probes"), "{e}");
        let e = parse_batch(
            "shape,layer,batch,probes,set_changed,bits_changed\ns,other,1,8,0,0\n",
            "b.csv",
        )
        .unwrap_err();
        assert!(e.contains("unknown layer `other`"), "{e}");
    }
}
