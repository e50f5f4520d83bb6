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

use super::facts::{thousands, Facts};
use super::svg::{shapes, Figure, Marker, Series};
use super::tables::{fmt_us, parse_steps};
use super::{esc, find, read, short, token_counts, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use std::collections::{BTreeMap, BTreeSet};
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

/// The floor figure: per shape, every implementation's cold time over its floor against T (the
/// shipped layer, each variant of ours, chapter 2's loop and the peers): how far each is from
/// the hardware's limit, on one scale for both shapes. Step 4b's targets are ratios on it.
pub fn floor_svg(rows: &[BenchRow]) -> String {
    // The kernel versions (the tiled path's first main loop, the decode paths), not every fusion.
    const VERSIONS: [&str; 4] = [
        "fused_tiled_v1",
        "fused_tiled_v4",
        "fused_decode",
        "fused_decode_grouped",
    ];
    let imps: Vec<String> = drawn(rows)
        .into_iter()
        .filter(|i| !is_variant(i) || VERSIONS.contains(&i.as_str()))
        .collect();
    let color = |imp: &str| match VERSIONS.iter().position(|v| *v == imp) {
        Some(k) => ["#56b4e9", "#e69f00", "#cc79a7", "#009e73"][k],
        None => style(imp, 0).color,
    };
    let mut panels = Vec::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        let mut lines = Vec::new();
        for imp in &imps {
            let points: Vec<(f64, f64)> = token_counts(rows, &shape)
                .into_iter()
                .filter_map(|n| find(rows, &shape, n, imp))
                .filter(|r| r.floor_us > 0.0)
                .map(|r| (r.rows as f64, r.cold_median_us / r.floor_us))
                .collect();
            if !points.is_empty() {
                lines.push(Line {
                    imp: imp.clone(),
                    color: color(imp),
                    dashed: is_variant(imp),
                    points,
                });
            }
        }
        panels.push(Panel {
            title: panel_title(&shape),
            key: shape.clone(),
            y_label: "cold time ÷ the floor".into(),
            lines,
            reference: Some((1.0, "the floor".into())),
        });
    }
    let legend: Vec<(String, &'static str, bool)> = imps
        .iter()
        .map(|i| (label(i), color(i), is_variant(i)))
        .collect();
    line_chart(
        "How far from the floor: each implementation's cold time over its floor, against tokens",
        &[
            "Ours solid (the shipped layer), its variants dashed; chapter 2's loop and the PyTorch peers solid.",
            "Floor: one launch + the touched weights at copy bandwidth, or the FLOPs at the bf16 rate (1 on this scale); x logarithmic, y linear.",
        ],
        &legend,
        &panels,
        2,
    )
}

/// Step 4b's target from 8 to 512 tokens: the layer's cold time within this many times its floor.
const WITHIN_FLOOR_8_TO_512: f64 = 1.1;

/// Step 4b's targets against the run, per shape (the targets are set at Qwen3-30B-A3B's shape;
/// the GLM-like one is reported too): at 1 token the cold time within 1.3× of the floor, from 8
/// to 512 tokens within 1.1×, at 4096 tokens at least 65% of the measured bf16 matrix rate on the
/// layer's FLOPs; and at every T faster than the `torch._grouped_mm` layer.
pub fn targets_table(rows: &[BenchRow], bf16_tflops: f64) -> String {
    // A ratio to two places, or to four where two would print the limit itself (1.1034 is 1.10):
    // the number beside a verdict must show which side of the line it is on.
    let ratio = |over: f64, limit: f64| -> String {
        if format!("{over:.2}") == format!("{limit:.2}") && over != limit {
            format!("{over:.4}")
        } else {
            format!("{over:.2}")
        }
    };
    let mut s =
        String::from("| shape | tokens | target | measured (cold) | |\n|---|---:|---|---|---|\n");
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        for n in token_counts(rows, &shape) {
            let Some(r) = find(rows, &shape, n, OURS) else {
                continue;
            };
            let over = r.cold_median_us / r.floor_us;
            let (target, measured, ok) = match n {
                1 => (
                    "≤ 1.3× the floor".to_string(),
                    format!("{}× the floor", ratio(over, 1.3)),
                    over <= 1.3,
                ),
                8..=512 => (
                    format!("≤ {WITHIN_FLOOR_8_TO_512}× the floor"),
                    format!("{}× the floor", ratio(over, WITHIN_FLOOR_8_TO_512)),
                    over <= WITHIN_FLOOR_8_TO_512,
                ),
                _ => {
                    let share = r.cold_tflops / bf16_tflops;
                    (
                        format!("≥ 65% of {bf16_tflops:.0} TFLOP/s"),
                        format!("{:.0} TFLOP/s, {:.0}%", r.cold_tflops, 100.0 * share),
                        share >= 0.65,
                    )
                }
            };
            s += &format!(
                "| {} | {n} | {target} | {measured} | {} |\n",
                short_title(&shape),
                verdict(ok)
            );
            if let Some((c, _)) = over_ours(rows, &shape, n, TORCH_GMM) {
                s += &format!(
                    "| {} | {n} | faster than `torch._grouped_mm` | it takes {c:.2}× our time | {} |\n",
                    short_title(&shape),
                    verdict(c > 1.0)
                );
            }
        }
    }
    s
}

/// One kernel of `ptxas -v`'s report: registers per thread, spill stores, static shared memory.
#[derive(Debug, PartialEq)]
pub struct PtxasKernel {
    pub name: String,
    pub registers: u32,
    pub spill_bytes: u32,
    pub smem_bytes: u32,
}

/// Reads `ptxas -v`'s report (tools/gpu/run's `ptxas_ch04.log`): for each `Compiling entry
/// function 'NAME'`, its `N bytes spill stores` and `Used N registers, …, N bytes smem` lines.
pub fn parse_ptxas(text: &str) -> Result<Vec<PtxasKernel>, String> {
    let num_before = |line: &str, unit: &str| -> Option<u32> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<PtxasKernel> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(PtxasKernel {
                name,
                registers: 0,
                spill_bytes: 0,
                smem_bytes: 0,
            });
        } else if let Some(k) = out.last_mut() {
            if let Some(n) = num_before(line, "bytes spill stores") {
                k.spill_bytes = n;
            }
            if line.contains("Used ") {
                k.registers = num_before(line, "registers")
                    .ok_or_else(|| format!("{PTXAS_LOG}: no register count in {line:?}"))?;
                k.smem_bytes = num_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    if out.is_empty() || out.iter().any(|k| k.registers == 0) {
        return Err(format!("{PTXAS_LOG}: no complete kernel report"));
    }
    Ok(out)
}

/// The tiled path's GEMM kernels in every tile configuration: registers, spills and static shared
/// memory (version 2's stages are dynamic: `TileConfig::shared_bytes`).
pub fn ptxas_table(kernels: &[PtxasKernel]) -> String {
    let mut s = "`ptxas -v` of CUDA 13.0 for sm_90, on the PTX that NVRTC 13.0 makes \
                 (bench/results/h200/logs/ptxas_ch04.log; RUN.txt says where it ran): \
                 registers per thread, spill stores, static shared memory per block.\n\n\
                 | tile configuration | GEMM 1 + SwiGLU | GEMM 2 |\n|---|---|---|\n"
        .to_string();
    let cell = |name: &str| {
        kernels
            .iter()
            .find(|k| k.name == name)
            .map(|k| {
                format!(
                    "{} regs · {} B spilled · {:.1} KB",
                    k.registers,
                    k.spill_bytes,
                    k.smem_bytes as f64 / 1024.0
                )
            })
            .unwrap_or_else(|| "–".into())
    };
    for k in kernels.iter().filter(|k| k.name.starts_with("fused_gemm2")) {
        let suffix = k.name.trim_start_matches("fused_gemm2");
        let config = suffix.trim_start_matches('_');
        s += &format!(
            "| {} | {} | {} |\n",
            if config.is_empty() {
                "w4_k32_n1"
            } else {
                config
            },
            cell(&format!("fused_gemm1_swiglu{suffix}")),
            cell(&k.name)
        );
    }
    s
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

// ---------------------------------------------------------------------------------------------
// `bench ch04-tune`: the table of the fastest configurations, and the crossover of the paths.

const TUNED_CSV: &str = "bench/results/h200/ch04_tuned.csv";
const TUNE_ALL_CSV: &str = "bench/results/h200/ch04_tune_all.csv";
const TUNE_TABLE: &str = "book/src/figures/ch04-tuned-table.md";
const TUNE_FACTS: &str = "book/src/figures/ch04-tune-facts.md";
const VERSIONS_TABLE: &str = "book/src/figures/ch04-versions.md";

/// A layer's shape as the tuning files spell it: (H, I, E, k).
pub type Dims = (u64, u64, u64, u64);

/// One candidate timed by `bench ch04-tune`: a line of `ch04_tune_all.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub shape: String,
    pub dims: Dims,
    pub tokens: u64,
    pub path: String,
    pub config: String,
    pub cold_us: f64,
    pub cold_p10_us: f64,
    pub cold_p90_us: f64,
    pub warm_us: f64,
}

/// One bucket of `ch04_tuned.csv`: the fastest (path, configuration), and the rule's.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedBucket {
    pub dims: Dims,
    pub tokens: u64,
    pub path: String,
    pub config: String,
    pub cold_us: f64,
    pub rule_path: String,
    pub rule_config: String,
    pub rule_cold_us: f64,
}

/// `ch04_tuned.csv`: the device its comment line names (`# bench ch04-tune on NVIDIA H200: …`),
/// whether it was a `--quick` run, and the buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedFile {
    pub device: Option<String>,
    pub quick: bool,
    pub buckets: Vec<TunedBucket>,
}

/// A CSV's numeric field, or an error naming the file, the line and the column.
fn field_num(t: &Table, r: &crate::csv::Row, c: &str) -> Result<f64, String> {
    let v = &r.fields[t.col(c)?];
    v.parse().map_err(|_| {
        format!(
            "{}:{}: `{v}` in column {c} is not a number",
            t.name(),
            r.line
        )
    })
}

fn field_dims(t: &Table, r: &crate::csv::Row) -> Result<Dims, String> {
    let n = |c: &str| field_num(t, r, c).map(|v| v as u64);
    Ok((n("hidden")?, n("intermediate")?, n("experts")?, n("k")?))
}

fn field(t: &Table, r: &crate::csv::Row, c: &str) -> Result<String, String> {
    Ok(r.fields[t.col(c)?].clone())
}

pub fn parse_tune_all(text: &str, name: &str) -> Result<Vec<Candidate>, String> {
    let t = Table::parse(text, name)?;
    t.rows()
        .iter()
        .map(|r| {
            Ok(Candidate {
                shape: field(&t, r, "shape")?,
                dims: field_dims(&t, r)?,
                tokens: field_num(&t, r, "tokens")? as u64,
                path: field(&t, r, "path")?,
                config: field(&t, r, "config")?,
                cold_us: field_num(&t, r, "cold_us")?,
                cold_p10_us: field_num(&t, r, "cold_p10_us")?,
                cold_p90_us: field_num(&t, r, "cold_p90_us")?,
                warm_us: field_num(&t, r, "warm_us")?,
            })
        })
        .collect()
}

/// Parses `ch04_tuned.csv`. Its `#` lines are comments (the first says where the table comes
/// from); they are blanked, not removed, so errors keep the file's line numbers.
pub fn parse_tuned(text: &str, name: &str) -> Result<TunedFile, String> {
    let mut device = None;
    let mut quick = false;
    let mut body = String::new();
    for line in text.lines() {
        match line.trim().strip_prefix('#') {
            Some(comment) => {
                if let Some(rest) = comment.trim().strip_prefix("bench ch04-tune on ") {
                    if let Some((d, _)) = rest.split_once(':') {
                        quick |= d.contains("--quick");
                        let d = d.split(" (").next().unwrap_or(d).trim();
                        device = Some(d.to_string());
                    }
                }
                body.push('\n');
            }
            None => {
                body += line;
                body.push('\n');
            }
        }
    }
    let t = Table::parse(&body, name)?;
    let buckets = t
        .rows()
        .iter()
        .map(|r| {
            Ok(TunedBucket {
                dims: field_dims(&t, r)?,
                tokens: field_num(&t, r, "tokens")? as u64,
                path: field(&t, r, "path")?,
                config: field(&t, r, "config")?,
                cold_us: field_num(&t, r, "cold_us")?,
                rule_path: field(&t, r, "rule_path")?,
                rule_config: field(&t, r, "rule_config")?,
                rule_cold_us: field_num(&t, r, "rule_cold_us")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(TunedFile {
        device,
        quick,
        buckets,
    })
}

/// The tiled path, as the CSVs spell it; every other path (`decode`, and any later one such as
/// `decode_grouped`) runs the decode kernels' arithmetic.
const TILED: &str = "tiled";

/// One bucket with its candidates: the winner and the rule's choice as timed, and the fastest
/// candidate of each path timed.
#[derive(Clone, Debug)]
pub struct TuneBucket {
    pub tokens: u64,
    pub winner: Candidate,
    pub rule: Candidate,
    pub best: Vec<Candidate>,
}

impl TuneBucket {
    /// The rule's cold median over the winner's.
    pub fn rule_over_winner(&self) -> f64 {
        self.rule.cold_us / self.winner.cold_us
    }
    /// The fastest candidate of `path`, if that path was timed.
    pub fn best_of(&self, path: &str) -> Option<&Candidate> {
        self.best.iter().find(|c| c.path == path)
    }
    /// The fastest candidate of any decode path.
    pub fn best_decode_any(&self) -> Option<&Candidate> {
        self.best
            .iter()
            .filter(|c| c.path != TILED)
            .min_by(|a, b| a.cold_us.total_cmp(&b.cold_us))
    }
    /// The fastest tile's cold median over the fastest of `path`, when both were timed.
    pub fn tiled_over(&self, path: &str) -> Option<f64> {
        Some(self.best_of(TILED)?.cold_us / self.best_of(path)?.cold_us)
    }
    /// The fastest tile over the fastest of any decode path.
    pub fn tiled_over_decode_any(&self) -> Option<f64> {
        Some(self.best_of(TILED)?.cold_us / self.best_decode_any()?.cold_us)
    }
}

/// One shape's buckets, by tokens.
#[derive(Clone, Debug)]
pub struct TuneShape {
    /// As `ch04_tune_all.csv` names it (`qwen3_30b_a3b`).
    pub name: String,
    pub dims: Dims,
    /// The paths timed at this shape: `tiled`, `decode`, then any other in the file's order.
    pub paths: Vec<String>,
    pub buckets: Vec<TuneBucket>,
}

impl TuneShape {
    /// Pairs per expert on average at `tokens`: T·k / E.
    pub fn pairs_per_expert(&self, tokens: u64) -> f64 {
        (tokens * self.dims.3) as f64 / self.dims.2.max(1) as f64
    }
}

/// The same (path, configuration).
fn same_choice(c: &Candidate, path: &str, config: &str) -> bool {
    c.path == path && c.config == config
}

/// Both files joined: per shape (in the tuned table's order) and bucket, the candidates behind
/// each row. The two files must come from one run: every row's winner and rule's choice are
/// among its bucket's candidates with the same cold median, the winner is the fastest of them,
/// and every bucket timed has a row.
pub fn tune_shapes(tuned: &TunedFile, all: &[Candidate]) -> Result<Vec<TuneShape>, String> {
    // Two files' medians written with three decimals from the same number.
    const SAME_US: f64 = 5e-4;
    let mut shapes: Vec<TuneShape> = Vec::new();
    for b in &tuned.buckets {
        let here: Vec<&Candidate> = all
            .iter()
            .filter(|c| c.dims == b.dims && c.tokens == b.tokens)
            .collect();
        let at = format!(
            "H {}, I {}, E {}, k {}, T {}",
            b.dims.0, b.dims.1, b.dims.2, b.dims.3, b.tokens
        );
        let Some(first) = here.first() else {
            return Err(format!(
                "{TUNED_CSV} has a row for {at} and {TUNE_ALL_CSV} no candidate: not one run"
            ));
        };
        let name = first.shape.clone();
        let find = |path: &str, config: &str, cold: f64, what: &str| -> Result<Candidate, String> {
            let c = here
                .iter()
                .find(|c| same_choice(c, path, config))
                .ok_or_else(|| format!("{at}: {what} {path} {config} is not in {TUNE_ALL_CSV}"))?;
            if (c.cold_us - cold).abs() > SAME_US {
                return Err(format!(
                    "{at}: {what} {path} {config} took {cold} µs in {TUNED_CSV} and {} in {TUNE_ALL_CSV}: not one run",
                    c.cold_us
                ));
            }
            Ok((*c).clone())
        };
        let winner = find(&b.path, &b.config, b.cold_us, "the winner")?;
        let rule = find(
            &b.rule_path,
            &b.rule_config,
            b.rule_cold_us,
            "the rule's choice",
        )?;
        if let Some(faster) = here.iter().find(|c| c.cold_us < winner.cold_us) {
            return Err(format!(
                "{at}: {} {} ({} µs) is faster than the winner {} {} ({} µs)",
                faster.path,
                faster.config,
                faster.cold_us,
                winner.path,
                winner.config,
                winner.cold_us
            ));
        }
        let mut best: Vec<Candidate> = Vec::new();
        for c in &here {
            match best.iter_mut().find(|b| b.path == c.path) {
                Some(b) if c.cold_us < b.cold_us => *b = (*c).clone(),
                Some(_) => {}
                None => best.push((*c).clone()),
            }
        }
        let bucket = TuneBucket {
            tokens: b.tokens,
            winner,
            rule,
            best,
        };
        match shapes.iter_mut().find(|s| s.dims == b.dims) {
            Some(s) => {
                if s.buckets.iter().any(|x| x.tokens == b.tokens) {
                    return Err(format!("{TUNED_CSV}: two rows for {at}"));
                }
                s.buckets.push(bucket);
            }
            None => shapes.push(TuneShape {
                name,
                dims: b.dims,
                paths: Vec::new(),
                buckets: vec![bucket],
            }),
        }
    }
    for c in all {
        let listed = shapes
            .iter()
            .any(|s| s.dims == c.dims && s.buckets.iter().any(|b| b.tokens == c.tokens));
        if !listed {
            return Err(format!(
                "{TUNE_ALL_CSV}: {} at T {} has no row in {TUNED_CSV}: not one run",
                c.shape, c.tokens
            ));
        }
    }
    for s in &mut shapes {
        s.buckets.sort_by_key(|b| b.tokens);
        let mut paths = vec![TILED.to_string(), "decode".to_string()];
        for c in all.iter().filter(|c| c.dims == s.dims) {
            if !paths.contains(&c.path) {
                paths.push(c.path.clone());
            }
        }
        paths.retain(|p| s.buckets.iter().any(|b| b.best_of(p).is_some()));
        s.paths = paths;
    }
    Ok(shapes)
}

/// `qwen3_30b_a3b` → `Qwen3-30B-A3B`; a name with its sizes in it (`glm_h4096_…`) → its short
/// title (`GLM-like`).
fn tune_title(shape: &str) -> String {
    if super::ch02::dims(shape).is_some() {
        return short_title(shape);
    }
    let mut parts = shape.split('_');
    let first = parts.next().unwrap_or(shape);
    let first = match first.strip_prefix("qwen") {
        Some(v) => format!("Qwen{v}"),
        None => first.to_string(),
    };
    std::iter::once(first)
        .chain(parts.map(|p| p.to_uppercase()))
        .collect::<Vec<_>>()
        .join("-")
}

/// A ratio or a count of pairs per expert with about two significant digits: `0.06`, `1.8`, `32`.
fn fmt_small(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `1, 8, 64 and 512`.
fn and_list(v: &[String]) -> String {
    match v {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The tuning table: one block per shape, one column per batch bucket.
pub fn tune_table(shapes: &[TuneShape], device: Option<&str>) -> String {
    let mut s = format!(
        "Cold µs per layer call (the L2 flushed before each replay), median (p10–p90), one run of \
         `bench ch04-tune`{}; \"–\": the path was not timed at that batch.\n\n",
        device.map(|d| format!(" on the {d}")).unwrap_or_default()
    );
    for shape in shapes {
        let (h, i, e, k) = shape.dims;
        let _ = writeln!(
            s,
            "**{}: H {h}, I {i}, E {e}, k {k}**\n",
            tune_title(&shape.name)
        );
        let _ = writeln!(
            s,
            "| | {} |",
            shape
                .buckets
                .iter()
                .map(|b| format!("{} token{}", b.tokens, if b.tokens == 1 { "" } else { "s" }))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(s, "|---|{}", "---:|".repeat(shape.buckets.len()));
        let line = |s: &mut String, label: &str, cell: &dyn Fn(&TuneBucket) -> String| {
            let cells: Vec<String> = shape.buckets.iter().map(cell).collect();
            let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
        };
        let timed = |c: &Candidate| {
            format!(
                "{} ({}–{})",
                fmt_us(c.cold_us),
                fmt_us(c.cold_p10_us),
                fmt_us(c.cold_p90_us)
            )
        };
        line(&mut s, "pairs per expert, T·k / E", &|b| {
            fmt_small(shape.pairs_per_expert(b.tokens))
        });
        line(&mut s, "fastest: path, configuration", &|b| {
            format!("**{} {}**", b.winner.path, b.winner.config)
        });
        line(&mut s, "fastest: cold µs", &|b| timed(&b.winner));
        line(&mut s, "the rule alone: path, configuration", &|b| {
            format!("{} {}", b.rule.path, b.rule.config)
        });
        line(&mut s, "the rule alone: cold µs", &|b| timed(&b.rule));
        line(&mut s, "the rule ÷ the fastest", &|b| {
            format!("{:.2}×", b.rule_over_winner())
        });
        for path in &shape.paths {
            let what = if path == TILED { "tile" } else { "geometry" };
            line(
                &mut s,
                &format!("fastest {path}: {what} · cold µs"),
                &|b| {
                    b.best_of(path)
                        .map(|c| format!("{} · {}", c.config, fmt_us(c.cold_us)))
                        .unwrap_or("–".into())
                },
            );
        }
        for path in shape.paths.iter().filter(|p| *p != TILED) {
            line(&mut s, &format!("fastest tiled ÷ fastest {path}"), &|b| {
                b.tiled_over(path)
                    .map(|x| format!("{x:.2}×"))
                    .unwrap_or("–".into())
            });
        }
        s.push('\n');
    }
    s
}

/// The numbers the page quotes from the tuning run. Overall: `tune_device`, `tune_quick`
/// (`yes` or `no`), `tune_buckets` (`1, 8, 64, 512 and 4096`), `tune_timings`. Per shape
/// (`qwen3`, `glm`) and bucket (`qwen3_tune_t64_…`): the winner (`_path`, `_config`, `_cold`),
/// the rule's choice (`_rule_path`, `_rule_config`, `_rule_cold`), the rule over the winner
/// (`_speedup`), the fastest of each path timed (`_best_tiled`, `_best_tiled_cold`,
/// `_best_decode`, `_best_decode_cold`, `_best_decode_grouped`, …) and the tile's time over each
/// other path's (`_tiled_over_decode`, `_decode_over_tiled`, …), pairs per expert (`_ppe`). Per
/// shape: the crossover, measured (`_decode_last`: a decode path, `decode` or any other that is
/// not `tiled`, won every bucket from the smallest up to it; `_tiled_first`: the next bucket,
/// which the tiled path won; with their pairs
/// per expert `_ppe` and the margin there between the fastest tile and the fastest decode
/// candidate of any decode path, `_decode_last_tiled_over_decode`,
/// `_tiled_first_decode_over_tiled`) and as the rule drew it (`_rule_decode_last`,
/// `_rule_tiled_first`); in how many buckets the rule picked the winner's path (`_path_agrees`,
/// of `_buckets`) and configuration too (`_choice_agrees`); the rule's tile (`_rule_tile`) and
/// in how many buckets it was the fastest tile (`_rule_tile_fastest`, of `_tiled_buckets`); the
/// largest speedup over the rule (`_speedup_max`, at `_speedup_max_tokens`, `…_ppe`, `…_config`,
/// `…_rule_config`), and the largest where both ran the decode path (`_decode_speedup_max`:
/// what the decode geometry is worth).
pub fn tune_facts(shapes: &[TuneShape], tuned: &TunedFile, timings: usize, f: &mut Facts) {
    let src = format!("{TUNED_CSV} and {TUNE_ALL_CSV}");
    let src = src.as_str();
    if let Some(d) = &tuned.device {
        f.add("tune_device", d.clone(), TUNED_CSV);
    }
    f.add(
        "tune_quick",
        if tuned.quick { "yes" } else { "no" },
        TUNED_CSV,
    );
    let buckets: BTreeSet<u64> = shapes
        .iter()
        .flat_map(|s| s.buckets.iter().map(|b| b.tokens))
        .collect();
    let buckets: Vec<String> = buckets.iter().map(|t| t.to_string()).collect();
    f.add("tune_buckets", and_list(&buckets), TUNED_CSV);
    f.add("tune_timings", timings.to_string(), TUNE_ALL_CSV);
    let ratio = |x: f64| format!("{x:.2}");
    for shape in shapes {
        let s = short(&shape.name);
        let n = shape.buckets.len();
        for b in &shape.buckets {
            let p = format!("{s}_tune_t{}", b.tokens);
            f.add(
                format!("{p}_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            f.add(format!("{p}_path"), b.winner.path.clone(), src);
            f.add(format!("{p}_config"), b.winner.config.clone(), src);
            f.add(format!("{p}_cold"), fmt_us(b.winner.cold_us), src);
            f.add(format!("{p}_rule_path"), b.rule.path.clone(), src);
            f.add(format!("{p}_rule_config"), b.rule.config.clone(), src);
            f.add(format!("{p}_rule_cold"), fmt_us(b.rule.cold_us), src);
            f.add(format!("{p}_speedup"), ratio(b.rule_over_winner()), src);
            for path in &shape.paths {
                if let Some(c) = b.best_of(path) {
                    f.add(format!("{p}_best_{path}"), c.config.clone(), src);
                    f.add(format!("{p}_best_{path}_cold"), fmt_us(c.cold_us), src);
                }
            }
            for path in shape.paths.iter().filter(|p| *p != TILED) {
                if let Some(x) = b.tiled_over(path) {
                    f.add(format!("{p}_tiled_over_{path}"), ratio(x), src);
                    f.add(format!("{p}_{path}_over_tiled"), ratio(1.0 / x), src);
                }
            }
        }
        let p = format!("{s}_tune");
        f.add(format!("{p}_buckets"), n.to_string(), src);
        // The measured crossover: a decode path won every bucket from the smallest up to
        // `decode_last`, and the tiled path the next one, `tiled_first`.
        let decode_run = shape
            .buckets
            .iter()
            .take_while(|b| b.winner.path != TILED)
            .count();
        let last_decode = decode_run.checked_sub(1);
        if let Some(i) = last_decode {
            let b = &shape.buckets[i];
            f.add(format!("{p}_decode_last"), b.tokens.to_string(), src);
            f.add(
                format!("{p}_decode_last_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            if let Some(x) = b.tiled_over_decode_any() {
                f.add(format!("{p}_decode_last_tiled_over_decode"), ratio(x), src);
            }
        }
        if let Some(b) = shape.buckets.get(decode_run) {
            f.add(format!("{p}_tiled_first"), b.tokens.to_string(), src);
            f.add(
                format!("{p}_tiled_first_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            if let Some(x) = b.tiled_over_decode_any() {
                f.add(
                    format!("{p}_tiled_first_decode_over_tiled"),
                    ratio(1.0 / x),
                    src,
                );
            }
        }
        // The rule's crossover on the same buckets.
        if let Some(b) = shape.buckets.iter().rev().find(|b| b.rule.path != TILED) {
            f.add(format!("{p}_rule_decode_last"), b.tokens.to_string(), src);
        }
        if let Some(b) = shape.buckets.iter().find(|b| b.rule.path == TILED) {
            f.add(format!("{p}_rule_tiled_first"), b.tokens.to_string(), src);
        }
        let count = |pred: &dyn Fn(&TuneBucket) -> bool| {
            shape.buckets.iter().filter(|b| pred(b)).count().to_string()
        };
        f.add(
            format!("{p}_path_agrees"),
            count(&|b| b.rule.path == b.winner.path),
            src,
        );
        f.add(
            format!("{p}_choice_agrees"),
            count(&|b| same_choice(&b.rule, &b.winner.path, &b.winner.config)),
            src,
        );
        // The rule's tile: the same at every bucket it tiles (the rule does not look at T).
        let mut rule_tiles: Vec<&str> = Vec::new();
        for b in shape.buckets.iter().filter(|b| b.rule.path == TILED) {
            if !rule_tiles.contains(&b.rule.config.as_str()) {
                rule_tiles.push(&b.rule.config);
            }
        }
        if !rule_tiles.is_empty() {
            f.add(format!("{p}_rule_tile"), rule_tiles.join(" / "), src);
            let tiled: Vec<&Candidate> = shape
                .buckets
                .iter()
                .filter_map(|b| b.best_of(TILED))
                .collect();
            f.add(
                format!("{p}_rule_tile_fastest"),
                tiled
                    .iter()
                    .filter(|c| rule_tiles.contains(&c.config.as_str()))
                    .count()
                    .to_string(),
                src,
            );
            f.add(format!("{p}_tiled_buckets"), tiled.len().to_string(), src);
        }
        // On the decode path, what the geometry is worth: the rule's default against the
        // fastest, where both ran the decode path.
        let decode_gain = shape
            .buckets
            .iter()
            .filter(|b| b.rule.path == "decode" && b.winner.path == "decode")
            .map(TuneBucket::rule_over_winner)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        if let Some(x) = decode_gain {
            f.add(format!("{p}_decode_speedup_max"), ratio(x), src);
        }
        if let Some(b) = shape
            .buckets
            .iter()
            .max_by(|a, b| a.rule_over_winner().total_cmp(&b.rule_over_winner()))
        {
            f.add(format!("{p}_speedup_max"), ratio(b.rule_over_winner()), src);
            f.add(format!("{p}_speedup_max_tokens"), b.tokens.to_string(), src);
            f.add(
                format!("{p}_speedup_max_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            f.add(
                format!("{p}_speedup_max_config"),
                format!("{} {}", b.winner.path, b.winner.config),
                src,
            );
            f.add(
                format!("{p}_speedup_max_rule_config"),
                format!("{} {}", b.rule.path, b.rule.config),
                src,
            );
        }
    }
}

/// The kernel version of a tiled configuration (the page's numbering): 11 for version 10 with
/// its items handed out as blocks free up (`g2_…_x_tma_ws_ps_dy`), 10 for version 8
/// persistent (`g2_…_x_tma_ws_ps`), 9 for version 8 in
/// clusters of two (`g2_…_x_tma_ws_mc`), 8 for version 7
/// warp-specialized (`g2_…_x_tma_ws`), 7 for version 5 or 6 with its weight slices through the
/// tensor memory accelerator (`g2_…_x_tma`, `g1_…_x_w0_tma`), 6 for version 5 waiting
/// for each slice's MMA (`g1_…_x_w0`), 5 for warpgroup MMA in the 128-byte swizzle (`g2_…_x`), 4 for warpgroup MMA in the flat layout (`g2_…`), 3 for a
/// grid of warps (`w2x2_…`), 2 for a pipelined main loop (`…_s3`), 1 for the first main loop; a
/// `_m64` suffix (a larger BLOCK_M) keeps the version of its tile. `None` for anything else.
pub fn tile_version(config: &str) -> Option<u8> {
    let mut parts = config.split('_');
    let first = parts.next()?;
    if let Some(wg) = first.strip_prefix('g') {
        wg.parse::<u32>().ok()?;
        let parts: Vec<&str> = parts.collect();
        return Some(if parts.contains(&"dy") {
            11
        } else if parts.contains(&"ps") {
            10
        } else if parts.contains(&"mc") {
            9
        } else if parts.contains(&"ws") {
            8
        } else if parts.contains(&"tma") {
            7
        } else if parts.contains(&"w0") {
            6
        } else if parts.contains(&"x") {
            5
        } else {
            4
        });
    }
    let warps = first.strip_prefix('w')?;
    let grid = warps.contains('x');
    let mut pipelined = false;
    for p in parts {
        if let Some(n) = p.strip_prefix('s') {
            pipelined |= n.parse::<u32>().is_ok();
        }
    }
    Some(if grid {
        3
    } else if pipelined {
        2
    } else {
        1
    })
}

/// The versions compared, (a, b) for "version a ÷ version b": each with the one before it,
/// versions 4 and 5 (Hopper's) with version 3 (the last portable one), and versions 7 to 9 with
/// version 5 (whose tiles they keep), version 10 with version 8 (of which it is the persistent
/// form), version 11 with version 10 (whose items it hands out as blocks free up). The table's
/// ratio rows and the facts `{shape}_t{T}_v{a}_over_v{b}`.
const VERSION_RATIOS: [(u8, u8); 15] = [
    (1, 2),
    (2, 3),
    (3, 4),
    (3, 5),
    (4, 5),
    (5, 6),
    (6, 7),
    (7, 8),
    (5, 7),
    (5, 8),
    (8, 9),
    (5, 9),
    (8, 10),
    (5, 10),
    (10, 11),
];

/// The fastest tiled candidate of each kernel version, by (shape, batch, version).
pub type ByVersion<'a> = BTreeMap<(String, u64, u8), &'a Candidate>;

/// Per shape and batch, the fastest tiled candidate of each kernel version.
pub fn fastest_by_version(all: &[Candidate]) -> ByVersion<'_> {
    let mut best = ByVersion::new();
    for c in all.iter().filter(|c| c.path == "tiled") {
        let Some(v) = tile_version(&c.config) else {
            continue;
        };
        let slot = best.entry((c.shape.clone(), c.tokens, v)).or_insert(c);
        if c.cold_us < slot.cold_us {
            *slot = c;
        }
    }
    best
}

/// The table of the tiled kernel's versions: per shape (in the tuning table's order), the
/// fastest configuration of each version at every batch (cold µs), and what each version gained
/// over the one before.
pub fn versions_table(shapes: &[TuneShape], best: &ByVersion) -> String {
    let mut s =
        "The tiled path's fastest configuration of each kernel version (any BLOCK_M), cold µs \
                 per layer call, median, from `bench ch04-tune` \
                 (bench/results/h200/ch04_tune_all.csv: every candidate of one batch from one run; \
                 – where a version was not timed).\n"
            .to_string();
    for shape in shapes.iter().map(|t| &t.name) {
        let tokens: BTreeSet<u64> = best.keys().filter(|k| &k.0 == shape).map(|k| k.1).collect();
        s += &format!("\n**{}**\n\n| version |", tune_title(shape));
        for t in &tokens {
            s += &format!(" {t} {} |", if *t == 1 { "token" } else { "tokens" });
        }
        s += "\n|---|";
        s += &"---:|".repeat(tokens.len());
        s += "\n";
        let get = |t: u64, v: u8| best.get(&(shape.clone(), t, v));
        for (v, about) in [
            (1, "1: one stage"),
            (2, "2: stages in flight"),
            (3, "3: a grid of warps"),
            (4, "4: warpgroup MMA (sm_90a)"),
            (5, "5: 4 in the 128-byte swizzle"),
            (
                6,
                "6: 5 waiting for each slice's MMA, copies a slice deeper",
            ),
            (7, "7: 5 or 6, the weights through TMA"),
            (8, "8: 7, warp-specialized"),
            (9, "9: 8 in clusters of two, the weight slice multicast"),
            (10, "10: 8, persistent"),
            (11, "11: 10, items handed out as blocks free up"),
        ] {
            s += &format!("| {about} |");
            for &t in &tokens {
                s += &match get(t, v) {
                    Some(c) => format!(" {:.0} `{}` |", c.cold_us, c.config),
                    None => " – |".into(),
                };
            }
            s += "\n";
        }
        for (a, b) in VERSION_RATIOS {
            s += &format!("| version {a} ÷ version {b} |");
            for &t in &tokens {
                s += &match (get(t, a), get(t, b)) {
                    (Some(x), Some(y)) => format!(" {:.2}× |", x.cold_us / y.cold_us),
                    _ => " – |".into(),
                };
            }
            s += "\n";
        }
    }
    s
}

/// The versions' numbers for the prose: `{shape}_t{T}_v{N}_cold`, `…_v{N}_config` and
/// `{shape}_t{T}_v{A}_over_v{B}` for every pair of `VERSION_RATIOS`.
pub fn version_facts(best: &ByVersion, f: &mut Facts) {
    for ((shape, t, v), c) in best {
        let s = short(shape);
        f.add(
            format!("{s}_t{t}_v{v}_cold"),
            format!("{:.0}", c.cold_us),
            TUNE_ALL_CSV,
        );
        f.add(
            format!("{s}_t{t}_v{v}_config"),
            c.config.clone(),
            TUNE_ALL_CSV,
        );
        for (a, b) in VERSION_RATIOS {
            if *v != b {
                continue;
            }
            if let Some(ca) = best.get(&(shape.clone(), *t, a)) {
                f.add(
                    format!("{s}_t{t}_v{a}_over_v{b}"),
                    format!("{:.2}", ca.cold_us / c.cold_us),
                    TUNE_ALL_CSV,
                );
            }
        }
    }
}

/// The tuning table and its facts, whenever both files of `bench ch04-tune` are committed.
fn tune_files(root: &Path) -> Result<Vec<Generated>, String> {
    let have = [TUNED_CSV, TUNE_ALL_CSV].map(|p| root.join(p).exists());
    if have != [true, true] {
        let committed: Vec<&str> = [TUNE_TABLE, VERSIONS_TABLE, TUNE_FACTS]
            .into_iter()
            .filter(|p| root.join(p).exists())
            .collect();
        if !committed.is_empty() || have.contains(&true) {
            return Err(format!(
                "{TUNED_CSV} and {TUNE_ALL_CSV} come from one run of `bench ch04-tune` and must \
                 both be committed{}",
                if committed.is_empty() {
                    String::new()
                } else {
                    format!(" ({} need them)", committed.join(", "))
                }
            ));
        }
        eprintln!("plot: ch04: no {TUNED_CSV} yet (bench ch04-tune makes it): the tuning table is left out");
        return Ok(Vec::new());
    }
    let tuned = parse_tuned(&read(root, TUNED_CSV)?, TUNED_CSV)?;
    let all = parse_tune_all(&read(root, TUNE_ALL_CSV)?, TUNE_ALL_CSV)?;
    if tuned.buckets.is_empty() {
        return Err(format!("{TUNED_CSV} has no rows"));
    }
    let shapes = tune_shapes(&tuned, &all)?;
    let mut f = Facts::default();
    tune_facts(&shapes, &tuned, all.len(), &mut f);
    let by_version = fastest_by_version(&all);
    version_facts(&by_version, &mut f);
    Ok(vec![
        Generated {
            path: TUNE_TABLE.into(),
            content: tune_table(&shapes, tuned.device.as_deref()),
        },
        Generated {
            path: VERSIONS_TABLE.into(),
            content: versions_table(&shapes, &by_version),
        },
        Generated {
            path: TUNE_FACTS.into(),
            content: f.render("Chapter 4's tuning numbers"),
        },
    ])
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
        let mut s = "shape,hidden,intermediate,experts,k,tokens,pairs,active_experts,path,block_m,tiles,paired_tiles,touched_bytes,flops\n".to_string();
        for (shape, h, i, e) in SHAPES {
            for t in TOKENS {
                // 4096 tokens: 320 tiles of 128 for 32768 pairs (80.0% of their rows used).
                let (path, bm, tiles) = match t {
                    4096 => ("tiled", 128u64, 320u64),
                    1 | 8 => ("decode", 0, 0),
                    _ => ("tiled", 16, (8 * t).div_ceil(16) + e as u64),
                };
                s += &format!(
                    "{shape},{h},{i},{e},8,{t},{},{},{path},{bm},{tiles},{},{},0\n",
                    8 * t,
                    active(e, t),
                    tiles / 2 * 2,
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
    fn the_ptxas_report_is_read_per_kernel() {
        let log = "ptxas info    : Compiling entry function 'fused_gemm2' for 'sm_90'\n\
                   ptxas info    : Function properties for fused_gemm2\n    \
                   8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n\
                   ptxas info    : Used 111 registers, used 1 barriers, 16672 bytes smem\n\
                   ptxas info    : Compiling entry function 'fused_gemm1_swiglu' for 'sm_90'\n\
                   ptxas info    : Used 109 registers, used 1 barriers, 2048 bytes smem\n";
        let k = parse_ptxas(log).unwrap();
        assert_eq!(
            k[0],
            PtxasKernel {
                name: "fused_gemm2".into(),
                registers: 111,
                spill_bytes: 8,
                smem_bytes: 16672
            }
        );
        assert_eq!(
            (k[1].registers, k[1].spill_bytes, k[1].smem_bytes),
            (109, 0, 2048)
        );
        let t = ptxas_table(&k);
        assert!(t.contains("| w4_k32_n1 | 109 regs · 0 B spilled · 2.0 KB | 111 regs · 8 B spilled · 16.3 KB |"), "{t}");
        assert!(parse_ptxas("nothing here").is_err());
    }

    #[test]
    fn the_group_from_a_synthetic_run() {
        let root = repo("full", Some(&gpu_csv(true)));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, FROM_GPU_CSV);

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

        // The floor figure: cold ÷ floor from the CSV's rows, on a linear axis: every point's
        // distance from the line at 1 is proportional to its ratio minus 1.
        let floor = content(&files, FLOOR_SVG);
        let rows = parse_csv(&gpu_csv(true), "ch04.csv").unwrap();
        let want: Vec<f64> = token_counts(&rows, shape)
            .into_iter()
            .filter_map(|n| find(&rows, shape, n, OURS))
            .map(|r| r.cold_median_us / r.floor_us)
            .collect();
        let y = ys(floor, shape, OURS);
        assert_eq!(y.len(), want.len());
        let one = floor
            .lines()
            .find(|l| l.contains(r#"class="reference""#))
            .and_then(|l| l.split("y1=\"").nth(1))
            .and_then(|l| l.split('"').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap();
        let scale: Vec<f64> = (0..y.len())
            .filter(|&i| (want[i] - 1.0).abs() > 1e-3)
            .map(|i| (one - y[i]) / (want[i] - 1.0))
            .collect();
        // (Coordinates are written to 0.1 px: a few percent of a short distance.)
        assert!(
            scale.len() >= 2
                && scale
                    .iter()
                    .all(|k| *k > 0.0 && (k / scale[0] - 1.0).abs() < 5e-2),
            "{scale:?}"
        );
        assert!(
            !floor.contains("data-impl=\"fused_decode_swiglu\""),
            "kernel versions only"
        );

        // The targets: each verdict from the ratio the CSV gives, computed here.
        let targets = content(&files, TARGETS_TABLE);
        for r in rows
            .iter()
            .filter(|r| r.imp == OURS && r.rows > 0 && r.rows <= 512)
        {
            let over = r.cold_median_us / r.floor_us;
            let limit = if r.rows == 1 { 1.3 } else { 1.1 };
            let shown = if (over * 100.0).round() == limit * 100.0 && over != limit {
                format!("{over:.4}")
            } else {
                format!("{over:.2}")
            };
            let line = format!(
                "| {} | {} | ≤ {limit}× the floor | {shown}× the floor | {} |",
                short_title(&r.shape),
                r.rows,
                if over <= limit { "met" } else { "**missed**" }
            );
            assert!(targets.contains(&line), "{line}\n{targets}");
        }

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
        assert!(md.contains("| ours: path, fusion and tiles by the rules and the tuned table | 10.0 / 2.50 | 11.0 / 2.75 | 74.0 / 18.5 |"), "{md}");
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
            md.contains("| active experts · path, BLOCK_M | 8 · decode | 288 · tiled, 16 | 288 · tiled, 128 |"),
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
            ("glm_t64_over_floor", "2.20"),
            ("glm_t64_floor", "5.00"),
            ("glm_t64_beyond_1_1_floor_us", "5.50"),
            ("glm_t1_active", "8"),
            ("glm_t4096_block_m", "128"),
            ("glm_t4096_path", "tiled"),
            ("glm_t4096_tiles", "320"),
            ("glm_t4096_rows_used_pct", "80.0"),
            ("glm_t4096_padding_pct", "20.0"),
            ("glm_t4096_paired_tiles_pct", "100"),
            ("glm_t1_path", "decode"),
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
        assert_eq!(
            paths,
            [SVG, RATES_SVG, FLOOR_SVG, TABLE, TARGETS_TABLE, FACTS]
        );
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

    // ---- `bench ch04-tune`'s files ----------------------------------------------------------

    const TUNE_SHAPES: [(&str, u64, u64, u64, u64); 2] = [
        ("qwen3_30b_a3b", 2048, 768, 128, 8),
        ("glm_h4096_i1024_e288_k8", 4096, 1024, 288, 8),
    ];
    const TUNE_TOKENS: [u64; 4] = [1, 8, 64, 512];

    /// A tile: 50 + T µs times its factor (`w4_k32_n2` pays off from 512 tokens).
    fn tiled_us(config: &str, t: u64) -> f64 {
        let f = match config {
            "w4_k32_n1" => 1.2,
            "w4_k64_n1" => 1.0,
            "w4_k32_n2" if t >= 512 => 0.9,
            _ => 1.5,
        };
        f * (50.0 + t as f64)
    }

    /// A decode geometry: 10 µs per quarter of a token plus ten, `w2_c1` 2% faster.
    fn decode_us(geometry: &str, t: u64) -> f64 {
        let f = if geometry == "w2_c1" { 0.98 } else { 1.0 };
        f * 10.0 * (1.0 + t as f64 / 4.0)
    }

    /// What the bench times: every tile; the decode geometries up to 16 pairs per expert.
    fn tune_candidates(e: u64, k: u64, t: u64) -> Vec<(&'static str, &'static str, f64)> {
        let mut v: Vec<(&str, &str, f64)> = ["w4_k32_n1", "w4_k64_n1", "w4_k32_n2"]
            .into_iter()
            .map(|c| ("tiled", c, tiled_us(c, t)))
            .collect();
        if t * k <= 16 * e {
            v.extend(
                ["w4_c1", "w2_c1"]
                    .into_iter()
                    .map(|g| ("decode", g, decode_us(g, t))),
            );
        }
        v
    }

    /// The rule: decode `w4_c1` while T·k ≤ 4·E, else the tile `w4_k64_n1`.
    fn rule(e: u64, k: u64, t: u64) -> (&'static str, &'static str, f64) {
        if t * k <= 4 * e {
            ("decode", "w4_c1", decode_us("w4_c1", t))
        } else {
            ("tiled", "w4_k64_n1", tiled_us("w4_k64_n1", t))
        }
    }

    /// Both files of one synthetic run; `winner` may rename a bucket's winner (a broken table).
    fn tune_csvs(winner: Option<(u64, &str, &str)>) -> (String, String) {
        let mut all = "shape,hidden,intermediate,experts,k,tokens,path,config,cold_us,cold_p10_us,cold_p90_us,warm_us\n".to_string();
        let mut tuned = "# bench ch04-tune on NVIDIA H200: the fastest cold median per shape and batch bucket (tools/bench/src/ch04_tune.rs)\n\
            hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us\n".to_string();
        for (name, h, i, e, k) in TUNE_SHAPES {
            for t in TUNE_TOKENS {
                let cands = tune_candidates(e, k, t);
                for (path, config, us) in &cands {
                    all += &format!(
                        "{name},{h},{i},{e},{k},{t},{path},{config},{us:.3},{:.3},{:.3},{:.3}\n",
                        us * 0.98,
                        us * 1.03,
                        us * 0.9
                    );
                }
                let mut best = cands[0];
                for c in &cands {
                    if c.2 < best.2 {
                        best = *c;
                    }
                }
                if let Some((_, p, c)) = winner.filter(|w| w.0 == t) {
                    best = *cands.iter().find(|x| x.0 == p && x.1 == c).unwrap();
                }
                let r = rule(e, k, t);
                tuned += &format!(
                    "{h},{i},{e},{k},{t},{},{},{:.3},{:.3},{},{},{:.3}\n",
                    best.0,
                    best.1,
                    best.2,
                    best.2 * 0.9,
                    r.0,
                    r.1,
                    r.2
                );
            }
        }
        (tuned, all)
    }

    fn tune_repo(name: &str, tuned: Option<&str>, all: Option<&str>) -> std::path::PathBuf {
        let root = repo(name, None);
        if let Some(t) = tuned {
            std::fs::write(root.join(TUNED_CSV), t).unwrap();
        }
        if let Some(a) = all {
            std::fs::write(root.join(TUNE_ALL_CSV), a).unwrap();
        }
        root
    }

    /// A ratio that two places would print as the limit itself gets four, so the number and
    /// the verdict beside it agree to the eye.
    #[test]
    fn targets_near_the_line_show_four_places() {
        let row = |t: u64, cold: f64| BenchRow {
            floor_us: 100.0,
            ..BenchRow::flat("ch04", "qwen3_h2048_i768_e128_k8", OURS, t, cold)
        };
        let md = targets_table(
            &[
                row(8, 110.34),
                row(64, 109.65),
                row(512, 112.0),
                row(1, 130.0),
            ],
            680.0,
        );
        for line in [
            "| 8 | ≤ 1.1× the floor | 1.1034× the floor | **missed** |",
            "| 64 | ≤ 1.1× the floor | 1.0965× the floor | met |",
            "| 512 | ≤ 1.1× the floor | 1.12× the floor | **missed** |",
            "| 1 | ≤ 1.3× the floor | 1.30× the floor | met |",
        ] {
            assert!(md.contains(line), "{line}\n{md}");
        }
    }

    #[test]
    fn versions_are_read_from_configuration_names() {
        for (config, v) in [
            ("w4_k32_n1", Some(1)),
            ("w8_k32_n1_m128", Some(1)),
            ("w4_k64_n1_s3", Some(2)),
            ("w4_k64_n1_s4_m32", Some(2)),
            ("w2x2_k64_n4_s3", Some(3)),
            ("w2x4_k32_n2_s4_m64", Some(3)),
            ("g2_k64_n16_s4", Some(4)),
            ("g1_k64_n8_s4_m64", Some(4)),
            ("g2_k64_n16_s4_x", Some(5)),
            ("g1_k64_n8_s3_x_w0", Some(6)),
            ("g1_k64_n8_s4_x_w0_m64", Some(6)),
            ("g2_k64_n16_s4_x_tma", Some(7)),
            ("g1_k64_n8_s3_x_w0_tma", Some(7)),
            ("g2_k64_n16_s4_x_tma_ws", Some(8)),
            ("g1_k64_n8_s4_x_tma_ws_m64", Some(8)),
            ("g2_k64_n16_s4_x_tma_ws_mc", Some(9)),
            ("g2_k64_n16_s4_x_tma_ws_ps", Some(10)),
            ("g1_k64_n8_s4_x_tma_ws_ps_m64", Some(10)),
            ("g2_k64_n16_s4_x_tma_ws_ps_dy", Some(11)),
            ("g1_k64_n8_s4_x_tma_ws_ps_dy_m64", Some(11)),
            ("gx_k64", None),
            ("decode", None),
        ] {
            assert_eq!(tile_version(config), v, "{config}");
        }
    }

    #[test]
    fn the_versions_table_takes_each_versions_fastest_tile() {
        let c = |tokens: u64, path: &str, config: &str, us: f64| Candidate {
            shape: "qwen3_30b_a3b".into(),
            dims: (2048, 768, 128, 8),
            tokens,
            path: path.into(),
            config: config.into(),
            cold_us: us,
            cold_p10_us: us,
            cold_p90_us: us,
            warm_us: us,
        };
        let all = [
            c(64, "tiled", "w4_k64_n1", 1000.0),
            c(64, "tiled", "w4_k64_n1_s3", 400.0),
            c(64, "tiled", "w4_k64_n1_s4_m32", 380.0),
            c(64, "tiled", "w2x2_k64_n4_s3", 500.0),
            c(64, "tiled", "g2_k64_n16_s4", 800.0),
            c(64, "tiled", "g1_k64_n8_s4_x", 250.0),
            c(64, "tiled", "g1_k64_n8_s3_x_w0", 200.0),
            // A decode candidate faster than every tile is not a version of the tile.
            c(64, "decode", "w4_c1", 100.0),
        ];
        let by_version = fastest_by_version(&all);
        let shapes = [TuneShape {
            name: "qwen3_30b_a3b".into(),
            dims: (2048, 768, 128, 8),
            paths: Vec::new(),
            buckets: Vec::new(),
        }];
        let t = versions_table(&shapes, &by_version);
        assert!(t.contains("| 1: one stage | 1000 `w4_k64_n1` |"), "{t}");
        assert!(
            t.contains("| 2: stages in flight | 380 `w4_k64_n1_s4_m32` |"),
            "{t}"
        );
        assert!(
            t.contains("| 3: a grid of warps | 500 `w2x2_k64_n4_s3` |"),
            "{t}"
        );
        // 1000 / 380 and 380 / 500.
        assert!(t.contains("| version 1 ÷ version 2 | 2.63× |"), "{t}");
        assert!(t.contains("| version 2 ÷ version 3 | 0.76× |"), "{t}");
        assert!(
            t.contains("| 4: warpgroup MMA (sm_90a) | 800 `g2_k64_n16_s4` |"),
            "{t}"
        );
        // 500 / 250 and 800 / 250.
        assert!(t.contains("| version 3 ÷ version 5 | 2.00× |"), "{t}");
        assert!(t.contains("| version 4 ÷ version 5 | 3.20× |"), "{t}");
        // 250 / 200.
        assert!(t.contains("| version 5 ÷ version 6 | 1.25× |"), "{t}");
        let mut f = Facts::default();
        version_facts(&by_version, &mut f);
        let text = f.render("test");
        for (name, value) in [
            ("qwen3_t64_v2_cold", "380"),
            ("qwen3_t64_v3_config", "w2x2_k64_n4_s3"),
            ("qwen3_t64_v2_over_v3", "0.76"),
            ("qwen3_t64_v3_over_v5", "2.00"),
            ("qwen3_t64_v5_config", "g1_k64_n8_s4_x"),
            ("qwen3_t64_v5_over_v6", "1.25"),
            ("qwen3_t64_v6_config", "g1_k64_n8_s3_x_w0"),
        ] {
            assert!(
                text.contains(&format!("ANCHOR: {name}\n{value}\nANCHOR_END: {name}")),
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn the_tuning_table_and_facts_from_a_synthetic_run() {
        let (tuned, all) = tune_csvs(None);
        let root = tune_repo("tune", Some(&tuned), Some(&all));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, [TUNE_TABLE, VERSIONS_TABLE, TUNE_FACTS]);

        // Computed here from the formulas: below 64 tokens the decode path wins (w2_c1), from
        // 64 the tile w4_k64_n1, at 512 w4_k32_n2. The rule runs decode w4_c1 up to T·k = 4E
        // (Qwen3: 64 tokens, GLM: 144), then w4_k64_n1.
        let r2 = |x: f64| format!("{x:.2}");
        let facts = content(&files, TUNE_FACTS);
        let ratio_64 = decode_us("w4_c1", 64) / tiled_us("w4_k64_n1", 64);
        let ratio_512 = tiled_us("w4_k64_n1", 512) / tiled_us("w4_k32_n2", 512);
        for (name, value) in [
            ("tune_device", "NVIDIA H200".to_string()),
            ("tune_quick", "no".into()),
            ("tune_buckets", "1, 8, 64 and 512".into()),
            ("tune_timings", (3 * 8 + 2 * 3 + 2 * 4).to_string()),
            ("qwen3_tune_t1_path", "decode".into()),
            ("qwen3_tune_t1_config", "w2_c1".into()),
            ("qwen3_tune_t1_rule_config", "w4_c1".into()),
            ("qwen3_tune_t1_ppe", "0.06".into()),
            ("qwen3_tune_t8_ppe", "0.50".into()),
            ("qwen3_tune_t64_ppe", "4.0".into()),
            ("glm_tune_t64_ppe", "1.8".into()),
            ("glm_tune_t512_ppe", "14".into()),
            (
                "qwen3_tune_t1_speedup",
                r2(decode_us("w4_c1", 1) / decode_us("w2_c1", 1)),
            ),
            ("qwen3_tune_t1_best_tiled", "w4_k64_n1".into()),
            (
                "qwen3_tune_t1_best_tiled_cold",
                fmt_us(tiled_us("w4_k64_n1", 1)),
            ),
            (
                "qwen3_tune_t1_tiled_over_decode",
                r2(tiled_us("w4_k64_n1", 1) / decode_us("w2_c1", 1)),
            ),
            ("qwen3_tune_t64_path", "tiled".into()),
            ("qwen3_tune_t64_rule_path", "decode".into()),
            ("qwen3_tune_t64_speedup", r2(ratio_64)),
            (
                "qwen3_tune_t64_decode_over_tiled",
                r2(decode_us("w2_c1", 64) / tiled_us("w4_k64_n1", 64)),
            ),
            ("qwen3_tune_t512_config", "w4_k32_n2".into()),
            ("qwen3_tune_t512_speedup", r2(ratio_512)),
            ("qwen3_tune_buckets", "4".into()),
            ("qwen3_tune_decode_last", "8".into()),
            ("qwen3_tune_decode_last_ppe", "0.50".into()),
            (
                "qwen3_tune_decode_last_tiled_over_decode",
                r2(tiled_us("w4_k64_n1", 8) / decode_us("w2_c1", 8)),
            ),
            ("qwen3_tune_tiled_first", "64".into()),
            ("qwen3_tune_tiled_first_ppe", "4.0".into()),
            (
                "qwen3_tune_tiled_first_decode_over_tiled",
                r2(decode_us("w2_c1", 64) / tiled_us("w4_k64_n1", 64)),
            ),
            ("qwen3_tune_rule_decode_last", "64".into()),
            ("qwen3_tune_rule_tiled_first", "512".into()),
            ("glm_tune_rule_decode_last", "64".into()),
            ("glm_tune_rule_tiled_first", "512".into()),
            // 1, 8 and 512 on the same path; no bucket with the same geometry or tile.
            ("qwen3_tune_path_agrees", "3".into()),
            ("qwen3_tune_choice_agrees", "0".into()),
            ("qwen3_tune_rule_tile", "w4_k64_n1".into()),
            ("qwen3_tune_rule_tile_fastest", "3".into()),
            ("qwen3_tune_tiled_buckets", "4".into()),
            (
                "qwen3_tune_decode_speedup_max",
                r2(decode_us("w4_c1", 8) / decode_us("w2_c1", 8)),
            ),
            ("qwen3_tune_speedup_max", r2(ratio_64.max(ratio_512))),
            ("qwen3_tune_speedup_max_tokens", "64".into()),
            ("qwen3_tune_speedup_max_ppe", "4.0".into()),
            ("qwen3_tune_speedup_max_config", "tiled w4_k64_n1".into()),
            ("qwen3_tune_speedup_max_rule_config", "decode w4_c1".into()),
            // GLM: decode timed at 512 tokens too (8·512 ≤ 16·288), and lost.
            ("glm_tune_t512_best_decode", "w2_c1".into()),
            (
                "glm_tune_t512_decode_over_tiled",
                r2(decode_us("w2_c1", 512) / tiled_us("w4_k32_n2", 512)),
            ),
        ] {
            has(facts, name, &value);
        }
        assert!(!facts.contains("qwen3_tune_t512_best_decode"), "{facts}");

        let md = content(&files, TUNE_TABLE);
        assert!(
            md.contains("one run of `bench ch04-tune` on the NVIDIA H200"),
            "{md}"
        );
        assert!(
            md.contains("**Qwen3-30B-A3B: H 2048, I 768, E 128, k 8**\n"),
            "{md}"
        );
        assert!(
            md.contains("**GLM-like: H 4096, I 1024, E 288, k 8**\n"),
            "{md}"
        );
        assert!(
            md.contains("| fastest: path, configuration | **decode w2_c1** | **decode w2_c1** | **tiled w4_k64_n1** | **tiled w4_k32_n2** |"),
            "{md}"
        );
        assert!(
            md.contains("| the rule alone: path, configuration | decode w4_c1 | decode w4_c1 | decode w4_c1 | tiled w4_k64_n1 |"),
            "{md}"
        );
        let rule_row = format!(
            "| the rule ÷ the fastest | {}× | {}× | {}× | {}× |",
            r2(decode_us("w4_c1", 1) / decode_us("w2_c1", 1)),
            r2(decode_us("w4_c1", 8) / decode_us("w2_c1", 8)),
            r2(ratio_64),
            r2(ratio_512)
        );
        assert!(md.contains(&rule_row), "{rule_row} in {md}");
        // The winner at 512 tokens with its p10–p90.
        let w = tiled_us("w4_k32_n2", 512);
        let cell = format!(
            "| {} ({}–{}) |\n",
            fmt_us(w),
            fmt_us(w * 0.98),
            fmt_us(w * 1.03)
        );
        assert!(md.contains(&cell), "{cell} in {md}");
        let qwen3 = md.split("**GLM-like").next().unwrap();
        assert!(
            qwen3.contains(&format!(
                "| fastest decode: geometry · cold µs | w2_c1 · {} | w2_c1 · {} | w2_c1 · {} | – |",
                fmt_us(decode_us("w2_c1", 1)),
                fmt_us(decode_us("w2_c1", 8)),
                fmt_us(decode_us("w2_c1", 64))
            )),
            "{qwen3}"
        );
        for line in md.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(line.matches('|').count(), 6, "5 columns: {line}");
        }
    }

    #[test]
    fn the_tuning_files_must_come_from_one_run() {
        // A winner that is not the fastest of its bucket.
        let (tuned, all) = tune_csvs(Some((8, "decode", "w4_c1")));
        let root = tune_repo("tune-slow", Some(&tuned), Some(&all));
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            e.contains("T 8: decode w2_c1") && e.contains("faster than the winner decode w4_c1"),
            "{e}"
        );
        // A bucket timed and missing from the table.
        let (tuned, all) = tune_csvs(None);
        let cut: String = tuned
            .lines()
            .filter(|l| !l.starts_with("4096,1024,288,8,512,"))
            .map(|l| format!("{l}\n"))
            .collect();
        let root = tune_repo("tune-cut", Some(&cut), Some(&all));
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            e.contains("glm_h4096_i1024_e288_k8 at T 512 has no row"),
            "{e}"
        );
        // A median that differs between the files.
        let changed = tuned.replace(
            &format!("{:.3},", decode_us("w2_c1", 1)),
            &format!("{:.3},", decode_us("w2_c1", 1) + 1.0),
        );
        let root = tune_repo("tune-other", Some(&changed), Some(&all));
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(e.contains("not one run"), "{e}");
        // One file without the other.
        let root = tune_repo("tune-half", Some(&tuned), None);
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(e.contains("must both be committed"), "{e}");
    }

    #[test]
    fn the_tuned_files_comment_names_the_device() {
        let text = "# bench ch04-tune on NVIDIA H200 (--quick: few samples): the fastest …\n\
                    hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us\n\
                    64,40,16,4,1,decode,w4_c1,1.0,1.0,decode,w4_c1,x\n";
        let e = parse_tuned(text, "t.csv").unwrap_err();
        assert!(e.contains("t.csv:3: `x` in column rule_cold_us"), "{e}");
        let t = parse_tuned(&text.replace(",x\n", ",1.0\n"), "t.csv").unwrap();
        assert_eq!(t.device.as_deref(), Some("NVIDIA H200"));
        assert!(t.quick);
        assert_eq!(t.buckets.len(), 1);
        assert_eq!(tune_title("qwen3_30b_a3b"), "Qwen3-30B-A3B");
        assert_eq!(tune_title("glm_h4096_i1024_e288_k8"), "GLM-like");
        assert_eq!(fmt_small(0.0625), "0.06");
        assert_eq!(fmt_small(32.0), "32");
    }

    #[test]
    fn another_decode_path_counts_as_decode() {
        // `decode_grouped` timed beside the others at GLM's shape, and fastest from 64 tokens:
        // the decode side of the crossover moves up to 64, and the table gets its rows.
        let (tuned, all) = tune_csvs(None);
        let grouped = |t: u64| tiled_us("w4_k64_n1", t) * if t >= 64 { 0.5 } else { 2.0 };
        let mut all = all;
        for t in TUNE_TOKENS {
            all += &format!(
                "glm_h4096_i1024_e288_k8,4096,1024,288,8,{t},decode_grouped,w4_c1,{:.3},{:.3},{:.3},{:.3}\n",
                grouped(t),
                grouped(t),
                grouped(t),
                grouped(t)
            );
        }
        let old = format!(
            "4096,1024,288,8,64,tiled,w4_k64_n1,{:.3},",
            tiled_us("w4_k64_n1", 64)
        );
        let new = format!(
            "4096,1024,288,8,64,decode_grouped,w4_c1,{:.3},",
            grouped(64)
        );
        assert!(tuned.contains(&old));
        let tuned = tuned.replace(&old, &new);
        // …and at 512, where it beats the tile too: all its winners are decode paths.
        let old = format!(
            "4096,1024,288,8,512,tiled,w4_k32_n2,{:.3},",
            tiled_us("w4_k32_n2", 512)
        );
        let tuned = tuned.replace(
            &old,
            &format!(
                "4096,1024,288,8,512,decode_grouped,w4_c1,{:.3},",
                grouped(512)
            ),
        );
        let root = tune_repo("tune-grouped", Some(&tuned), Some(&all));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let facts = content(&files, TUNE_FACTS);
        has(facts, "glm_tune_decode_last", "512");
        assert!(!facts.contains("ANCHOR: glm_tune_tiled_first\n"), "{facts}");
        has(facts, "glm_tune_t64_best_decode_grouped", "w4_c1");
        has(facts, "glm_tune_t64_tiled_over_decode_grouped", "2.00");
        has(
            facts,
            "glm_tune_decode_last_tiled_over_decode",
            &format!("{:.2}", tiled_us("w4_k32_n2", 512) / grouped(512)),
        );
        let md = content(&files, TUNE_TABLE);
        let glm = md.split("**GLM-like").nth(1).unwrap();
        assert!(
            glm.contains(&format!(
                "| fastest tiled ÷ fastest decode_grouped | 0.50× | 0.50× | 2.00× | {:.2}× |",
                tiled_us("w4_k32_n2", 512) / grouped(512)
            )),
            "{glm}"
        );
        assert!(!md
            .split("**GLM-like")
            .next()
            .unwrap()
            .contains("decode_grouped"));
    }
}
