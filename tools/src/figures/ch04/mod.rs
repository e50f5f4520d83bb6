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
//! Until `ch04.csv` is committed nothing of that is made and stderr says so; once a generated
//! file is committed, a missing CSV is an error.
//!
//! Apart from the bench, and always: the results of `bench ch04-tune` (`tools/bench/src/ch04_tune.rs`),
//! `ch04_tuned.csv` (the fastest candidate per shape and batch bucket, beside what the rule alone
//! runs) and `ch04_tune_all.csv` (every candidate's timing), make the tuning table and its facts
//! file (`ch04-tuned-table.md`, `ch04-tune-facts.md`): the winners, the rule's choices, and the
//! fastest tiled and decode candidates per bucket, so the crossover of the two paths shows.

mod figs;
mod targets;
#[cfg(test)]
mod tests;
mod tune;

use super::facts::{thousands, Facts};
use super::svg::{shapes, Figure, Marker, Series};
use super::tables::{fmt_us, parse_steps};
use super::{esc, find, read, short, token_counts, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use figs::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use targets::*;
use tune::*;

const GPU_CSV: &str = "bench/results/h200/ch04.csv";
const LAYOUT_CSV: &str = "bench/results/h200/ch04_layout.csv";
const STEPS_CSV: &str = "bench/results/h200/ch04_steps.csv";
const CHECK_CSV: &str = "bench/results/h200/ch04_check.csv";
const CEILINGS_CSV: &str = "bench/results/h200/ch04_ceilings.csv";
const SVG: &str = "book/src/figures/ch04-fused.svg";
const FUSION_SVG: &str = "book/src/figures/ch04-fusion.svg";
const RATES_SVG: &str = "book/src/figures/ch04-rates.svg";
const FLOOR_SVG: &str = "book/src/figures/ch04-floor.svg";
const PTXAS_LOG: &str = "bench/results/h200/logs/ptxas_ch04.log";
const PTXAS_TABLE: &str = "book/src/figures/ch04-ptxas.md";
const TARGETS_TABLE: &str = "book/src/figures/ch04-targets.md";
/// Everything made from the bench's CSV, in the order [`generate`] writes it.
const FROM_GPU_CSV: [&str; 7] = [
    SVG,
    FUSION_SVG,
    RATES_SVG,
    FLOOR_SVG,
    TABLE,
    TARGETS_TABLE,
    FACTS,
];
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

/// The group's files, generated from the repository at `root`.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let mut out = tune_files(root)?;
    if root.join(PTXAS_LOG).exists() {
        out.push(Generated {
            path: PTXAS_TABLE.into(),
            content: ptxas_table(&parse_ptxas(&read(root, PTXAS_LOG)?)?),
        });
    } else if root.join(PTXAS_TABLE).exists() {
        return Err(format!("{PTXAS_TABLE} exists but {PTXAS_LOG} does not"));
    }
    if !root.join(GPU_CSV).exists() {
        super::no_gpu_csv_yet(
            root,
            "ch04",
            GPU_CSV,
            &FROM_GPU_CSV,
            "bench",
            "ch04.csv, ch04_layout.csv, ch04_steps.csv, ch04_check.csv and ch04_ceilings.csv",
            "the figures, the table and the facts are left out",
        )?;
        return Ok(out);
    }
    let rows = parse_csv(&read(root, GPU_CSV)?, GPU_CSV)?;
    let layout = parse_layout(&read(root, LAYOUT_CSV)?, LAYOUT_CSV)?;
    let ceilings = Table::parse(&read(root, CEILINGS_CSV)?, CEILINGS_CSV)?;
    let (copy_gbs, bf16_tflops) = (
        ceilings.num(&[], "copy_gbs")?,
        ceilings.num(&[], "bf16_tflops")?,
    );
    out.push(Generated {
        path: SVG.into(),
        content: render_svg(&rows),
    });
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
        path: FLOOR_SVG.into(),
        content: floor_svg(&rows),
    });
    out.push(Generated {
        path: TABLE.into(),
        content: table(&rows, &layout),
    });
    out.push(Generated {
        path: TARGETS_TABLE.into(),
        content: targets_table(&rows, bf16_tflops),
    });
    let mut f = Facts::default();
    f.add("copy_gbs", format!("{copy_gbs:.0}"), CEILINGS_CSV);
    f.add("bf16_tflops", format!("{bf16_tflops:.0}"), CEILINGS_CSV);
    target_facts(&mut f);
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
            // As measured: a step is the difference of two prefixes timed apart, and one that
            // comes out negative says those runs differed by more than the step, which the page
            // must see rather than a zero.
            f.add(format!("{name}_cold"), fmt_us(st.cold_us), STEPS_CSV);
            f.add(format!("{name}_warm"), fmt_us(st.warm_us), STEPS_CSV);
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

/// A variant of the fused layer: `fused_<what>`.
fn is_variant(imp: &str) -> bool {
    imp.strip_prefix("fused_").is_some_and(|w| !w.is_empty())
}

/// One line of `ch04_layout.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub shape: String,
    pub tokens: u64,
    pub pairs: u64,
    pub active: u64,
    /// The path the layer took (`tiled`, `decode`, `decode_grouped`), its BLOCK_M and its tiles
    /// (both 0 on the decode path).
    pub path: String,
    pub block_m: u64,
    pub tiles: u64,
    /// Tiles whose cluster neighbour (tile 2j with 2j + 1) is of the same expert.
    pub paired_tiles: u64,
    pub touched_bytes: f64,
}

impl Layout {
    /// The share of the tiles' rows that hold a pair, in percent (None without tiles).
    pub fn rows_used_pct(&self) -> Option<f64> {
        (self.tiles > 0).then(|| 100.0 * self.pairs as f64 / (self.tiles * self.block_m) as f64)
    }
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
                pairs: num("pairs")? as u64,
                active: num("active_experts")? as u64,
                path: r("path"),
                block_m: num("block_m")? as u64,
                tiles: num("tiles")? as u64,
                paired_tiles: num("paired_tiles")? as u64,
                touched_bytes: num("touched_bytes")?,
            })
        })
        .collect()
}

/// `imp`'s time over ours at one shape and token count: (cold, warm).
pub fn over_ours(rows: &[BenchRow], shape: &str, n: u64, imp: &str) -> Option<(f64, f64)> {
    let (o, p) = (find(rows, shape, n, OURS)?, find(rows, shape, n, imp)?);
    Some((
        p.cold_median_us / o.cold_median_us,
        p.warm_median_us / o.warm_median_us,
    ))
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
        OURS => "ours: path, fusion and tiles by the rules and the tuned table".into(),
        "fused_tiled" => "ours, tiled path forced (SwiGLU fused into GEMM 1)".into(),
        "fused_tiled_unfused" => "ours, tiled path, unfused (gate|up, then a SwiGLU kernel)".into(),
        "fused_tiled_v1" => {
            "ours, tiled path, main loop v1 (w4_k64_n1: stage, wait, multiply)".into()
        }
        "fused_tiled_v4" => {
            "ours, tiled path, warpgroup MMA at every T (g2_k64_n16_s4_x, sm_90a)".into()
        }
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
        s += &super::tables::count_header(&counts, "token");
        line(&mut s, "active experts · path, BLOCK_M", &|n| {
            here(n)
                .map(|l| match l.block_m {
                    0 => format!("{} · {}", l.active, l.path),
                    bm => format!("{} · {}, {bm}", l.active, l.path),
                })
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
/// (`_floor`, `_over_floor`, `_beyond_1_1_floor_us`), our TB/s on touched weights and TFLOP/s (`_tbs`, `_tflops`), the
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
                if imp == OURS {
                    // The spread of the shipped layer's cold runs, for where a step's time is
                    // within it.
                    f.add(format!("{p}_cold_p10"), fmt_us(r.cold_p10_us), src);
                    f.add(format!("{p}_cold_p90"), fmt_us(r.cold_p90_us), src);
                }
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
                    format!("{:.2}", r.cold_median_us / r.floor_us),
                    src,
                );
                // To four places, for a case that sits on its target.
                f.add(
                    format!("{p}_over_floor_4"),
                    format!("{:.4}", r.cold_median_us / r.floor_us),
                    src,
                );
                // How much faster the layer must get to come within the 8-to-512-token target
                // (1.1× its floor); negative where it is within.
                f.add(
                    format!("{p}_beyond_1_1_floor_us"),
                    fmt_us(r.cold_median_us - WITHIN_FLOOR_8_TO_512 * r.floor_us),
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
                f.add(format!("{p}_path"), l.path.clone(), LAYOUT_CSV);
                if let Some(pct) = l.rows_used_pct() {
                    f.add(format!("{p}_tiles"), l.tiles.to_string(), LAYOUT_CSV);
                    f.add(
                        format!("{p}_rows_used_pct"),
                        format!("{pct:.1}"),
                        LAYOUT_CSV,
                    );
                    f.add(
                        format!("{p}_padding_pct"),
                        format!("{:.1}", 100.0 - pct),
                        LAYOUT_CSV,
                    );
                    f.add(
                        format!("{p}_paired_tiles_pct"),
                        format!("{:.0}", 100.0 * l.paired_tiles as f64 / l.tiles as f64),
                        LAYOUT_CSV,
                    );
                }
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
