//! The one typed row of every benchmark CSV (`bench/results/<gpu>/<chapter>.csv`): what was
//! measured (shape, implementation, rows), how (launches, cold and warm medians and spread,
//! samples), against what (the floor, and the bytes and FLOPs it was computed from), and the
//! rates that follow (GB/s and TFLOP/s at the cold median: llm.c's habit of printing the rate
//! beside every time). `tools/bench` writes it, `tools/plot` reads it, and the PyTorch peers
//! take their field names from the same column list, `tools/bench/columns.txt`.

use std::fmt::Write as _;

/// The columns, in order, as `tools/bench/columns.txt` lists them.
pub const COLUMNS_FILE: &str = include_str!("../bench/columns.txt");

/// [`COLUMNS_FILE`] split into names.
pub fn columns() -> Vec<&'static str> {
    COLUMNS_FILE.trim().split(',').map(str::trim).collect()
}

/// One measurement: one implementation at one shape and row count.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    pub chapter: String,
    pub shape: String,
    pub imp: String,
    pub rows: u64,
    pub launches: u32,
    pub cold_median_us: f64,
    pub cold_p10_us: f64,
    pub cold_p90_us: f64,
    pub warm_median_us: f64,
    pub warm_p10_us: f64,
    pub warm_p90_us: f64,
    /// One launch plus the larger of `bytes` at the copy bandwidth and `flops` at the bf16
    /// matrix rate.
    pub floor_us: f64,
    /// The fewest bytes the work must move (each input read once, each output written once).
    pub bytes: f64,
    /// The FLOPs it must do.
    pub flops: f64,
    /// `bytes` over the cold median, GB/s.
    pub cold_gbs: f64,
    /// `flops` over the cold median, TFLOP/s.
    pub cold_tflops: f64,
    pub samples: u64,
    pub device: String,
}

fn num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

impl BenchRow {
    /// A row whose every time is `us` (cold and warm, median and percentiles), with one launch,
    /// one sample, a floor of 1 µs and no bytes, FLOPs or rates: the start of a row a test makes
    /// by hand (`BenchRow { floor_us: …, ..BenchRow::flat(…) }`).
    pub fn flat(chapter: &str, shape: &str, imp: &str, rows: u64, us: f64) -> BenchRow {
        BenchRow {
            chapter: chapter.into(),
            shape: shape.into(),
            imp: imp.into(),
            rows,
            launches: 1,
            cold_median_us: us,
            cold_p10_us: us,
            cold_p90_us: us,
            warm_median_us: us,
            warm_p10_us: us,
            warm_p90_us: us,
            floor_us: 1.0,
            bytes: 0.0,
            flops: 0.0,
            cold_gbs: 0.0,
            cold_tflops: 0.0,
            samples: 1,
            device: "H200".into(),
        }
    }

    /// The rates from the cold median.
    pub fn with_rates(mut self) -> BenchRow {
        self.cold_gbs = self.bytes / (self.cold_median_us * 1e3);
        self.cold_tflops = self.flops / (self.cold_median_us * 1e6);
        self
    }

    /// The row as a CSV line, in [`columns`] order.
    pub fn to_csv(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{:.3},{:.4},{},{}",
            self.chapter,
            self.shape,
            self.imp,
            self.rows,
            self.launches,
            self.cold_median_us,
            self.cold_p10_us,
            self.cold_p90_us,
            self.warm_median_us,
            self.warm_p10_us,
            self.warm_p90_us,
            self.floor_us,
            num(self.bytes),
            num(self.flops),
            self.cold_gbs,
            self.cold_tflops,
            self.samples,
            self.device
        );
        s
    }
}

/// The CSV header line.
pub fn header() -> String {
    COLUMNS_FILE.trim().to_string()
}

/// Parses a whole CSV of [`BenchRow`]s; every error names the file, the line and the column.
pub fn parse_csv(text: &str, name: &str) -> Result<Vec<BenchRow>, String> {
    let cols = columns();
    let table = crate::csv::Table::parse(text, name)?;
    let (hline, head) = table.header();
    let mut index = Vec::with_capacity(cols.len());
    for col in &cols {
        index.push(head.iter().position(|h| h == col).ok_or_else(|| {
            format!(
                "{name}:{hline}: header has no column `{col}` (expected: {})",
                cols.join(",")
            )
        })?);
    }
    let mut out = Vec::new();
    for row in table.rows() {
        let ln = row.line;
        let fields = &row.fields;
        let at = |k: usize| format!("{name}:{ln}, column {} (`{}`)", index[k] + 1, cols[k]);
        let field = |k: usize| fields[index[k]].as_str();
        let text_field = |k: usize| -> Result<String, String> {
            let v = field(k);
            if v.is_empty() {
                return Err(format!("{}: empty", at(k)));
            }
            Ok(v.to_string())
        };
        let int = |k: usize| -> Result<u64, String> {
            field(k)
                .parse::<u64>()
                .map_err(|_| format!("{}: `{}` is not a whole number", at(k), field(k)))
        };
        // Rows, launches and samples count things that happened: zero means a broken run.
        let count = |k: usize| -> Result<u64, String> {
            let v = int(k)?;
            if v == 0 {
                return Err(format!("{}: must be at least 1", at(k)));
            }
            Ok(v)
        };
        let real = |k: usize| -> Result<f64, String> {
            let v: f64 = field(k)
                .parse()
                .map_err(|_| format!("{}: `{}` is not a number", at(k), field(k)))?;
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{}: {v} is not a finite number >= 0", at(k)));
            }
            Ok(v)
        };
        let us = |k: usize| -> Result<f64, String> {
            let v = real(k)?;
            if v <= 0.0 {
                return Err(format!("{}: {v} is not a positive time in µs", at(k)));
            }
            Ok(v)
        };
        let row = BenchRow {
            chapter: text_field(0)?,
            shape: text_field(1)?,
            imp: text_field(2)?,
            rows: int(3)?,
            launches: u32::try_from(count(4)?).map_err(|_| format!("{}: too large", at(4)))?,
            cold_median_us: us(5)?,
            cold_p10_us: us(6)?,
            cold_p90_us: us(7)?,
            warm_median_us: us(8)?,
            warm_p10_us: us(9)?,
            warm_p90_us: us(10)?,
            floor_us: us(11)?,
            bytes: real(12)?,
            flops: real(13)?,
            cold_gbs: real(14)?,
            cold_tflops: real(15)?,
            samples: count(16)?,
            device: text_field(17)?,
        };
        if row.rows == 0 && row.shape != "none" {
            return Err(format!(
                "{}: must be at least 1 (only shape `none`, the empty kernel, measures no rows)",
                at(3)
            ));
        }
        for (lo, mid, hi, what) in [
            (row.cold_p10_us, row.cold_median_us, row.cold_p90_us, "cold"),
            (row.warm_p10_us, row.warm_median_us, row.warm_p90_us, "warm"),
        ] {
            if !(lo <= mid && mid <= hi) {
                return Err(format!(
                    "{name}:{ln}: {what} p10 ≤ median ≤ p90 does not hold ({lo} / {mid} / {hi})"
                ));
            }
        }
        out.push(row);
    }
    if out.is_empty() {
        return Err(format!("{name}: no measurements after the header"));
    }
    Ok(out)
}

/// One kernel's share of a piece of work: the work stopped after its `step`-th launch, timed
/// alone (`prefix_*`), and the difference to the previous prefix (`cold_us`, `warm_us`).
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    pub chapter: String,
    pub shape: String,
    pub rows: u64,
    pub step: u32,
    pub kernel: String,
    pub prefix_cold_us: f64,
    pub prefix_warm_us: f64,
    pub cold_us: f64,
    pub warm_us: f64,
}

/// The steps CSV's header.
pub const STEP_COLUMNS: &str =
    "chapter,shape,rows,step,kernel,prefix_cold_us,prefix_warm_us,cold_us,warm_us";

impl StepRow {
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}",
            self.chapter,
            self.shape,
            self.rows,
            self.step,
            self.kernel,
            self.prefix_cold_us,
            self.prefix_warm_us,
            self.cold_us,
            self.warm_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> BenchRow {
        BenchRow {
            chapter: "ch01".into(),
            shape: "glm_h4096_e288_k8".into(),
            imp: "chain".into(),
            rows: 1,
            launches: 7,
            cold_median_us: 27.904,
            cold_p10_us: 27.552,
            cold_p90_us: 28.288,
            warm_median_us: 20.64,
            warm_p10_us: 20.637,
            warm_p90_us: 20.672,
            floor_us: 5.102,
            bytes: 4_737_152.0,
            flops: 2_359_296.0,
            cold_gbs: 0.0,
            cold_tflops: 0.0,
            samples: 200,
            device: "NVIDIA_H200".into(),
        }
        .with_rates()
    }

    #[test]
    fn a_row_round_trips_through_csv() {
        let r = row();
        let text = format!("{}\n{}\n", header(), r.to_csv());
        let back = parse_csv(&text, "x.csv").unwrap();
        assert_eq!(back.len(), 1);
        let b = &back[0];
        assert_eq!(
            (b.launches, b.rows, b.bytes, b.flops),
            (7, 1, 4_737_152.0, 2_359_296.0)
        );
        // 4.737 MB in 27.904 µs = 169.7656 GB/s, written with three decimals.
        assert!((b.cold_gbs - 169.766).abs() < 5e-4, "{}", b.cold_gbs);
        assert_eq!(columns().len(), 18);
    }

    #[test]
    fn the_python_peers_read_the_same_column_file() {
        // tools/peers/*.py open this file by path; it must stay where they look for it.
        let peer = include_str!("../peers/router5.py");
        assert!(
            peer.contains("columns.txt"),
            "the peer must read tools/bench/columns.txt"
        );
    }
}
