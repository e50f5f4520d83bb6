//! Part II's closing figure, "where the time goes" (the router article's Figure 7 in shape): every
//! router design of chapters 1, 5, 8, 9 and 11 along the row axis, each bar its cold median split
//! into three parts, from the committed CSVs of one GPU and nothing else (an error if they name
//! two; the title names it):
//!
//! - **launches**: the design's launch count times its own CSV's empty launch (`empty_kernel`,
//!   cold median), capped at the whole time;
//! - **cold reads**: the floor probe measured beside the design (the row `floor_probe` that the
//!   runner writes right after it: one launch reading the design's input bytes with the L2
//!   flushed), less one empty launch, capped at what the launches leave;
//! - **the rest**: what is left (the arithmetic, the writes, the waits between kernels).
//!
//! The CSV's `floor_us` is not used for the reads: it is one launch plus the larger of the bytes
//! at the copy bandwidth and the FLOPs at the bf16 rate, so where the FLOPs are the larger it is
//! not a read time (Kimi K3's front at 1,024 rows).
//!
//! Two groups: the GLM-like router (hidden 4096, 288 experts, k = 8) at the row counts every one
//! of its CSVs measured, and Kimi K3's front (chapter 11) at its own row counts.

use crate::bench_row::{parse_csv, BenchRow};
use crate::figures::facts::{and_list, thousands, Facts};
use crate::figures::svg::{self, linear_step, GRID, INK, MUTED};
use crate::figures::tables::fmt_us;
use crate::figures::{esc, read, short, Generated};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

const SVG: &str = "book/src/figures/ch11-part2-time.svg";
const TABLE: &str = "book/src/figures/ch11-part2-time.md";

/// One design: its facts name, its label in the legend and the table, its short label under its
/// bar, the CSV and the implementation that measured it.
pub struct Design {
    pub key: &'static str,
    pub label: &'static str,
    pub tag: &'static str,
    pub csv: &'static str,
    pub imp: &'static str,
}

/// A [`Design`] from its fields in order (for the tables of designs here and in `decode.rs`).
pub(super) const fn d(
    key: &'static str,
    label: &'static str,
    tag: &'static str,
    csv: &'static str,
    imp: &'static str,
) -> Design {
    Design {
        key,
        label,
        tag,
        csv,
        imp,
    }
}

const CH01: &str = "bench/results/h100/ch01.csv";
const CH05: &str = "bench/results/h100/ch05.csv";
const CH09: &str = "bench/results/h100/ch09.csv";
const CH11: &str = "bench/results/h100/ch11.csv";

/// The GLM-like routers, from the hidden states: the first two give ids and weights only, the
/// last three the experts' layout too. Chapter 8's stage reads logits, so its design from the
/// hidden states is chapter 9's `gemm_stage` (the logits GEMM, then the stage).
#[rustfmt::skip]
pub const GLM: [Design; 5] = [
    d("chain", "chapter 1: the chain of plain kernels (fp32)", "1", CH01, "chain"),
    d("pair", "chapter 5: the pair (tiny GEMM + fused router)", "5", CH05, "pair"),
    d("pair_align", "chapters 6 + 3: chapter 6's router, then the align (ch09.csv pair_align)", "6+3", CH09, "pair_align"),
    d("gemm_stage", "chapter 8: the logits GEMM, then the routing stage (ch09.csv gemm_stage)", "8", CH09, "gemm_stage"),
    d("one_launch", "chapter 9: one launch", "9", CH09, "one_launch"),
];

/// Kimi K3's front (chapter 11): the gate with the projection beside it.
#[rustfmt::skip]
pub const KIMI: [Design; 3] = [
    d("separate", "chapter 11: separate (projection GEMM, then chapter 5's pair)", "sep", CH11, "separate"),
    d("merged", "chapter 11: merged (stacked GEMM, fp32 out, then select + cast)", "mrg", CH11, "merged"),
    d("merged_bf16", "chapter 11: merged with bf16 output", "bf16", CH11, "merged_bf16"),
];

/// A cold median split into launches, cold reads and the rest, in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub total: f64,
    pub launches: u32,
    pub launch_us: f64,
    pub reads_us: f64,
    pub rest_us: f64,
}

/// The split of `row` (a design's measurement), given its CSV's empty launch `empty` (cold
/// median) and the floor probe measured beside it (cold median).
pub fn split(row: &BenchRow, empty: f64, probe: f64) -> Split {
    let total = row.cold_median_us;
    let launch_us = (row.launches as f64 * empty).min(total);
    let reads_us = (probe - empty).max(0.0).min(total - launch_us);
    Split {
        total,
        launches: row.launches,
        launch_us,
        reads_us,
        rest_us: total - launch_us - reads_us,
    }
}

/// The floor probe the runner wrote right after row `i` (same shape and rows).
pub fn probe_after(rows: &[BenchRow], i: usize) -> Option<&BenchRow> {
    rows.get(i + 1)
        .filter(|p| p.imp == "floor_probe" && p.shape == rows[i].shape && p.rows == rows[i].rows)
}

/// One CSV, parsed, with its empty launch's cold median.
struct Source {
    rows: Vec<BenchRow>,
    empty: f64,
}

fn load(root: &Path, rel: &str) -> Result<Source, String> {
    let rows = parse_csv(&read(root, rel)?, rel)?;
    let empty = rows
        .iter()
        .find(|r| r.imp == "empty_kernel")
        .map(|r| r.cold_median_us)
        .ok_or_else(|| format!("{rel}: no empty_kernel row"))?;
    Ok(Source { rows, empty })
}

/// One bar: a design at a row count (`device`: its row's GPU, as the CSV spells it).
struct Bar<'a> {
    design: &'a Design,
    rows: u64,
    split: Split,
    device: String,
}

/// The bars of one group: each design at each row count that every design measured on a shape
/// whose short name is `family` (`glm`, `kimi`); the counts, ascending.
fn group<'a>(
    root: &Path,
    designs: &'a [Design],
    family: &str,
) -> Result<(Vec<u64>, Vec<Bar<'a>>), String> {
    let mut found: Vec<Vec<(u64, Split, String)>> = Vec::new();
    for de in designs {
        let src = load(root, de.csv)?;
        let mut mine = Vec::new();
        for (i, r) in src.rows.iter().enumerate() {
            if r.imp != de.imp || short(&r.shape) != family || r.rows == 0 {
                continue;
            }
            let probe = probe_after(&src.rows, i).ok_or_else(|| {
                format!(
                    "{}: no floor_probe row right after {} at {} rows",
                    de.csv, de.imp, r.rows
                )
            })?;
            mine.push((
                r.rows,
                split(r, src.empty, probe.cold_median_us),
                r.device.clone(),
            ));
        }
        if mine.is_empty() {
            return Err(format!(
                "{}: no {} rows at a {family} shape",
                de.csv, de.imp
            ));
        }
        found.push(mine);
    }
    let counts: Vec<u64> = found
        .iter()
        .map(|v| v.iter().map(|(n, ..)| *n).collect::<BTreeSet<_>>())
        .reduce(|a, b| a.intersection(&b).copied().collect())
        .unwrap_or_default()
        .into_iter()
        .collect();
    if counts.is_empty() {
        return Err(format!("no row count that every {family} design measured"));
    }
    let mut bars = Vec::new();
    for &n in &counts {
        for (de, mine) in designs.iter().zip(&found) {
            let (_, s, device) = mine
                .iter()
                .find(|(m, ..)| *m == n)
                .expect("in every design");
            bars.push(Bar {
                design: de,
                rows: n,
                split: *s,
                device: device.clone(),
            });
        }
    }
    Ok((counts, bars))
}

/// `1, 6, 16, 96 and 8192`.
fn list(counts: &[u64]) -> String {
    and_list(&counts.iter().map(|n| thousands(*n)).collect::<Vec<_>>())
}

fn pct(part: f64, total: f64) -> String {
    format!("{:.0}", 100.0 * part / total)
}

/// The facts of a group: per design and count `p2_{key}_{n}_total`, `_launches` (the count),
/// `_launch_us`, `_reads_us`, `_rest_us` and the shares `_launch_pct`, `_reads_pct`,
/// `_rest_pct`; the counts `p2_{family}_counts`.
fn add_facts(f: &mut Facts, family: &str, counts: &[u64], bars: &[Bar]) {
    let src = "the split of tools/src/figures/ch11/part2.rs";
    f.add(format!("p2_{family}_counts"), list(counts), src);
    for b in bars {
        let (k, n, s) = (b.design.key, b.rows, b.split);
        f.add(format!("p2_{k}_{n}_total"), fmt_us(s.total), src);
        f.add(format!("p2_{k}_{n}_launches"), s.launches.to_string(), src);
        f.add(format!("p2_{k}_{n}_launch_us"), fmt_us(s.launch_us), src);
        f.add(format!("p2_{k}_{n}_reads_us"), fmt_us(s.reads_us), src);
        f.add(format!("p2_{k}_{n}_rest_us"), fmt_us(s.rest_us), src);
        f.add(
            format!("p2_{k}_{n}_launch_pct"),
            pct(s.launch_us, s.total),
            src,
        );
        f.add(
            format!("p2_{k}_{n}_reads_pct"),
            pct(s.reads_us, s.total),
            src,
        );
        f.add(format!("p2_{k}_{n}_rest_pct"), pct(s.rest_us, s.total), src);
    }
}

/// The table: one block per group, a line per design and count.
fn table(groups: &[(&str, &[u64], &[Bar])]) -> String {
    let mut s = String::new();
    for (title, counts, bars) in groups {
        let _ = writeln!(
            s,
            "**{title}**: µs per call, cold median, split into launches, cold reads and the rest\n"
        );
        s += "| rows | design | launches | cold | launches' part | cold reads | the rest |\n";
        s += "|---:|---|---:|---:|---:|---:|---:|\n";
        for &n in counts.iter() {
            for b in bars.iter().filter(|b| b.rows == n) {
                let sp = b.split;
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} ({}%) | {} ({}%) | {} ({}%) |",
                    thousands(n),
                    b.design.label,
                    sp.launches,
                    fmt_us(sp.total),
                    fmt_us(sp.launch_us),
                    pct(sp.launch_us, sp.total),
                    fmt_us(sp.reads_us),
                    pct(sp.reads_us, sp.total),
                    fmt_us(sp.rest_us),
                    pct(sp.rest_us, sp.total),
                );
            }
        }
        s.push('\n');
    }
    s
}

/// The three parts, bottom to top: name, color (Okabe–Ito), class.
const PARTS: [(&str, &str, &str); 3] = [
    (
        "launches: launch count × the CSV's empty launch (cold)",
        "#e69f00",
        "launches",
    ),
    (
        "cold reads: the floor probe beside it, less one empty launch",
        "#56b4e9",
        "reads",
    ),
    (
        "the rest: arithmetic, writes, waits between kernels",
        "#009e73",
        "rest",
    ),
];

const PANEL_W: f64 = 150.0;
const PANEL_H: f64 = 190.0;
const LEFT: f64 = 48.0;
const GAP: f64 = 18.0;

fn tick(v: f64) -> String {
    if v >= 1.0 || v == 0.0 {
        format!("{}", v.round() as u64)
    } else {
        format!("{v}")
    }
}

/// The top of a panel's scale: a little above its largest bar, leaving out the bars more than
/// eight times the smallest (they are drawn cut at the top), so that the small ones stay readable.
fn scale_top(totals: &[f64]) -> f64 {
    let least = totals.iter().copied().fold(f64::INFINITY, f64::min);
    let kept = totals
        .iter()
        .copied()
        .filter(|t| *t <= 8.0 * least)
        .fold(0.0, f64::max);
    if kept > 0.0 {
        kept * 1.12
    } else {
        1.0
    }
}

/// One band of panels (one per row count), its top at `top`.
fn band(s: &mut String, title: &str, counts: &[u64], bars: &[Bar], top: f64) {
    let _ = writeln!(
        s,
        r#"<text x="16" y="{top}" font-size="14" font-weight="600">{}</text>"#,
        esc(title)
    );
    let py = top + 44.0;
    for (p, &n) in counts.iter().enumerate() {
        let px = 16.0 + LEFT + p as f64 * (LEFT + PANEL_W + GAP);
        let here: Vec<&Bar> = bars.iter().filter(|b| b.rows == n).collect();
        let top_us = scale_top(&here.iter().map(|b| b.split.total).collect::<Vec<_>>());
        let step = linear_step(top_us);
        let ymax = (top_us / step).ceil() * step;
        // A bar above the scale is cut at the panel's top (its value printed there).
        let y = |v: f64| py + PANEL_H - v.min(ymax) / ymax * PANEL_H;
        let _ = writeln!(s, r#"<g class="panel" data-rows="{n}">"#);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="600">{} row{}</text>"#,
            px + PANEL_W / 2.0,
            py - 20.0,
            thousands(n),
            if n == 1 { "" } else { "s" }
        );
        let mut t = 0.0;
        while t <= ymax + 1e-9 {
            let yy = y(t);
            let _ = writeln!(
                s,
                r#"<line x1="{px:.1}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{GRID}"/>"#,
                px + PANEL_W
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{MUTED}" font-size="11">{}</text>"#,
                px - 5.0,
                yy + 4.0,
                tick(t)
            );
            t += step;
        }
        let slot = PANEL_W / here.len() as f64;
        let bw = (slot * 0.62).min(26.0);
        for (i, b) in here.iter().enumerate() {
            let cx = px + slot * (i as f64 + 0.5);
            let x0 = cx - bw / 2.0;
            let sp = b.split;
            let mut base = 0.0;
            for ((_, color, class), v) in PARTS.iter().zip([sp.launch_us, sp.reads_us, sp.rest_us])
            {
                if v > 0.0 {
                    let _ = writeln!(
                        s,
                        r#"<rect class="{class}" data-design="{}" data-rows="{n}" x="{x0:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="{color}"/>"#,
                        b.design.key,
                        y(base + v),
                        y(base) - y(base + v)
                    );
                }
                base += v;
            }
            if sp.total > ymax {
                // The cut: a white zigzag across the bar under the top.
                let zy = py + 14.0;
                let _ = writeln!(
                    s,
                    r#"<path class="cut" d="M{:.1},{:.1}l{:.1},-4l{:.1},8l{:.1},-4" stroke="white" stroke-width="3" fill="none"/>"#,
                    x0 - 2.0,
                    zy,
                    (bw + 4.0) / 3.0,
                    (bw + 4.0) / 3.0,
                    (bw + 4.0) / 3.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="{INK}">{}{}</text>"#,
                y(sp.total) - 3.0,
                fmt_us(sp.total),
                if sp.total > ymax { " ↑" } else { "" }
            );
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="{MUTED}">{}</text>"#,
                py + PANEL_H + 15.0,
                esc(b.design.tag)
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{px:.1}" y="{py:.1}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="{MUTED}"/>"#
        );
        s.push_str("</g>\n");
    }
    let (tx, ty) = (22.0, py + PANEL_H / 2.0);
    let _ = writeln!(
        s,
        r#"<text x="{tx}" y="{ty}" text-anchor="middle" font-size="12" transform="rotate(-90 {tx} {ty})">µs per call, cold</text>"#
    );
}

/// The figure: a legend of the three parts and of the designs' tags, then one band of panels per
/// group, each panel a row count with its own linear scale.
fn render(groups: &[(&str, &[u64], &[Bar])], designs: &[&Design], gpu: &str) -> String {
    let widest = groups.iter().map(|g| g.1.len()).max().unwrap_or(1) as f64;
    let width = (16.0 + widest * (LEFT + PANEL_W + GAP) + 8.0).max(760.0);
    let legend_top = 66.0;
    let legend_rows = PARTS.len() + designs.len();
    let first_band = legend_top + 20.0 * legend_rows as f64 + 20.0;
    let band_h = 44.0 + PANEL_H + 50.0;
    let height = first_band + band_h * groups.len() as f64;
    let mut s = String::new();
    svg::open(
        &mut s,
        width,
        height,
        &format!("Where the time goes: every router of Part II along the row axis ({gpu})"),
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="48" fill="{MUTED}">Each bar: a design's cold median (its value on top), split as the legend says; each panel one row count, its own linear scale (↑: cut at the top).</text>"#
    );
    for (i, (name, color, _)) in PARTS.iter().enumerate() {
        let ly = legend_top + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="16" y="{:.1}" width="14" height="12" fill="{color}"/>"#,
            ly - 9.0
        );
        let _ = writeln!(
            s,
            r#"<text x="38" y="{:.1}">{}</text>"#,
            ly + 1.5,
            esc(name)
        );
    }
    for (i, de) in designs.iter().enumerate() {
        let ly = legend_top + 20.0 * (PARTS.len() + i) as f64;
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.1}" font-weight="600">{}</text>"#,
            ly + 1.5,
            esc(de.tag)
        );
        let _ = writeln!(
            s,
            r#"<text x="56" y="{:.1}">{}</text>"#,
            ly + 1.5,
            esc(de.label)
        );
    }
    for (g, (title, counts, bars)) in groups.iter().enumerate() {
        band(
            &mut s,
            title,
            counts,
            bars,
            first_band + band_h * g as f64 + 14.0,
        );
    }
    s.push_str("</svg>\n");
    s
}

const GLM_TITLE: &str = "The GLM-like router: hidden 4096, 288 experts, k = 8";
const KIMI_TITLE: &str =
    "Kimi K3's front (chapter 11): hidden 7168, gate 896 + projection 3584, k = 16";

/// The figure and its table, and their facts into `f`.
pub fn generate(root: &Path, f: &mut Facts) -> Result<Vec<Generated>, String> {
    let (glm_counts, glm) = group(root, &GLM, "glm")?;
    let (kimi_counts, kimi) = group(root, &KIMI, "kimi")?;
    add_facts(f, "glm", &glm_counts, &glm);
    add_facts(f, "kimi", &kimi_counts, &kimi);
    let groups: [(&str, &[u64], &[Bar]); 2] = [
        (GLM_TITLE, &glm_counts, &glm),
        (KIMI_TITLE, &kimi_counts, &kimi),
    ];
    let designs: Vec<&Design> = GLM.iter().chain(KIMI.iter()).collect();
    // One machine for every bar set side by side.
    let what = format!(
        "Part II's figure ({})",
        designs
            .iter()
            .map(|d| d.csv)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    );
    let gpu = crate::figures::one_gpu(glm.iter().chain(&kimi).map(|b| b.device.as_str()), &what)?;
    f.add("part2_gpu", gpu.clone(), SVG);
    Ok(vec![
        Generated {
            path: SVG.into(),
            content: render(&groups, &designs, &gpu),
        },
        Generated {
            path: TABLE.into(),
            content: table(&groups),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(imp: &str, rows: u64, launches: u32, cold: f64) -> BenchRow {
        BenchRow {
            launches,
            ..BenchRow::flat("ch09", "glm_x", imp, rows, cold)
        }
    }

    #[test]
    fn the_split_caps_each_part_at_what_is_left() {
        // 3 launches of 4 µs, a probe of 10 µs (6 of reads) in 20 µs: 12 + 6 + 2.
        let s = split(&row("a", 1, 3, 20.0), 4.0, 10.0);
        assert_eq!((s.launch_us, s.reads_us), (12.0, 6.0));
        assert!((s.rest_us - 2.0).abs() < 1e-12);
        // 7 launches of 4 µs in 25 µs: the launches take it all.
        let s = split(&row("a", 1, 7, 25.0), 4.0, 10.0);
        assert_eq!((s.launch_us, s.reads_us, s.rest_us), (25.0, 0.0, 0.0));
        // A probe faster than the empty launch reads nothing.
        let s = split(&row("a", 1, 1, 9.0), 4.0, 3.0);
        assert_eq!((s.launch_us, s.reads_us, s.rest_us), (4.0, 0.0, 5.0));
    }

    #[test]
    fn a_probe_belongs_to_the_row_before_it() {
        let rows = vec![
            row("a", 1, 1, 5.0),
            row("floor_probe", 1, 1, 4.0),
            row("b", 1, 1, 5.0),
            row("floor_probe", 2, 1, 4.0),
        ];
        assert_eq!(probe_after(&rows, 0).map(|r| r.cold_median_us), Some(4.0));
        assert!(probe_after(&rows, 2).is_none());
        assert!(probe_after(&rows, 3).is_none());
    }

    #[test]
    fn steps_and_lists_read_well() {
        assert_eq!(linear_step(112.0), 50.0);
        assert_eq!(linear_step(9.0), 2.0);
        assert_eq!(list(&[1, 16, 8192]), "1, 16 and 8,192");
        assert_eq!(list(&[5]), "5");
        assert!((scale_top(&[10.0, 5.0]) - 11.2).abs() < 1e-9);
        assert!((scale_top(&[5.0, 100.0, 10.0]) - 11.2).abs() < 1e-9);
        assert_eq!(scale_top(&[]), 1.0);
    }
}
