//! Where the router's logits come from: chapter 5's tiny GEMM for few rows, cuBLAS for many.
//!
//! The tiny GEMM reads the gate weight once and gives each block two experts' rows: at a few
//! rows it is ahead of cuBLAS, whose kernels are built for tiles of many rows; at thousands of
//! rows it is far behind. `tools/bench ch05` times both pairs on the H200 at the rows of
//! `bench/results/h200/ch05.csv`: `pair` is the tiny GEMM and the fused router, `blas_fused` is
//! cuBLAS and the same fused router. [`SWITCH_POINTS`] is read off that file: for each measured
//! shape, the largest measured row count at which the tiny GEMM's pair is no slower, cuBLAS's
//! ahead at every count past it (cold medians). `tests/switch.rs` reads the committed CSV and
//! fails when a constant here disagrees with it.

use ch05_fused_router::LogitsFrom;

// ANCHOR: switch_points
/// The switch point of one measured shape of the gate GEMM (`hidden` H, `experts` E): the
/// router takes its logits from the tiny GEMM up to `rows` rows, from cuBLAS above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchPoint {
    /// The shape's name in `bench/results/h200/ch05.csv`.
    pub shape: &'static str,
    pub hidden: usize,
    pub experts: usize,
    /// The last row count of the tiny GEMM.
    pub rows: usize,
}

/// The measured shapes' switch points (`bench/results/h200/ch05.csv`, `pair` against
/// `blas_fused`, cold medians; [`crossovers`] reads them): Qwen3-30B-A3B's gate (H 2048, E 128)
/// keeps the tiny GEMM ahead at every measured count up to 128 and falls behind at 256; the
/// GLM-like gate (H 4096, E 288, over four times the bytes) is last ahead at 64 and behind at 96.
/// Past the last measured win the next measured count is a loss, so the switch sits at the last
/// win.
pub const SWITCH_POINTS: [SwitchPoint; 2] = [
    SwitchPoint {
        shape: "qwen3_h2048_e128_k8",
        hidden: 2048,
        experts: 128,
        rows: 128,
    },
    SwitchPoint {
        shape: "glm_h4096_e288_k8",
        hidden: 4096,
        experts: 288,
        rows: 64,
    },
];

/// The switch point of a shape nobody measured: the smallest measured one.
pub const DEFAULT_SWITCH_ROWS: usize = 64;

/// The last row count of the tiny GEMM for a gate of `hidden` × `experts`: the measured shape's
/// switch point, else [`DEFAULT_SWITCH_ROWS`].
pub fn switch_rows(hidden: usize, experts: usize) -> usize {
    SWITCH_POINTS
        .iter()
        .find(|p| p.hidden == hidden && p.experts == experts)
        .map_or(DEFAULT_SWITCH_ROWS, |p| p.rows)
}

/// The logits GEMM for `rows` rows of a gate of `hidden` × `experts`: the tiny GEMM up to the
/// switch point, cuBLAS above; cuBLAS at every row count when H is no multiple of 8 (the tiny
/// GEMM reads whole 16-byte slices of a row).
pub fn logits_for(rows: usize, hidden: usize, experts: usize) -> LogitsFrom {
    #[allow(clippy::manual_is_multiple_of)] // the workspace's MSRV is 1.85
    let sliced = hidden % 8 == 0;
    if sliced && rows <= switch_rows(hidden, experts) {
        LogitsFrom::TinyGemm
    } else {
        LogitsFrom::Blas
    }
}
// ANCHOR_END: switch_points

/// The crossover in a bench CSV of chapter 5: for each shape, the largest measured row count at
/// which `pair`'s cold median is at most `blas_fused`'s, so that cuBLAS wins at every measured
/// count past it (0 when the tiny GEMM never wins). A loss below it (the GLM-like gate at 12 and
/// 16 rows, by less than the samples' spread) does not move it: one switch, not a patchwork.
/// Rows of other implementations are ignored; a row count measured for one of the two only is
/// skipped. Returns (shape, rows) in the order the shapes first appear.
pub fn crossovers(csv: &str) -> Result<Vec<(String, usize)>, String> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().ok_or("an empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or(format!("no column `{name}`"))
    };
    let (shape_c, impl_c, rows_c, cold_c) = (
        col("shape")?,
        col("impl")?,
        col("rows")?,
        col("cold_median_us")?,
    );
    // (shape, rows) -> (pair, blas_fused)
    let mut shapes: Vec<String> = Vec::new();
    let mut times: std::collections::BTreeMap<(String, usize), (Option<f64>, Option<f64>)> =
        Default::default();
    for (n, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let get = |c: usize| {
            f.get(c)
                .copied()
                .ok_or(format!("line {}: too few fields", n + 2))
        };
        let imp = get(impl_c)?;
        if imp != "pair" && imp != "blas_fused" {
            continue;
        }
        let shape = get(shape_c)?.to_string();
        let rows: usize = get(rows_c)?
            .parse()
            .map_err(|e| format!("line {}: rows: {e}", n + 2))?;
        let us: f64 = get(cold_c)?
            .parse()
            .map_err(|e| format!("line {}: cold_median_us: {e}", n + 2))?;
        if !shapes.contains(&shape) {
            shapes.push(shape.clone());
        }
        let e = times.entry((shape, rows)).or_default();
        match imp {
            "pair" => e.0 = Some(us),
            _ => e.1 = Some(us),
        }
    }
    Ok(shapes
        .into_iter()
        .map(|s| {
            let last = times
                .range((s.clone(), 0)..=(s.clone(), usize::MAX))
                .filter_map(|((_, rows), t)| match *t {
                    (Some(pair), Some(blas)) if pair <= blas => Some(*rows),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            (s, last)
        })
        .collect())
}
