//! Chapter 11's generated files, from the GPU run of `bench ch11` (`tools/bench/src/ch11.rs`):
//! `bench/results/h100/ch11.csv` (Kimi K3's front four ways, `separate`, `separate_2s` (on two
//! streams), `merged` and `merged_bf16`; the selection alone, `radix`, `argmax` (chapter 5's k-round argmax, a warp per
//! row) and `fused` (chapter 5's router in its default form); a floor probe after each; one empty
//! launch), `ch11_steps.csv` (each front stopped after each of its launches) and
//! `ch11_ceilings.csv`.
//!
//! Made from them: the facts file, the targets table (each target of the chapter's issue, the
//! measured ratio, met or missed), the timing table along the rows, the front's launch-by-launch
//! table, the row-axis figure (the fronts beside their floor, and the selection alone), and Part
//! II's closing figure (`part2.rs`) and the decode-step share of its routers (`decode.rs`), with
//! the page's example and tree; from `bench ch11 --flips`, the bf16 variant's flip-rate table
//! (`flips.rs`, "not measured yet" until `bench/results/h100/ch11_flips.csv` is committed); from
//! `ch11_gemm.csv`, the stacked GEMM's switch (`gemm.rs`, the same until it is committed).

mod decode;
mod flips;
mod gemm;
mod part2;

use super::facts::{and_list, thousands, Facts};
use super::svg::{Figure, Marker, Series};
use super::tables::{count_header, fmt_us, parse_steps};
use super::{read, Generated};
use crate::bench_row::{parse_csv, BenchRow, StepRow};
use crate::csv::Table;
use part2::probe_after;
use std::fmt::Write as _;
use std::path::Path;

const CSV: &str = "bench/results/h100/ch11.csv";
const STEPS: &str = "bench/results/h100/ch11_steps.csv";
const CEILINGS: &str = "bench/results/h100/ch11_ceilings.csv";
const FACTS: &str = "book/src/figures/ch11-facts.md";
const TARGETS: &str = "book/src/figures/ch11-targets.md";
const TIMES: &str = "book/src/figures/ch11-table.md";
const STEPS_TABLE: &str = "book/src/figures/ch11-steps.md";
const SVG: &str = "book/src/figures/ch11-front.svg";
/// Where the targets are written down, as the facts file names it.
const HERE: &str = "tools/src/figures/ch11.rs (the issue's targets)";

/// The shapes, as `bench ch11` names them.
pub const FRONT: &str = "kimi_k3_h7168_e896_p3584_k16";
pub const TOPK: &str = "kimi_e896_k16";

/// The targets (cold medians): merged at most these fractions of separate at these row
/// counts; radix select at most the k-round argmax from [`RADIX_FROM_ROWS`] rows up. The same
/// numbers as `bench ch11`'s printed verdicts (`tools/bench/src/ch11.rs`, `targets`).
pub const MERGED_OVER_SEPARATE_MAX: [(u64, f64); 2] = [(16, 0.8), (1024, 0.9)];
pub const RADIX_FROM_ROWS: u64 = 16;

/// The fronts, each with its facts name and its legend line.
const FRONTS: [(&str, &str, &str); 4] = [
    (
        "separate",
        "separate",
        "separate: projection GEMM, then chapter 5's pair",
    ),
    (
        "separate_2s",
        "sep2s",
        "separate_2s: the same, the projection GEMM on a second stream",
    ),
    (
        "merged",
        "merged",
        "merged: stacked GEMM (fp32 out), then select + cast",
    ),
    (
        "merged_bf16",
        "bf16",
        "merged_bf16: stacked GEMM (bf16 out), then select",
    ),
];
/// Radix select with a warp per row: measured from the run that added it on, so read where the
/// CSV has it.
const RADIX_WARP: &str = "radix_warp";
/// Radix select with a block per row, forced: measured from the run that made the form a rule of
/// the row count (before it, `radix` was this form), so read where the CSV has it.
const RADIX_BLOCK: &str = "radix_block";
/// Radix select with four warps per row, forced: measured from the run that added the form on,
/// so read where the CSV has it.
const RADIX_HALF: &str = "radix_half";
/// The selections read where the CSV has them.
const OPTIONAL: [&str; 3] = [RADIX_BLOCK, RADIX_HALF, RADIX_WARP];
/// The selections alone.
const SELECTS: [(&str, &str); 6] = [
    (
        "radix",
        "radix: radix select, in the form the row count picks",
    ),
    (
        "radix_block",
        "radix_block: radix select, eight warps per row",
    ),
    ("radix_half", "radix_half: radix select, four warps per row"),
    ("radix_warp", "radix_warp: radix select, a warp per row"),
    (
        "argmax",
        "argmax: chapter 5's k-round argmax, a warp per row",
    ),
    ("fused", "fused: chapter 5's router, its default form"),
];

fn cold(rows: &[BenchRow], shape: &str, n: u64, imp: &str) -> Result<f64, String> {
    super::find(rows, shape, n, imp)
        .map(|r| r.cold_median_us)
        .ok_or_else(|| format!("{CSV}: no {imp} row at {n} rows of {shape}"))
}

/// The probe measured right after `imp` at `n` rows of `shape`.
fn probe(rows: &[BenchRow], shape: &str, n: u64, imp: &str) -> Result<f64, String> {
    rows.iter()
        .position(|r| r.shape == shape && r.rows == n && r.imp == imp)
        .and_then(|i| probe_after(rows, i))
        .map(|p| p.cold_median_us)
        .ok_or_else(|| format!("{CSV}: no floor_probe right after {imp} at {n} rows"))
}

/// One front's launches at one row count, from the steps CSV.
struct FrontSteps<'a> {
    imp: &'a str,
    rows: u64,
    steps: Vec<&'a StepRow>,
}

/// The steps CSV split into its cases (a case starts at step 1), each given to the front whose
/// cold median (in `ch11.csv`, same rows) its whole prefix equals.
fn front_steps<'a>(
    rows: &'a [BenchRow],
    steps: &'a [StepRow],
) -> Result<Vec<FrontSteps<'a>>, String> {
    let mut cases: Vec<Vec<&StepRow>> = Vec::new();
    for st in steps.iter().filter(|s| s.shape == FRONT) {
        if st.step == 1 || cases.is_empty() {
            cases.push(Vec::new());
        }
        cases.last_mut().expect("pushed").push(st);
    }
    cases
        .into_iter()
        .map(|c| {
            let last = c.last().expect("a case has a step");
            let imp = FRONTS
                .iter()
                .map(|(imp, _, _)| *imp)
                .find(|imp| {
                    super::find(rows, FRONT, last.rows, imp)
                        .is_some_and(|r| (r.cold_median_us - last.prefix_cold_us).abs() < 5e-4)
                })
                .ok_or_else(|| {
                    format!(
                        "{STEPS}: the case at {} rows ending {} µs is no front of {CSV}",
                        last.rows, last.prefix_cold_us
                    )
                })?;
            Ok(FrontSteps {
                imp,
                rows: last.rows,
                steps: c,
            })
        })
        .collect()
}

/// A size in a shape's name: `dim("kimi_k3_h7168_e896_p3584_k16", 'p')` → 3584.
fn dim(shape: &str, letter: char) -> Option<u64> {
    shape
        .split('_')
        .filter_map(|p| p.strip_prefix(letter))
        .find_map(|d| d.parse().ok())
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

/// The facts, the targets table and the timing table.
fn facts_and_tables(
    root: &Path,
    rows: &[BenchRow],
    steps: &[FrontSteps],
    f: &mut Facts,
) -> Result<(String, String), String> {
    let empty = rows
        .iter()
        .find(|r| r.imp == "empty_kernel")
        .ok_or_else(|| format!("{CSV}: no empty_kernel row"))?;
    f.add("empty_cold", fmt_us(empty.cold_median_us), CSV);
    f.add("empty_warm", fmt_us(empty.warm_median_us), CSV);
    let ceilings = Table::parse(&read(root, CEILINGS)?, CEILINGS)?;
    f.add(
        "bf16_tflops",
        format!("{:.0}", ceilings.num(&[], "bf16_tflops")?),
        CEILINGS,
    );
    f.add(
        "copy_gbs",
        format!("{:.0}", ceilings.num(&[], "copy_gbs")?),
        CEILINGS,
    );

    // The front.
    let front_counts = super::token_counts(rows, FRONT);
    for &n in &front_counts {
        for (imp, key, _) in FRONTS {
            let r = super::find(rows, FRONT, n, imp)
                .ok_or_else(|| format!("{CSV}: no {imp} row at {n} rows"))?;
            f.add(
                format!("front_{n}_{key}_cold"),
                fmt_us(r.cold_median_us),
                CSV,
            );
            f.add(
                format!("front_{n}_{key}_warm"),
                fmt_us(r.warm_median_us),
                CSV,
            );
            f.add(
                format!("front_{n}_{key}_launches"),
                r.launches.to_string(),
                CSV,
            );
            f.add(
                format!("front_{n}_{key}_over_floor"),
                format!("{:.2}", r.cold_median_us / r.floor_us),
                CSV,
            );
        }
        let r = super::find(rows, FRONT, n, "separate").expect("checked above");
        f.add(format!("front_{n}_floor"), fmt_us(r.floor_us), CSV);
        f.add(
            format!("front_{n}_probe"),
            fmt_us(probe(rows, FRONT, n, "separate")?),
            CSV,
        );
        let sep = cold(rows, FRONT, n, "separate")?;
        let mer = cold(rows, FRONT, n, "merged")?;
        let b16 = cold(rows, FRONT, n, "merged_bf16")?;
        f.add(
            format!("front_{n}_merged_ratio"),
            format!("{:.3}", mer / sep),
            CSV,
        );
        f.add(
            format!("front_{n}_bf16_ratio"),
            format!("{:.3}", b16 / sep),
            CSV,
        );
        f.add(
            format!("front_{n}_floor_ratio"),
            format!("{:.3}", r.floor_us / sep),
            CSV,
        );
    }
    // What the merged kernel moves that the separate form never does: the projection read back
    // in fp32 and written in bf16 (4 + 2 bytes a value), and that at the copy bandwidth.
    let proj = dim(FRONT, 'p').ok_or_else(|| format!("{FRONT}: no projection size (`p…`)"))?;
    let gbs = ceilings.num(&[], "copy_gbs")?;
    for &n in &front_counts {
        let bytes = (6 * n * proj) as f64;
        f.add(
            format!("front_{n}_cast_mb"),
            format!("{:.1}", bytes / 1e6),
            CEILINGS,
        );
        f.add(
            format!("front_{n}_cast_us"),
            format!("{:.1}", bytes / (gbs * 1e3)),
            CEILINGS,
        );
    }
    // Each front's launches: `step_{key}_{n}_{i}` (µs, cold) and the groups the text compares.
    for fs in steps {
        let key = FRONTS
            .iter()
            .find(|(imp, _, _)| *imp == fs.imp)
            .map(|(_, k, _)| *k)
            .unwrap_or(fs.imp);
        let n = fs.rows;
        for st in &fs.steps {
            f.add(
                format!("step_{key}_{n}_{}", st.step),
                fmt_us(st.cold_us),
                STEPS,
            );
        }
        let last = fs.steps.last().expect("a case has a step");
        let before: f64 = fs.steps[..fs.steps.len() - 1]
            .iter()
            .map(|s| s.cold_us)
            .sum();
        f.add(format!("step_{key}_{n}_gemms"), fmt_us(before), STEPS);
        f.add(format!("step_{key}_{n}_last"), fmt_us(last.cold_us), STEPS);
    }
    // What merging saves in the GEMMs and what the kernel after them costs more, per count.
    let parts = |imp: &str, n: u64| {
        steps
            .iter()
            .find(|fs| fs.imp == imp && fs.rows == n)
            .map(|fs| {
                let last = fs.steps.last().expect("a case has a step").cold_us;
                let all: f64 = fs.steps.iter().map(|s| s.cold_us).sum();
                (all - last, last)
            })
    };
    for &n in &front_counts {
        if let (Some((sg, sl)), Some((mg, ml))) = (parts("separate", n), parts("merged", n)) {
            f.add(
                format!("step_{n}_gemm_saving"),
                format!("{:.1}", sg - mg),
                STEPS,
            );
            f.add(
                format!("step_{n}_kernel_extra"),
                format!("{:.1}", ml - sl),
                STEPS,
            );
        }
    }

    // The targets.
    let mut targets =
        String::from("| target | rows | measured (cold medians) | verdict |\n|---|---:|---|---|\n");
    for (n, max) in MERGED_OVER_SEPARATE_MAX {
        f.add(format!("target_merged_{n}"), format!("{max}"), HERE);
        let Ok(sep) = cold(rows, FRONT, n, "separate") else {
            continue;
        };
        let x = cold(rows, FRONT, n, "merged")? / sep;
        // What the target leaves above the floor, for everything the floor does not count.
        let floor = super::find(rows, FRONT, n, "merged").map_or(0.0, |r| r.floor_us);
        f.add(format!("front_{n}_target_us"), fmt_us(max * sep), CSV);
        f.add(
            format!("front_{n}_target_room"),
            format!("{:.1}", max * sep - floor),
            CSV,
        );
        f.add(format!("front_{n}_merged_verdict"), verdict(x <= max), CSV);
        let _ = writeln!(
            targets,
            "| merged ≤ {max} × separate | {} | {x:.3} × separate | {} |",
            thousands(n),
            verdict(x <= max)
        );
    }
    let topk_counts = super::token_counts(rows, TOPK);
    let (mut met, mut judged, mut missed) = (0, 0, Vec::new());
    for &n in &topk_counts {
        for (imp, _) in SELECTS {
            let Some(r) = super::find(rows, TOPK, n, imp) else {
                if OPTIONAL.contains(&imp) {
                    continue; // measured from the run that added it on
                }
                return Err(format!("{CSV}: no {imp} row at {n} rows"));
            };
            f.add(
                format!("topk_{n}_{imp}_cold"),
                fmt_us(r.cold_median_us),
                CSV,
            );
            f.add(
                format!("topk_{n}_{imp}_warm"),
                fmt_us(r.warm_median_us),
                CSV,
            );
        }
        f.add(
            format!("topk_{n}_probe"),
            fmt_us(probe(rows, TOPK, n, "radix")?),
            CSV,
        );
        let (r, a) = (
            cold(rows, TOPK, n, "radix")?,
            cold(rows, TOPK, n, "argmax")?,
        );
        f.add(
            format!("topk_{n}_radix_ratio"),
            format!("{:.3}", r / a),
            CSV,
        );
        f.add(
            format!("topk_{n}_radix_minus_argmax"),
            format!("{:.1}", r - a),
            CSV,
        );
        let warp = super::find(rows, TOPK, n, RADIX_WARP).map(|w| w.cold_median_us);
        if let Some(w) = warp {
            f.add(
                format!("topk_{n}_radix_warp_ratio"),
                format!("{:.3}", w / a),
                CSV,
            );
            f.add(
                format!("topk_{n}_radix_warp_over_radix"),
                format!("{:.3}", w / r),
                CSV,
            );
        }
        if n >= RADIX_FROM_ROWS {
            judged += 1;
            if r <= a {
                met += 1;
            } else {
                missed.push(thousands(n));
            }
            let block = super::find(rows, TOPK, n, RADIX_BLOCK).map(|b| b.cold_median_us);
            let half = super::find(rows, TOPK, n, RADIX_HALF).map(|b| b.cold_median_us);
            let forms = [
                ("radix select", Some(r)),
                ("radix select, eight warps per row", block),
                ("radix select, four warps per row", half),
                ("radix select, a warp per row", warp),
            ];
            for (what, time) in forms {
                if let Some(x) = time {
                    let _ = writeln!(
                        targets,
                        "| {what} ≤ the k-round argmax | {} | {:.3} × argmax | {} |",
                        thousands(n),
                        x / a,
                        verdict(x <= a)
                    );
                }
            }
        }
    }
    f.add("target_radix_from", RADIX_FROM_ROWS.to_string(), HERE);
    f.add("radix_met", met.to_string(), CSV);
    f.add("radix_judged", judged.to_string(), CSV);
    // Where radix select misses, for the page's verdict sentence.
    let note = if missed.is_empty() {
        "none missed".to_string()
    } else {
        format!("missed at {} rows", and_list(&missed))
    };
    f.add("radix_missed_note", note, CSV);
    // The per-row cost of each selection between its two largest counts, ns a row.
    if let [.., lo, hi] = topk_counts[..] {
        for (imp, _) in SELECTS {
            if super::find(rows, TOPK, hi, imp).is_none() && OPTIONAL.contains(&imp) {
                continue;
            }
            let d = cold(rows, TOPK, hi, imp)? - cold(rows, TOPK, lo, imp)?;
            f.add(
                format!("topk_{imp}_ns_per_row"),
                format!("{:.1}", 1e3 * d / (hi - lo) as f64),
                CSV,
            );
        }
        f.add("topk_slope_from", thousands(lo), CSV);
        f.add("topk_slope_to", thousands(hi), CSV);
    }
    Ok((targets, times(rows, &front_counts, &topk_counts)))
}

/// The timing table: per shape, a line per implementation (cold / warm µs), the floor, the probe
/// and the ratios the targets read.
fn times(rows: &[BenchRow], front: &[u64], topk: &[u64]) -> String {
    let mut s = String::new();
    let cell = |shape: &str, n: u64, imp: &str| {
        super::find(rows, shape, n, imp)
            .map(|r| {
                format!(
                    "{} / {}",
                    fmt_us(r.cold_median_us),
                    fmt_us(r.warm_median_us)
                )
            })
            .unwrap_or_default()
    };
    let line = |s: &mut String, head: &str, counts: &[u64], f: &dyn Fn(u64) -> String| {
        let cells: Vec<String> = counts.iter().map(|&n| f(n)).collect();
        let _ = writeln!(s, "| {head} | {} |", cells.join(" | "));
    };
    let ratio = |shape: &str, n: u64, a: &str, b: &str| match (
        super::find(rows, shape, n, a),
        super::find(rows, shape, n, b),
    ) {
        (Some(x), Some(y)) => format!("{:.3}", x.cold_median_us / y.cold_median_us),
        _ => String::new(),
    };
    let floor = |shape: &str, n: u64| {
        super::find(rows, shape, n, "floor_probe")
            .map(|r| fmt_us(r.floor_us))
            .unwrap_or_default()
    };
    let first_probe = |shape: &str, n: u64, imp: &str| {
        rows.iter()
            .position(|r| r.shape == shape && r.rows == n && r.imp == imp)
            .and_then(|i| probe_after(rows, i))
            .map(|p| fmt_us(p.cold_median_us))
            .unwrap_or_default()
    };
    s += "**Kimi K3's front** (hidden 7,168; gate 896 + projection 3,584; k = 16): µs per call, cold / warm\n\n";
    s += &count_header(front, "row");
    for (imp, _, _) in FRONTS {
        let launches = super::find(rows, FRONT, front[0], imp)
            .map(|r| r.launches)
            .unwrap_or(0);
        line(
            &mut s,
            &format!("{imp} ({launches} launches)"),
            front,
            &|n| cell(FRONT, n, imp),
        );
    }
    line(&mut s, "floor", front, &|n| floor(FRONT, n));
    line(&mut s, "floor probe (after separate)", front, &|n| {
        first_probe(FRONT, n, "separate")
    });
    line(&mut s, "merged / separate", front, &|n| {
        ratio(FRONT, n, "merged", "separate")
    });
    line(&mut s, "merged_bf16 / separate", front, &|n| {
        ratio(FRONT, n, "merged_bf16", "separate")
    });
    s += "\n**The selection alone** (16 of 896 fp32 logits, with the bias): µs per call, cold / warm\n\n";
    s += &count_header(topk, "row");
    for (imp, _) in SELECTS {
        if OPTIONAL.contains(&imp)
            && !topk
                .iter()
                .any(|&n| super::find(rows, TOPK, n, imp).is_some())
        {
            continue;
        }
        line(&mut s, imp, topk, &|n| cell(TOPK, n, imp));
    }
    line(&mut s, "floor", topk, &|n| floor(TOPK, n));
    line(&mut s, "floor probe (after radix)", topk, &|n| {
        first_probe(TOPK, n, "radix")
    });
    line(&mut s, "radix / argmax", topk, &|n| {
        ratio(TOPK, n, "radix", "argmax")
    });
    for imp in OPTIONAL {
        if topk
            .iter()
            .any(|&n| super::find(rows, TOPK, n, imp).is_some())
        {
            line(&mut s, &format!("{imp} / argmax"), topk, &|n| {
                ratio(TOPK, n, imp, "argmax")
            });
        }
    }
    s
}

/// The launch-by-launch table of the fronts: a line per front and row count, each launch's
/// kernel and its cold µs (the front stopped after it, less the front stopped before it).
fn steps_table(steps: &[FrontSteps]) -> String {
    let width = steps.iter().map(|s| s.steps.len()).max().unwrap_or(0);
    let mut s = String::from("| front | rows |");
    for i in 1..=width {
        let _ = write!(s, " launch {i} |");
    }
    s += " whole, cold / warm |\n|---|---:|";
    s += &"---|".repeat(width);
    s += "---:|\n";
    let mut ordered: Vec<&FrontSteps> = steps.iter().collect();
    ordered.sort_by_key(|fs| {
        (
            FRONTS.iter().position(|(imp, _, _)| *imp == fs.imp),
            fs.rows,
        )
    });
    for fs in ordered {
        let _ = write!(s, "| {} | {} |", fs.imp, thousands(fs.rows));
        for i in 0..width {
            match fs.steps.get(i) {
                Some(st) => {
                    let _ = write!(s, " `{}` {} |", st.kernel, fmt_us(st.cold_us));
                }
                None => s += " |",
            }
        }
        let last = fs.steps.last().expect("a case has a step");
        let _ = writeln!(
            s,
            " {} / {} |",
            fmt_us(last.prefix_cold_us),
            fmt_us(last.prefix_warm_us)
        );
    }
    s
}

fn panel_title(shape: &str) -> String {
    match shape {
        FRONT => "Kimi K3's front: hidden 7168, gate 896 + projection 3584".into(),
        TOPK => "The selection alone: 16 of 896 fp32 logits".into(),
        other => other.into(),
    }
}

/// The figure: the fronts and the selections against rows, each panel with its floor, and the
/// floor probe (the first one of each count) as a series of its own.
fn figure(rows: &[BenchRow]) -> String {
    let mut drawn: Vec<&BenchRow> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let mine = FRONTS.iter().any(|(imp, _, _)| *imp == r.imp)
            || SELECTS.iter().any(|(imp, _)| *imp == r.imp);
        if mine {
            drawn.push(r);
            let first = !drawn
                .iter()
                .any(|d| d.imp == "floor_probe" && d.shape == r.shape && d.rows == r.rows);
            if let Some(p) = probe_after(rows, i).filter(|_| first) {
                drawn.push(p);
            }
        }
    }
    let colors = [
        ("separate", "#0072b2", Marker::Circle),
        ("separate_2s", "#009e73", Marker::Circle),
        ("merged", "#d55e00", Marker::Square),
        ("merged_bf16", "#cc79a7", Marker::Triangle),
        ("radix", "#e69f00", Marker::Square),
        ("radix_block", "#a6761d", Marker::Triangle),
        ("radix_half", "#999999", Marker::Circle),
        ("radix_warp", "#f0e442", Marker::Diamond),
        ("argmax", "#56b4e9", Marker::Circle),
        ("fused", "#000000", Marker::Triangle),
    ];
    let label = |imp: &str| {
        FRONTS
            .iter()
            .find(|(i, _, _)| *i == imp)
            .map(|(_, _, l)| *l)
            .or_else(|| SELECTS.iter().find(|(i, _)| *i == imp).map(|(_, l)| *l))
            .unwrap_or(imp)
            .to_string()
    };
    let mut series: Vec<Series> = colors
        .iter()
        .filter(|(imp, _, _)| !OPTIONAL.contains(imp) || drawn.iter().any(|d| d.imp == *imp))
        .map(|(imp, color, marker)| Series {
            imp: imp.to_string(),
            color,
            marker: *marker,
            label: label(imp),
        })
        .collect();
    series.push(Series {
        imp: "floor_probe".into(),
        color: "#009e73",
        marker: Marker::Diamond,
        label: "floor_probe: one launch reading the inputs cold".into(),
    });
    Figure {
        panel_w: 400.0,
        panel_h: 300.0,
        left: 62.0,
        title: "Kimi K3's front and the selection alone: time per call against rows",
        notes: &[
            "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
            "Warm: back-to-back copies in one graph. Both axes logarithmic.",
        ],
        panel_title,
        x_label: "rows (tokens), log scale",
        series,
        floor_label: "floor: one launch + bytes at copy bw, or FLOPs at the bf16 rate",
        floor_from: "separate",
    }
    .render(&drawn)
}

/// Every generated file of chapter 11's page.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let rows = parse_csv(&read(root, CSV)?, CSV)?;
    let step_rows = parse_steps(&read(root, STEPS)?, STEPS)?;
    let steps = front_steps(&rows, &step_rows)?;
    let mut f = Facts::default();
    let gpu = super::one_gpu(rows.iter().map(|r| r.device.as_str()), CSV)?;
    f.add("gpu", gpu, CSV);
    let (targets, times) = facts_and_tables(root, &rows, &steps, &mut f)?;
    let mut out = vec![
        Generated {
            path: TARGETS.into(),
            content: targets,
        },
        Generated {
            path: TIMES.into(),
            content: times,
        },
        Generated {
            path: STEPS_TABLE.into(),
            content: steps_table(&steps),
        },
        Generated {
            path: SVG.into(),
            content: figure(&rows),
        },
    ];
    out.extend(part2::generate(root, &mut f)?);
    out.push(decode::generate(root, &mut f)?);
    out.push(flips::generate(root, &mut f)?);
    out.push(gemm::generate(root, &mut f)?);
    out.insert(
        0,
        Generated {
            path: FACTS.into(),
            content: f.render("Chapter 11's numbers"),
        },
    );
    out.extend(super::example_and_tree(root, 11)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rows: u64, step: u32, prefix: f64) -> StepRow {
        StepRow {
            chapter: "ch11".into(),
            shape: FRONT.into(),
            rows,
            step,
            kernel: format!("k{step}"),
            prefix_cold_us: prefix,
            prefix_warm_us: prefix,
            cold_us: 1.0,
            warm_us: 1.0,
        }
    }

    #[test]
    fn each_case_of_the_steps_goes_to_the_front_it_sums_to() {
        let rows = vec![
            BenchRow::flat("ch11", FRONT, "separate", 1, 30.0),
            BenchRow::flat("ch11", FRONT, "merged", 1, 29.0),
        ];
        let steps = vec![
            step(1, 1, 20.0),
            step(1, 2, 29.0),
            step(1, 1, 10.0),
            step(1, 2, 30.0),
        ];
        let got = front_steps(&rows, &steps).unwrap();
        let names: Vec<(&str, usize)> = got.iter().map(|c| (c.imp, c.steps.len())).collect();
        assert_eq!(names, [("merged", 2), ("separate", 2)]);
        let bad = vec![step(1, 1, 12.0)];
        assert_eq!(dim(FRONT, 'p'), Some(3584));
        assert_eq!(dim(FRONT, 'e'), Some(896));
        assert_eq!(dim("toy", 'p'), None);
        assert!(front_steps(&rows, &bad).is_err());
    }
}
