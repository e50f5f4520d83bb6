//! Chapter 4's generated files, from the GPU run of `bench ch04` (`tools/bench/src/ch04.rs`):
//! `bench/results/h200/ch04.csv` (the fused layer `fused`, its variants `fused_*`, chapter 2's
//! device loop `ch02_grouped`, the PyTorch peers `torch_grouped_mm` and `torch_loop`, the floor
//! probe and one empty launch), `ch04_layout.csv` (active experts and BLOCK_M of each case),
//! `ch04_steps.csv` (the fused layer kernel by kernel), `ch04_check.csv` (each output against
//! another) and `ch04_ceilings.csv` (the copy bandwidth and the bf16 rate of the floors).
//!
//! Made from them: the timing figure (µs per call against T, each implementation beside the
//! floor, both shapes), the fusion figure (each `fused_*` variant's time over the fused layer's:
//! what each fusion buys, and where the decode and tiled paths cross), the rates figure (TB/s on
//! the expert weights the routing touches, and TFLOP/s, against T), the table and the facts file.
//! Until `ch04.csv` is committed nothing is made and stderr says so; once a generated file is
//! committed, a missing CSV is an error.

use super::facts::{thousands, Facts};
use super::svg::{shapes, Figure, Marker, Series};
use super::tables::{fmt_us, parse_steps};
use super::Generated;
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

const GPU_CSV: &str = "bench/results/h200/ch04.csv";
const LAYOUT_CSV: &str = "bench/results/h200/ch04_layout.csv";
const STEPS_CSV: &str = "bench/results/h200/ch04_steps.csv";
const CHECK_CSV: &str = "bench/results/h200/ch04_check.csv";
const CEILINGS_CSV: &str = "bench/results/h200/ch04_ceilings.csv";
const SVG: &str = "book/src/figures/ch04-fused.svg";
const FUSION_SVG: &str = "book/src/figures/ch04-fusion.svg";
const RATES_SVG: &str = "book/src/figures/ch04-rates.svg";
const TABLE: &str = "book/src/figures/ch04-fused-table.md";
const FACTS: &str = "book/src/figures/ch04-facts.md";

/// The implementations, as the CSV names them.
const OURS: &str = "fused";
const GROUPED: &str = "ch02_grouped";
const TORCH_GMM: &str = "torch_grouped_mm";
const TORCH_LOOP: &str = "torch_loop";
const EMPTY: &str = "empty_kernel";
const PROBE: &str = "floor_probe";
/// The implementations compared with ours, in the order they are listed.
const OTHERS: [&str; 3] = [GROUPED, TORCH_GMM, TORCH_LOOP];

fn read(root: &Path, rel: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(rel)).map_err(|e| format!("cannot read {rel}: {e}"))
}

/// The group's files, generated from the repository at `root`.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    if !root.join(GPU_CSV).exists() {
        let committed: Vec<&str> = [SVG, FUSION_SVG, RATES_SVG, TABLE, FACTS]
            .into_iter()
            .filter(|p| root.join(p).exists())
            .collect();
        if !committed.is_empty() {
            return Err(format!(
                "{} exist but {GPU_CSV} does not: they cannot be regenerated",
                committed.join(", ")
            ));
        }
        eprintln!(
            "plot: ch04: no {GPU_CSV} yet (tools/gpu/run … bench makes it on the GPU machine; copy \
             ch04.csv, ch04_layout.csv, ch04_steps.csv, ch04_check.csv and ch04_ceilings.csv \
             back): the figures, the table and the facts are left out"
        );
        return Ok(Vec::new());
    }
    let rows = parse_csv(&read(root, GPU_CSV)?, GPU_CSV)?;
    let layout = parse_layout(&read(root, LAYOUT_CSV)?, LAYOUT_CSV)?;
    let ceilings = Table::parse(&read(root, CEILINGS_CSV)?, CEILINGS_CSV)?;
    let (copy_gbs, bf16_tflops) = (
        ceilings.num(&[], "copy_gbs")?,
        ceilings.num(&[], "bf16_tflops")?,
    );
    let mut out = vec![Generated {
        path: SVG.into(),
        content: render_svg(&rows),
    }];
    if rows.iter().any(|r| is_variant(&r.imp)) {
        out.push(Generated {
            path: FUSION_SVG.into(),
            content: fusion_svg(&rows),
        });
    } else {
        eprintln!("plot: ch04: no fused_* variant in {GPU_CSV}: the fusion figure is left out");
    }
    out.push(Generated {
        path: RATES_SVG.into(),
        content: rates_svg(&rows, copy_gbs, bf16_tflops),
    });
    out.push(Generated {
        path: TABLE.into(),
        content: table(&rows, &layout),
    });
    let mut f = Facts::default();
    f.add("copy_gbs", format!("{copy_gbs:.0}"), CEILINGS_CSV);
    f.add("bf16_tflops", format!("{bf16_tflops:.0}"), CEILINGS_CSV);
    gpu_facts(&rows, &layout, &mut f)?;
    if root.join(STEPS_CSV).exists() {
        let steps = parse_steps(&read(root, STEPS_CSV)?, STEPS_CSV)?;
        for st in &steps {
            let kernel = st
                .kernel
                .rsplit("::")
                .next()
                .unwrap_or(&st.kernel)
                .trim_start_matches("fused_");
            let name = format!("{}_t{}_step{}_{kernel}", short(&st.shape), st.rows, st.step);
            f.add(
                format!("{name}_cold"),
                fmt_us(st.cold_us.max(0.0)),
                STEPS_CSV,
            );
            f.add(
                format!("{name}_warm"),
                fmt_us(st.warm_us.max(0.0)),
                STEPS_CSV,
            );
        }
    }
    if root.join(CHECK_CSV).exists() {
        let t = Table::parse(&read(root, CHECK_CSV)?, CHECK_CSV)?;
        check_facts(&t, &mut f)?;
    }
    out.push(Generated {
        path: FACTS.into(),
        content: f.render("Chapter 4's numbers"),
    });
    Ok(out)
}

/// A shape spelled out (chapter 2's words): `glm_h4096_i1024_e288_k8` → `GLM-like: hidden
/// 4096, intermediate 1024, 288 experts, k = 8`.
fn describe(shape: &str) -> String {
    let d = super::ch02::describe(shape);
    match d.strip_prefix("glm") {
        Some(rest) => format!("GLM-like{rest}"),
        None => d,
    }
}

/// A panel's title: `glm_h4096_i1024_e288_k8` → `GLM-like: H 4096, I 1024, E 288, k 8`.
fn panel_title(shape: &str) -> String {
    let name = short_title(shape);
    match super::ch02::dims(shape) {
        Some((h, i, e, k)) => format!("{name}: H {h}, I {i}, E {e}, k {k}"),
        None => name,
    }
}

/// `qwen3_h2048_i768_e128_k8` → `qwen3`: the facts' prefix of a shape.
fn short(shape: &str) -> &str {
    shape.split('_').next().unwrap_or(shape)
}

/// A variant of the fused layer: `fused_<what>`.
fn is_variant(imp: &str) -> bool {
    imp.strip_prefix("fused_").is_some_and(|w| !w.is_empty())
}

/// One line of `ch04_layout.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub shape: String,
    pub tokens: u64,
    pub active: u64,
    pub block_m: u64,
    pub touched_bytes: f64,
}

pub fn parse_layout(text: &str, name: &str) -> Result<Vec<Layout>, String> {
    let t = Table::parse(text, name)?;
    t.records()
        .map(|r| {
            let num = |c: &str| {
                r(c).parse::<f64>()
                    .map_err(|_| format!("{name}: `{}` in column {c} is not a number", r(c)))
            };
            Ok(Layout {
                shape: r("shape"),
                tokens: num("tokens")? as u64,
                active: num("active_experts")? as u64,
                block_m: num("block_m")? as u64,
                touched_bytes: num("touched_bytes")?,
            })
        })
        .collect()
}

fn find<'a>(rows: &'a [BenchRow], shape: &str, n: u64, imp: &str) -> Option<&'a BenchRow> {
    rows.iter()
        .find(|r| r.shape == shape && r.rows == n && r.imp == imp)
}

/// `imp`'s time over ours at one shape and token count: (cold, warm).
pub fn over_ours(rows: &[BenchRow], shape: &str, n: u64, imp: &str) -> Option<(f64, f64)> {
    let (o, p) = (find(rows, shape, n, OURS)?, find(rows, shape, n, imp)?);
    Some((
        p.cold_median_us / o.cold_median_us,
        p.warm_median_us / o.warm_median_us,
    ))
}

fn token_counts(rows: &[BenchRow], shape: &str) -> Vec<u64> {
    rows.iter()
        .filter(|r| r.shape == shape && r.rows > 0)
        .map(|r| r.rows)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Implementations at a shape, ours first, its variants, then the others in [`OTHERS`] order.
fn impls_at(rows: &[BenchRow], shape: &str) -> Vec<String> {
    let mut v = vec![OURS.to_string()];
    for r in rows
        .iter()
        .filter(|r| r.shape == shape && is_variant(&r.imp))
    {
        if !v.contains(&r.imp) {
            v.push(r.imp.clone());
        }
    }
    v.extend(OTHERS.iter().map(|s| s.to_string()));
    v.retain(|i| rows.iter().any(|r| r.shape == shape && r.imp == *i));
    v
}

fn label(imp: &str) -> String {
    match imp {
        OURS => "ours: path, fusion and tiles by the chapter's rules".into(),
        "fused_tiled" => "ours, tiled path forced (SwiGLU fused into GEMM 1)".into(),
        "fused_tiled_unfused" => "ours, tiled path, unfused (gate|up, then a SwiGLU kernel)".into(),
        "fused_decode" => "ours, decode path forced (SwiGLU and the sum over k fused)".into(),
        "fused_decode_swiglu" => "ours, decode path, the sum over k in its own kernel".into(),
        "fused_decode_unfused" => "ours, decode path, unfused".into(),
        GROUPED => "chapter 2: one cuBLAS GEMM per active expert and projection".into(),
        TORCH_GMM => "PyTorch: sort + torch._grouped_mm ×2".into(),
        TORCH_LOOP => "PyTorch: per-expert loop (Hugging Face eager)".into(),
        other => format!(
            "ours, {}",
            other.trim_start_matches("fused_").replace('_', " ")
        ),
    }
}

/// The table the chapter quotes: one block per shape, one column per token count; the active
/// experts and BLOCK_M, each implementation (`cold / warm` µs), the floor and ours over it, our
/// achieved TB/s on touched weights and TFLOP/s, each other implementation over ours, and the
/// launches.
pub fn table(rows: &[BenchRow], layout: &[Layout]) -> String {
    let measured: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    let empty = rows.iter().find(|r| r.imp == EMPTY);
    let mut s = String::new();
    for shape in shapes(&measured) {
        let counts = token_counts(&measured, &shape);
        let here = |n: u64| layout.iter().find(|l| l.shape == shape && l.tokens == n);
        let line = |s: &mut String, label: &str, cell: &dyn Fn(u64) -> String| {
            let cells: Vec<String> = counts.iter().map(|&n| cell(n)).collect();
            let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
        };
        let cw = |r: &BenchRow| {
            format!(
                "{} / {}",
                fmt_us(r.cold_median_us),
                fmt_us(r.warm_median_us)
            )
        };
        let _ = write!(
            s,
            "**{}**, bf16: µs per call, cold / warm",
            describe(&shape)
        );
        if let Some(e) = empty {
            let _ = write!(s, "; one empty launch: {}", cw(e));
        }
        s += "\n\n";
        let _ = writeln!(
            s,
            "| | {} |",
            counts
                .iter()
                .map(|n| format!("{n} token{}", if *n == 1 { "" } else { "s" }))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(s, "|---|{}", "---:|".repeat(counts.len()));
        line(&mut s, "active experts · BLOCK_M", &|n| {
            here(n)
                .map(|l| format!("{} · {}", l.active, l.block_m))
                .unwrap_or_default()
        });
        let impls = impls_at(&measured, &shape);
        for imp in &impls {
            line(&mut s, &label(imp), &|n| {
                find(&measured, &shape, n, imp).map(cw).unwrap_or_default()
            });
        }
        line(
            &mut s,
            "floor: one launch + touched weights at copy bw (or FLOPs at the bf16 rate)",
            &|n| {
                find(&measured, &shape, n, OURS)
                    .map(|r| fmt_us(r.floor_us))
                    .unwrap_or_default()
            },
        );
        if measured.iter().any(|r| r.shape == shape && r.imp == PROBE) {
            line(
                &mut s,
                "one launch reading the touched weights, measured",
                &|n| {
                    find(&measured, &shape, n, PROBE)
                        .map(cw)
                        .unwrap_or_default()
                },
            );
        }
        line(&mut s, "ours ÷ floor (cold)", &|n| {
            find(&measured, &shape, n, OURS)
                .map(|r| format!("{:.1}×", r.cold_median_us / r.floor_us))
                .unwrap_or_default()
        });
        line(
            &mut s,
            "ours: TB/s on touched weights · TFLOP/s (cold)",
            &|n| {
                find(&measured, &shape, n, OURS)
                    .map(|r| format!("{:.2} · {:.1}", r.cold_gbs / 1e3, r.cold_tflops))
                    .unwrap_or_default()
            },
        );
        // The variants over ours are the fusion figure's; the table keeps the others'.
        for imp in impls.iter().filter(|i| OTHERS.contains(&i.as_str())) {
            line(&mut s, &format!("{imp} ÷ ours"), &|n| {
                over_ours(&measured, &shape, n, imp)
                    .map(|(c, w)| format!("{c:.2}× / {w:.2}×"))
                    .unwrap_or_default()
            });
        }
        line(
            &mut s,
            &format!(
                "launches: {}",
                impls
                    .iter()
                    .map(|i| i.as_str())
                    .collect::<Vec<_>>()
                    .join(" · ")
            ),
            &|n| {
                impls
                    .iter()
                    .map(|imp| {
                        find(&measured, &shape, n, imp)
                            .map(|r| r.launches.to_string())
                            .unwrap_or("–".into())
                    })
                    .collect::<Vec<_>>()
                    .join(" · ")
            },
        );
        s.push('\n');
    }
    s
}

/// The numbers chapter 4's prose quotes from the GPU run, per shape (`qwen3`, `glm`) and token
/// count (`qwen3_t1_…`): each implementation's times (`_cold`, `_warm`; ours bare, the others
/// `_ch02_grouped_cold`, `_torch_grouped_mm_cold`, …) and launches, the floor and ours over it
/// (`_floor`, `_over_floor`), our TB/s on touched weights and TFLOP/s (`_tbs`, `_tflops`), the
/// others over ours (`_over_ours_torch_grouped_mm`, cold; `…_warm`), active experts and
/// BLOCK_M; then per shape the extremes of each other implementation over ours
/// (`qwen3_over_ours_torch_grouped_mm_min`, `_max`) and our best rates (`qwen3_tbs_max`,
/// `qwen3_tflops_max`), and the empty launch.
pub fn gpu_facts(rows: &[BenchRow], layout: &[Layout], f: &mut Facts) -> Result<(), String> {
    let src = GPU_CSV;
    if let Some(r) = rows.iter().find(|r| r.imp == EMPTY) {
        f.add("empty_cold", fmt_us(r.cold_median_us), src);
        f.add("empty_warm", fmt_us(r.warm_median_us), src);
    }
    let measured: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    for shape in shapes(&measured) {
        let s = short(&shape).to_string();
        let impls = impls_at(&measured, &shape);
        let mut ratios: Vec<(String, Vec<f64>)> = Vec::new();
        let (mut tbs, mut tflops) = (Vec::new(), Vec::new());
        for n in token_counts(&measured, &shape) {
            let p = format!("{s}_t{n}");
            for imp in &impls {
                let Some(r) = find(&measured, &shape, n, imp) else {
                    continue;
                };
                let name = if imp == OURS {
                    p.clone()
                } else {
                    format!("{p}_{imp}")
                };
                f.add(format!("{name}_cold"), fmt_us(r.cold_median_us), src);
                f.add(format!("{name}_warm"), fmt_us(r.warm_median_us), src);
                f.add(format!("{name}_launches"), r.launches.to_string(), src);
                if imp != OURS {
                    if let Some((c, w)) = over_ours(&measured, &shape, n, imp) {
                        f.add(format!("{p}_over_ours_{imp}"), format!("{c:.2}"), src);
                        f.add(format!("{p}_over_ours_{imp}_warm"), format!("{w:.2}"), src);
                        match ratios.iter_mut().find(|(i, _)| i == imp) {
                            Some((_, v)) => v.push(c),
                            None => ratios.push((imp.clone(), vec![c])),
                        }
                    }
                }
            }
            if let Some(r) = find(&measured, &shape, n, OURS) {
                f.add(format!("{p}_floor"), fmt_us(r.floor_us), src);
                f.add(
                    format!("{p}_over_floor"),
                    format!("{:.1}", r.cold_median_us / r.floor_us),
                    src,
                );
                f.add(format!("{p}_tbs"), format!("{:.2}", r.cold_gbs / 1e3), src);
                f.add(format!("{p}_tflops"), format!("{:.1}", r.cold_tflops), src);
                f.add(
                    format!("{p}_touched_mb"),
                    thousands((r.bytes / 1e6).round() as u64),
                    src,
                );
                tbs.push(r.cold_gbs / 1e3);
                tflops.push(r.cold_tflops);
            }
            if let Some(probe) = find(&measured, &shape, n, PROBE) {
                f.add(format!("{p}_probe_cold"), fmt_us(probe.cold_median_us), src);
            }
            if let Some(l) = layout.iter().find(|l| l.shape == shape && l.tokens == n) {
                f.add(format!("{p}_active"), l.active.to_string(), LAYOUT_CSV);
                f.add(format!("{p}_block_m"), l.block_m.to_string(), LAYOUT_CSV);
            }
        }
        for (imp, v) in &ratios {
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(0.0, f64::max);
            f.add(format!("{s}_over_ours_{imp}_min"), format!("{lo:.2}"), src);
            f.add(format!("{s}_over_ours_{imp}_max"), format!("{hi:.2}"), src);
        }
        if !tbs.is_empty() {
            let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
            f.add(format!("{s}_tbs_max"), format!("{:.2}", max(&tbs)), src);
            f.add(
                format!("{s}_tflops_max"),
                format!("{:.1}", max(&tflops)),
                src,
            );
        }
    }
    Ok(())
}

/// From `ch04_check.csv`: per shape and checked implementation, the largest relative error over
/// the token counts (`qwen3_check_fused_vs_ch02_grouped`, `qwen3_check_torch_grouped_mm_vs_fused`),
/// and whether every check passed (`checks_ok`: `yes` or `no`).
pub fn check_facts(t: &Table, f: &mut Facts) -> Result<(), String> {
    let mut worst: Vec<(String, f64)> = Vec::new();
    let mut all_ok = true;
    for r in t.records() {
        let rel: f64 = r("relative")
            .parse()
            .map_err(|_| format!("{}: `{}` is not a number", t.name(), r("relative")))?;
        all_ok &= r("ok") == "1";
        let name = format!(
            "{}_check_{}_vs_{}",
            short(&r("shape")),
            r("impl"),
            r("against")
        );
        match worst.iter_mut().find(|(n, _)| *n == name) {
            Some((_, w)) => *w = w.max(rel),
            None => worst.push((name, rel)),
        }
    }
    for (name, w) in worst {
        f.add(name, format!("{w:.1e}"), CHECK_CSV);
    }
    f.add("checks_ok", if all_ok { "yes" } else { "no" }, CHECK_CSV);
    Ok(())
}

/// How an implementation is drawn (Okabe–Ito colors, as the other chapters' figures).
fn style(imp: &str, k: usize) -> Series {
    // Blues for the tiled path's variants, oranges and pinks for the decode path's (in the
    // order of the bench's list), then two more.
    const VARIANT_COLORS: [&str; 7] = [
        "#0072b2", "#56b4e9", "#d55e00", "#e69f00", "#cc79a7", "#009e73", "#999999",
    ];
    let (color, marker) = match imp {
        OURS => ("#0072b2", Marker::Circle),
        GROUPED => ("#e69f00", Marker::Triangle),
        TORCH_GMM => ("#d55e00", Marker::Square),
        TORCH_LOOP => ("#000000", Marker::Square),
        _ => (VARIANT_COLORS[k % VARIANT_COLORS.len()], Marker::Triangle),
    };
    Series {
        imp: imp.to_string(),
        color,
        marker,
        label: label(imp),
    }
}

/// Every implementation drawn, in order: ours, its variants, the others.
fn drawn(rows: &[BenchRow]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        for i in impls_at(rows, &shape) {
            if !v.contains(&i) {
                v.push(i);
            }
        }
    }
    v
}

/// The timing figure: one panel per shape, µs per call against tokens, log-log; each
/// implementation (cold: solid, markers, p10–p90 whiskers; warm: dashed), the floor dotted.
pub fn render_svg(rows: &[BenchRow]) -> String {
    let imps: Vec<String> = drawn(rows).into_iter().filter(|i| !is_variant(i)).collect();
    let rows: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.rows > 0 && imps.contains(&r.imp))
        .collect();
    Figure {
        panel_w: 460.0,
        panel_h: 340.0,
        left: 62.0,
        title: "The MoE experts for a routing given, bf16: µs per call against tokens",
        notes: &[
            "The same routings, weights and hidden states for all; the router is not timed; both axes logarithmic.",
            "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
            "Warm: back-to-back copies in one graph, divided by their number.",
        ],
        panel_title,
        x_label: "tokens T (k pairs each), log scale",
        series: imps.iter().enumerate().map(|(k, i)| style(i, k)).collect(),
        floor_label: "floor: a launch + touched weights at copy bw, or FLOPs at bf16 rate",
        floor_from: OURS,
    }
    .render(&rows)
}

// ---------------------------------------------------------------------------------------------
// Line charts with a linear y axis: the fusion figure and the rates figure.

const INK: &str = "#1f2328";
const MUTED: &str = "#57606a";
const GRID: &str = "#e4e7eb";
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line of a panel: `(T, value)` points.
struct Line {
    imp: String,
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// One panel: log x (tokens), linear y from 0, a horizontal reference line.
struct Panel {
    title: String,
    /// `data-panel` of its lines.
    key: String,
    y_label: String,
    lines: Vec<Line>,
    reference: Option<(f64, String)>,
}

/// Steps of 1, 2 or 5 times a power of ten, about five up to `hi`.
fn linear_ticks(hi: f64) -> Vec<f64> {
    if hi <= 0.0 || !hi.is_finite() {
        return vec![0.0, 1.0];
    }
    let raw = hi / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    let n = (hi / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

fn tick(v: f64) -> String {
    if v == 0.0 || v.abs() >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// Panels in `columns` columns under a title, notes and a legend (`legend`: label and color of
/// each line's implementation, dashed or not).
fn line_chart(
    title: &str,
    notes: &[&str],
    legend: &[(String, &'static str, bool)],
    panels: &[Panel],
    columns: usize,
) -> String {
    const PW: f64 = 420.0;
    const PH: f64 = 250.0;
    const LEFT: f64 = 62.0;
    const GAP: f64 = 34.0;
    const ROW_GAP: f64 = 70.0;
    let columns = columns.max(1);
    let prows = panels.len().div_ceil(columns).max(1);
    let width = columns as f64 * (LEFT + PW) + (columns as f64 - 1.0) * GAP + 24.0;
    let legend_y = 60.0 + 18.0 * notes.len() as f64;
    let per_col = legend.len().div_ceil(2).max(1);
    let top = legend_y + per_col as f64 * 21.0 + 34.0;
    let height = top + prows as f64 * (PH + ROW_GAP);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}" font-size="13" fill="{INK}">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="16" y="30" font-size="16" font-weight="600">{}</text>"#,
        esc(title)
    );
    for (i, n) in notes.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.0}" fill="{MUTED}">{}</text>"#,
            52.0 + 18.0 * i as f64,
            esc(n)
        );
    }
    for (i, (label, color, dashed)) in legend.iter().enumerate() {
        let (x, y) = (
            16.0 + (i / per_col) as f64 * width / 2.0,
            legend_y + (i % per_col) as f64 * 21.0,
        );
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<line x1="{x:.0}" y1="{y:.0}" x2="{:.0}" y2="{y:.0}" stroke="{color}" stroke-width="2.5"{dash}/><text x="{:.0}" y="{:.0}">{}</text>"#,
            x + 28.0,
            x + 36.0,
            y + 4.0,
            esc(label)
        );
    }
    for (pi, p) in panels.iter().enumerate() {
        let (col, row) = (pi % columns, pi / columns);
        let x0 = col as f64 * (LEFT + PW + GAP) + LEFT;
        let y0 = top + row as f64 * (PH + ROW_GAP);
        let xs: Vec<f64> = p
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|q| q.0))
            .collect::<Vec<_>>();
        let (xlo, xhi) = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let (xlo, xhi) = if xlo < xhi {
            (xlo / 1.4, xhi * 1.4)
        } else {
            (0.5, 2.0)
        };
        let ymax = p
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|q| q.1))
            .chain(p.reference.iter().map(|r| r.0))
            .fold(0.0, f64::max)
            * 1.08;
        let yt = linear_ticks(ymax);
        let yhi = *yt.last().unwrap_or(&1.0);
        let mx = |v: f64| x0 + (v.ln() - xlo.ln()) / (xhi.ln() - xlo.ln()) * PW;
        let my = |v: f64| y0 + PH - v / yhi * PH;
        let _ = writeln!(
            s,
            r#"<g class="panel" data-panel="{}"><text x="{x0:.0}" y="{:.0}" font-weight="600">{}</text>"#,
            esc(&p.key),
            y0 - 10.0,
            esc(&p.title)
        );
        for &v in &yt {
            let y = my(v);
            let _ = writeln!(
                s,
                r#"<line x1="{x0:.0}" y1="{y:.1}" x2="{:.0}" y2="{y:.1}" stroke="{GRID}"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                x0 + PW,
                x0 - 6.0,
                y + 4.0,
                tick(v)
            );
        }
        let tokens: BTreeSet<u64> = xs.iter().map(|&v| v as u64).collect();
        for &t in &tokens {
            let x = mx(t as f64);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{y0:.0}" x2="{x:.1}" y2="{:.0}" stroke="{GRID}"/><text x="{x:.1}" y="{:.0}" text-anchor="middle" fill="{MUTED}">{t}</text>"#,
                y0 + PH,
                y0 + PH + 18.0
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.0}" y="{y0:.0}" width="{PW:.0}" height="{PH:.0}" fill="none" stroke="{MUTED}"/><text x="{:.0}" y="{:.0}" text-anchor="middle" fill="{MUTED}">tokens T, log scale</text><text transform="translate({:.0} {:.0}) rotate(-90)" text-anchor="middle" fill="{MUTED}">{}</text>"#,
            x0 + PW / 2.0,
            y0 + PH + 38.0,
            x0 - 46.0,
            y0 + PH / 2.0,
            esc(&p.y_label)
        );
        if let Some((v, label)) = &p.reference {
            let y = my(*v);
            let _ = writeln!(
                s,
                r#"<line class="reference" x1="{x0:.0}" y1="{y:.1}" x2="{:.0}" y2="{y:.1}" stroke="{MUTED}" stroke-dasharray="2 3"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                x0 + PW,
                x0 + PW - 4.0,
                y - 5.0,
                esc(label)
            );
        }
        for l in &p.lines {
            let pts: Vec<String> = l
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", mx(x), my(y)))
                .collect();
            let dash = if l.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline class="line" data-panel="{}" data-impl="{}" points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                esc(&p.key),
                esc(&l.imp),
                pts.join(" "),
                l.color
            );
            for &(x, y) in &l.points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{}"/>"#,
                    mx(x),
                    my(y),
                    l.color
                );
            }
        }
        s += "</g>\n";
    }
    s += "</svg>\n";
    s
}

/// The fusion figure: per shape, each `fused_*` variant's cold (solid) and warm (dashed) time
/// over the fused layer's, against T. Above 1 the variant is slower: what the fusion it undoes
/// buys; a path (`fused_decode`, `fused_tiled`) crossing 1 is where the layer should switch.
pub fn fusion_svg(rows: &[BenchRow]) -> String {
    let variants: Vec<String> = drawn(rows).into_iter().filter(|i| is_variant(i)).collect();
    let color = |k: usize| style("fused_x", k).color;
    let mut panels = Vec::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        let mut lines = Vec::new();
        for (k, v) in variants.iter().enumerate() {
            for (warm, dashed) in [(false, false), (true, true)] {
                let points: Vec<(f64, f64)> = token_counts(rows, &shape)
                    .into_iter()
                    .filter_map(|n| {
                        over_ours(rows, &shape, n, v)
                            .map(|(c, w)| (n as f64, if warm { w } else { c }))
                    })
                    .collect();
                if !points.is_empty() {
                    lines.push(Line {
                        imp: format!("{v}{}", if warm { "_warm" } else { "" }),
                        color: color(k),
                        dashed,
                        points,
                    });
                }
            }
        }
        panels.push(Panel {
            title: panel_title(&shape),
            key: shape.clone(),
            y_label: "time ÷ the fused layer's".into(),
            lines,
            reference: Some((1.0, "the fused layer".into())),
        });
    }
    let mut legend: Vec<(String, &'static str, bool)> = variants
        .iter()
        .enumerate()
        .map(|(k, v)| (label(v), color(k), false))
        .collect();
    legend.push(("warm (dashed, same color)".into(), MUTED, true));
    line_chart(
        "What each fusion and path buys: a variant's time over the fused layer's, against tokens",
        &[
            "Cold solid, warm dashed; above 1 the variant is slower than the layer the chapter ships.",
            "The same routings, weights and hidden states for all; x logarithmic, y linear.",
        ],
        &legend,
        &panels,
        2,
    )
}

/// The rates figure: per shape, our achieved TB/s on the expert weights the routing touches
/// (top) and TFLOP/s (bottom), cold, against T, for every implementation, with the measured
/// copy bandwidth and bf16 rate as reference lines.
pub fn rates_svg(rows: &[BenchRow], copy_gbs: f64, bf16_tflops: f64) -> String {
    let imps: Vec<String> = drawn(rows).into_iter().filter(|i| !is_variant(i)).collect();
    let measured: Vec<&BenchRow> = rows.iter().filter(|r| r.rows > 0).collect();
    let all_shapes = shapes(measured.iter().copied());
    let mut panels = Vec::new();
    for (metric, y_label, reference) in [
        (
            "tbs",
            "TB/s on touched expert weights (cold)",
            (copy_gbs / 1e3, format!("copy {:.2} TB/s", copy_gbs / 1e3)),
        ),
        (
            "tflops",
            "TFLOP/s (cold)",
            (bf16_tflops, format!("cuBLAS bf16 {bf16_tflops:.0} TFLOP/s")),
        ),
    ] {
        for shape in &all_shapes {
            let lines = imps
                .iter()
                .enumerate()
                .filter_map(|(k, imp)| {
                    let points: Vec<(f64, f64)> = measured
                        .iter()
                        .filter(|r| r.shape == *shape && r.imp == *imp)
                        .map(|r| {
                            let v = if metric == "tbs" {
                                r.cold_gbs / 1e3
                            } else {
                                r.cold_tflops
                            };
                            (r.rows as f64, v)
                        })
                        .collect();
                    (!points.is_empty()).then(|| Line {
                        imp: imp.clone(),
                        color: style(imp, k).color,
                        dashed: false,
                        points,
                    })
                })
                .collect();
            panels.push(Panel {
                title: format!("{}: {}", short_title(shape), y_label),
                key: format!("{shape}.{metric}"),
                y_label: y_label.split(" (").next().unwrap_or(y_label).into(),
                lines,
                reference: Some(reference.clone()),
            });
        }
    }
    let legend: Vec<(String, &'static str, bool)> = imps
        .iter()
        .enumerate()
        .map(|(k, i)| (label(i), style(i, k).color, false))
        .collect();
    line_chart(
        "Achieved rates against tokens: bytes of the touched experts and FLOPs over the cold time",
        &[
            "Bytes: the active experts' w13 and w2 in bf16, counted from the routing; FLOPs: 2·T·k·(2I·H + H·I).",
            "Dotted: the measured copy bandwidth and cuBLAS's bf16 rate. x logarithmic, y linear.",
        ],
        &legend,
        &panels,
        all_shapes.len().max(1),
    )
}

/// `Qwen3` or `GLM`: a panel's short title.
fn short_title(shape: &str) -> String {
    describe(shape)
        .split(':')
        .next()
        .unwrap_or(shape)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::header;

    const SHAPES: [(&str, f64, f64, f64); 2] = [
        ("qwen3_h2048_i768_e128_k8", 2048.0, 768.0, 128.0),
        ("glm_h4096_i1024_e288_k8", 4096.0, 1024.0, 288.0),
    ];
    const TOKENS: [u64; 3] = [1, 64, 4096];

    /// Active experts at T: 8 at one token, all of them from 64.
    fn active(e: f64, t: u64) -> f64 {
        if t == 1 {
            8.0
        } else {
            e
        }
    }

    /// Ours: 10 µs + 1 µs per 64 tokens, cold; warm a quarter of it. Chapter 2's loop 3× ours,
    /// torch_grouped_mm 2× ours, the loop 5× ours, the variant 1.5× ours at one token and 0.8×
    /// above.
    fn cold(imp: &str, t: u64) -> f64 {
        let ours = 10.0 + t as f64 / 64.0;
        ours * match imp {
            OURS => 1.0,
            GROUPED => 3.0,
            TORCH_GMM => 2.0,
            TORCH_LOOP => 5.0,
            "fused_decode" if t == 1 => 1.5,
            "fused_decode" => 0.8,
            _ => 0.5,
        }
    }

    fn gpu_csv(with_variant: bool) -> String {
        let mut s = header() + "\n";
        s += "ch04,none,empty_kernel,0,1,4.0,3.9,4.2,0.6,0.59,0.62,4.0,0,0,0,0,200,NVIDIA_H200\n";
        for (shape, h, i, e) in SHAPES {
            for t in TOKENS {
                let bytes = active(e, t) * 3.0 * h * i * 2.0;
                let flops = 2.0 * (t * 8) as f64 * 3.0 * h * i;
                for imp in [OURS, "fused_decode", PROBE, GROUPED, TORCH_GMM, TORCH_LOOP] {
                    if imp == "fused_decode" && !with_variant {
                        continue;
                    }
                    let c = cold(imp, t);
                    s += &BenchRow {
                        chapter: "ch04".into(),
                        shape: shape.into(),
                        imp: imp.into(),
                        rows: t,
                        launches: if imp == TORCH_LOOP { 100 } else { 6 },
                        cold_median_us: c,
                        cold_p10_us: c * 0.95,
                        cold_p90_us: c * 1.1,
                        warm_median_us: c / 4.0,
                        warm_p10_us: c / 4.1,
                        warm_p90_us: c / 3.9,
                        floor_us: 5.0,
                        bytes,
                        flops: if imp == PROBE { 0.0 } else { flops },
                        cold_gbs: 0.0,
                        cold_tflops: 0.0,
                        samples: 200,
                        device: "NVIDIA_H200".into(),
                    }
                    .with_rates()
                    .to_csv();
                    s.push('\n');
                }
            }
        }
        s
    }

    fn layout_csv() -> String {
        let mut s = "shape,hidden,intermediate,experts,k,tokens,pairs,active_experts,block_m,touched_bytes,flops\n".to_string();
        for (shape, h, i, e) in SHAPES {
            for t in TOKENS {
                let bm = if t == 4096 { 64 } else { 16 };
                s += &format!(
                    "{shape},{h},{i},{e},8,{t},{},{},{bm},{},0\n",
                    8 * t,
                    active(e, t),
                    active(e, t) * 3.0 * h * i * 2.0
                );
            }
        }
        s
    }

    const STEPS: &str =
        "chapter,shape,rows,step,kernel,prefix_cold_us,prefix_warm_us,cold_us,warm_us\n\
         ch04,glm_h4096_i1024_e288_k8,64,3,ch04_fused_moe::fused_gemm1_swiglu,30.0,12.0,20.0,8.0\n";

    const CHECK: &str = "shape,tokens,impl,against,max_abs_diff,rms_of_against,max_of_against,relative,relative_to,tolerance,ok\n\
         glm_h4096_i1024_e288_k8,1,fused,ch02_grouped,1e-6,1e-2,4e-2,1.0000e-4,rms,2.0e-3,1\n\
         glm_h4096_i1024_e288_k8,64,fused,ch02_grouped,1e-6,1e-2,4e-2,3.0000e-4,rms,2.0e-3,1\n\
         glm_h4096_i1024_e288_k8,64,torch_grouped_mm,fused,1e-6,1e-2,4e-2,5.0000e-3,max,2.0e-2,1\n";

    fn repo(name: &str, gpu: Option<&str>) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("moe-tools-ch04-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bench/results/h200")).unwrap();
        if let Some(g) = gpu {
            std::fs::write(d.join(GPU_CSV), g).unwrap();
            std::fs::write(d.join(LAYOUT_CSV), layout_csv()).unwrap();
            std::fs::write(d.join(STEPS_CSV), STEPS).unwrap();
            std::fs::write(d.join(CHECK_CSV), CHECK).unwrap();
            std::fs::write(
                d.join(CEILINGS_CSV),
                "bf16_tflops,copy_gbs,empty_cold_us,empty_warm_us,device\n680.0,4200.0,4.000,0.600,NVIDIA_H200\n",
            )
            .unwrap();
        }
        d
    }

    fn content<'a>(files: &'a [Generated], path: &str) -> &'a str {
        &files.iter().find(|g| g.path == path).unwrap().content
    }

    fn has(facts: &str, name: &str, value: &str) {
        assert!(
            facts.contains(&format!("ANCHOR: {name}\n{value}\nANCHOR_END: {name}\n")),
            "{name} = {value} in\n{facts}"
        );
    }

    /// The y of each point of the polyline of `imp` in panel `panel`.
    fn ys(svg: &str, panel: &str, imp: &str) -> Vec<f64> {
        let key = format!(r#"class="line" data-panel="{panel}" data-impl="{imp}" points=""#);
        let line = svg
            .lines()
            .find(|l| l.contains(&key))
            .unwrap_or_else(|| panic!("{key}"));
        line.split(&key)
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .split(' ')
            .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn the_group_from_a_synthetic_run() {
        let root = repo("full", Some(&gpu_csv(true)));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, [SVG, FUSION_SVG, RATES_SVG, TABLE, FACTS]);

        let svg = content(&files, SVG);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        for (shape, ..) in SHAPES {
            for imp in [OURS, GROUPED, TORCH_GMM, TORCH_LOOP] {
                for class in ["cold", "warm"] {
                    let key = format!(r#"class="{class}" data-shape="{shape}" data-impl="{imp}""#);
                    assert_eq!(svg.matches(&key).count(), 1, "{key}");
                }
            }
        }
        assert_eq!(svg.matches(r#"class="floor""#).count(), 2);
        assert!(!svg.contains("data-impl=\"fused_decode\"") && !svg.contains("empty_kernel"));

        // The fusion figure: the variant over ours, 1.5 at one token and 0.8 above, on a
        // linear axis through 0: the points' heights are in the ratio of the values.
        let fusion = content(&files, FUSION_SVG);
        let shape = SHAPES[1].0;
        let y = ys(fusion, shape, "fused_decode");
        assert_eq!(y.len(), 3);
        let base = fusion
            .lines()
            .find(|l| l.contains(r#"class="reference""#))
            .unwrap()
            .split("y1=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap();
        assert!(
            y[0] < base && y[1] > base,
            "1.5 above the line at 1, 0.8 below"
        );
        assert!(fusion.contains("data-impl=\"fused_decode_warm\""));

        // The rates figure: TB/s = bytes / cold µs / 1e6, computed here from the definition.
        let rates = content(&files, RATES_SVG);
        assert_eq!(rates.matches(r#"<g class="panel""#).count(), 4);
        assert_eq!(rates.matches(r#"class="reference""#).count(), 4);
        assert!(rates.contains("copy 4.20 TB/s") && rates.contains("cuBLAS bf16 680 TFLOP/s"));
        let tbs = |t: u64| active(288.0, t) * 3.0 * 4096.0 * 1024.0 * 2.0 / cold(OURS, t) / 1e6;
        let y = ys(rates, &format!("{shape}.tbs"), OURS);
        // Heights above the axis are proportional to the values.
        let y_axis = |svg: &str| -> f64 {
            let at = svg.find(&format!(r#"data-panel="{shape}.tbs""#)).unwrap();
            let rect = svg[at..].split("<rect ").nth(1).unwrap();
            let attr = |a: &str| -> f64 {
                let v = rect.split(&format!(" {a}=\"")).nth(1).unwrap();
                v.split('"').next().unwrap().parse().unwrap()
            };
            attr("y") + attr("height")
        };
        let bottom = y_axis(rates);
        let (h1, h2) = (bottom - y[1], bottom - y[2]);
        assert!(
            ((h1 / h2) / (tbs(64) / tbs(4096)) - 1.0).abs() < 0.02,
            "{h1} {h2} {} {}",
            tbs(64),
            tbs(4096)
        );

        let md = content(&files, TABLE);
        assert!(md.contains("**GLM-like: hidden 4096, intermediate 1024, 288 experts, k = 8**, bf16: µs per call, cold / warm; one empty launch: 4.00 / 0.60\n"), "{md}");
        // Ours at 64 tokens: 11 µs cold, 2.75 warm.
        assert!(md.contains("| ours: path, fusion and tiles by the chapter's rules | 10.0 / 2.50 | 11.0 / 2.75 | 74.0 / 18.5 |"), "{md}");
        assert!(
            md.contains(
                "| torch_grouped_mm ÷ ours | 2.00× / 2.00× | 2.00× / 2.00× | 2.00× / 2.00× |"
            ),
            "{md}"
        );
        assert!(
            !md.contains("fused_decode ÷ ours"),
            "the fusion figure's: {md}"
        );
        assert!(
            md.contains("| ours, decode path forced (SwiGLU and the sum over k fused) | 15.0 / 3.76 | 8.80 / 2.20 | 59.2 / 14.8 |"),
            "{md}"
        );
        assert!(
            md.contains("| active experts · BLOCK_M | 8 · 16 | 288 · 16 | 288 · 64 |"),
            "{md}"
        );
        assert!(
            md.contains("| ours ÷ floor (cold) | 2.0× | 2.2× | 14.8× |"),
            "{md}"
        );
        let glm_tbs_64 = format!("{:.2} · ", tbs(64));
        assert!(md.contains(&glm_tbs_64), "{glm_tbs_64} in {md}");
        for line in md.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(line.matches('|').count(), 5, "4 columns: {line}");
        }

        let facts = content(&files, FACTS);
        for (name, value) in [
            ("copy_gbs", "4200"),
            ("bf16_tflops", "680"),
            ("empty_cold", "4.00"),
            ("glm_t64_cold", "11.0"),
            ("glm_t64_warm", "2.75"),
            ("glm_t64_torch_loop_cold", "55.0"),
            ("glm_t64_torch_loop_launches", "100"),
            ("glm_t64_over_ours_ch02_grouped", "3.00"),
            ("glm_t1_over_ours_fused_decode", "1.50"),
            ("glm_over_ours_fused_decode_min", "0.80"),
            ("glm_over_ours_torch_grouped_mm_max", "2.00"),
            ("glm_t64_over_floor", "2.2"),
            ("glm_t64_floor", "5.00"),
            ("glm_t1_active", "8"),
            ("glm_t4096_block_m", "64"),
            ("glm_t1_touched_mb", "201"),
            ("glm_t64_step3_gemm1_swiglu_cold", "20.0"),
            ("glm_check_fused_vs_ch02_grouped", "3.0e-4"),
            ("glm_check_torch_grouped_mm_vs_fused", "5.0e-3"),
            ("checks_ok", "yes"),
        ] {
            has(facts, name, value);
        }
        has(facts, "glm_t64_tbs", &format!("{:.2}", tbs(64)));
        let tflops = 2.0 * 64.0 * 8.0 * 3.0 * 4096.0 * 1024.0 / 11.0 / 1e6;
        has(facts, "glm_t64_tflops", &format!("{tflops:.1}"));
    }

    #[test]
    fn without_variants_no_fusion_figure() {
        let root = repo("novariant", Some(&gpu_csv(false)));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, [SVG, RATES_SVG, TABLE, FACTS]);
        assert!(!content(&files, TABLE).contains("fused_decode"));
    }

    #[test]
    fn without_the_gpu_csv_nothing_until_something_is_committed() {
        let root = repo("none", None);
        assert_eq!(generate(&root).unwrap(), Vec::new());
        std::fs::create_dir_all(root.join("book/src/figures")).unwrap();
        std::fs::write(root.join(FACTS), "x").unwrap();
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            e.contains("ch04-facts.md exist but bench/results/h200/ch04.csv does not"),
            "{e}"
        );
    }

    #[test]
    fn linear_ticks_cover_the_range() {
        assert_eq!(linear_ticks(4.6), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(linear_ticks(680.0), [0.0, 200.0, 400.0, 600.0, 800.0]);
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(1.5), "1.5");
    }
}
