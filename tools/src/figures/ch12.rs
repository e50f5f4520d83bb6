//! Chapter 12's measured section, from `bench ch12` on two GPUs (`tools/bench/src/ch12.rs`,
//! `tools/gpu/run RES bench-x2`): `bench/results/h200x2/ch12.csv`, one line per shape, token
//! count T and implementation (`one_gpu`, `tp`, `ep`), rank 0's wall-time median, p10 and p90
//! over the samples, and the median of the time spent inside the communicator's calls.
//!
//! Made from it: `ch12-measured.md`, which the page includes whole: the figure (each of tensor
//! and expert parallelism as a share of the one-GPU layer's time, split into the collective's
//! part and the rest), one table per shape, and a generated paragraph that reads them (which of
//! the two is faster at each T, against one GPU, and the collective's share). Until the CSV is
//! committed the file says so in one marked line, no figure is written, and stderr says so: the
//! page stays valid either way.

use crate::csv::Table;
use crate::figures::facts::and_list;
use crate::figures::svg::{self, first_seen, linear_step, GRID, INK, MUTED};
use crate::figures::tables::fmt_us;
use crate::figures::{esc, read, short, title, Generated};
use std::fmt::Write as _;
use std::path::Path;

const CSV: &str = "bench/results/h200x2/ch12.csv";
const OUT: &str = "book/src/figures/ch12-measured.md";
const SVG: &str = "book/src/figures/ch12-measured.svg";
/// The command that writes the CSV, as the page's "not measured yet" line names it.
const COMMAND: &str = "tools/gpu/run RES bench-x2";

/// The three implementations `bench ch12` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// Chapter 6's layer on one GPU, all T tokens.
    OneGpu,
    /// Tensor parallelism: every rank all T tokens, a slice of I, then the all-reduce.
    Tp,
    /// Expert parallelism: each rank its share of the tokens, its experts, the all-to-alls.
    Ep,
}

impl Impl {
    fn parse(s: &str) -> Option<Impl> {
        match s {
            "one_gpu" => Some(Impl::OneGpu),
            "tp" => Some(Impl::Tp),
            "ep" => Some(Impl::Ep),
            _ => None,
        }
    }
}

/// One line of the CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub shape: String,
    pub tokens: u64,
    pub imp: Impl,
    pub world: u64,
    /// The tokens rank 0 served: T for one GPU and tensor parallelism, ⌈T / world⌉ for expert.
    pub rank_tokens: u64,
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    /// The median of the time inside the communicator's calls (0 for one GPU).
    pub collective_us: f64,
    pub samples: u64,
    pub device: String,
}

const COLUMNS: [&str; 11] = [
    "shape",
    "tokens",
    "impl",
    "world",
    "rank_tokens",
    "median_us",
    "p10_us",
    "p90_us",
    "collective_median_us",
    "samples",
    "device",
];

/// The CSV's lines, checked: every column present, numbers that are numbers, p10 ≤ median ≤
/// p90, a collective no longer than the call (each sample's collective time is part of that
/// sample's wall time, so the medians keep the order), none for one GPU, the tokens each
/// implementation gives rank 0, one world size and one device, each line once.
pub fn parse(text: &str, name: &str) -> Result<Vec<Run>, String> {
    let t = Table::parse(text, name)?;
    for c in COLUMNS {
        t.col(c)?;
    }
    let mut v: Vec<Run> = Vec::new();
    for (r, row) in t.records().zip(t.rows()) {
        let at = format!("{name}:{}", row.line);
        let count = |c: &str| {
            r(c).parse::<u64>()
                .map_err(|_| format!("{at}: `{}` is not a count ({c})", r(c)))
        };
        let us = |c: &str| {
            r(c).parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{at}: `{}` is not a time ({c})", r(c)))
        };
        let imp = Impl::parse(&r("impl"))
            .ok_or_else(|| format!("{at}: unknown impl `{}` (one_gpu, tp, ep)", r("impl")))?;
        let run = Run {
            shape: r("shape"),
            tokens: count("tokens")?,
            imp,
            world: count("world")?,
            rank_tokens: count("rank_tokens")?,
            median_us: us("median_us")?,
            p10_us: us("p10_us")?,
            p90_us: us("p90_us")?,
            collective_us: us("collective_median_us")?,
            samples: count("samples")?,
            device: r("device"),
        };
        if run.tokens == 0 || run.world < 2 || run.samples == 0 || run.median_us == 0.0 {
            return Err(format!(
                "{at}: tokens, samples and the median must be positive and the world at least 2"
            ));
        }
        if !(run.p10_us <= run.median_us && run.median_us <= run.p90_us) {
            return Err(format!(
                "{at}: p10 {} ≤ median {} ≤ p90 {} does not hold",
                run.p10_us, run.median_us, run.p90_us
            ));
        }
        if run.collective_us > run.median_us {
            return Err(format!(
                "{at}: the collective's {} µs is longer than the call's {} µs",
                run.collective_us, run.median_us
            ));
        }
        if run.imp == Impl::OneGpu && run.collective_us != 0.0 {
            return Err(format!("{at}: one GPU with a collective"));
        }
        let mine = match run.imp {
            Impl::Ep => run.tokens.div_ceil(run.world),
            _ => run.tokens,
        };
        if run.rank_tokens != mine {
            return Err(format!(
                "{at}: rank 0 served {} tokens of {}, not {mine}",
                run.rank_tokens, run.tokens
            ));
        }
        if let Some(first) = v.first() {
            if first.world != run.world || first.device != run.device {
                return Err(format!(
                    "{at}: world {} on {} after world {} on {}",
                    run.world, run.device, first.world, first.device
                ));
            }
        }
        if v.iter()
            .any(|x| x.shape == run.shape && x.tokens == run.tokens && x.imp == run.imp)
        {
            return Err(format!(
                "{at}: {} at {} tokens of {} twice",
                r("impl"),
                run.tokens,
                run.shape
            ));
        }
        v.push(run);
    }
    if v.is_empty() {
        return Err(format!("{name}: no rows"));
    }
    Ok(v)
}

/// The three implementations at one shape and T.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub shape: String,
    pub tokens: u64,
    pub one: Run,
    pub tp: Run,
    pub ep: Run,
}

impl Point {
    /// Tensor parallelism's time over one GPU's.
    pub fn tp_ratio(&self) -> f64 {
        self.tp.median_us / self.one.median_us
    }
    /// Expert parallelism's time over one GPU's.
    pub fn ep_ratio(&self) -> f64 {
        self.ep.median_us / self.one.median_us
    }
    /// The faster of the two: `"tensor"` or `"expert"` (tensor on a tie).
    pub fn faster(&self) -> &'static str {
        if self.tp.median_us <= self.ep.median_us {
            "tensor"
        } else {
            "expert"
        }
    }
}

/// The page's name of a shape with its dimensions: `Qwen3-30B-A3B (qwen3_h2048_i768_e128_k8)`.
fn shape_title(shape: &str) -> String {
    format!("{} (`{shape}`)", title(short(shape)))
}

/// The runs as points: shapes in the order they first appear, T ascending; every shape and T
/// must have all three implementations.
pub fn points(runs: &[Run]) -> Result<Vec<Point>, String> {
    let mut keys: Vec<(String, u64)> = Vec::new();
    for r in runs {
        if !keys.iter().any(|(s, t)| *s == r.shape && *t == r.tokens) {
            keys.push((r.shape.clone(), r.tokens));
        }
    }
    let order = first_seen(keys.iter().map(|(s, _)| s.as_str()));
    keys.sort_by_key(|(s, t)| (order.iter().position(|o| o == s), *t));
    keys.into_iter()
        .map(|(shape, tokens)| {
            let get = |imp: Impl| {
                runs.iter()
                    .find(|r| r.shape == shape && r.tokens == tokens && r.imp == imp)
                    .cloned()
                    .ok_or_else(|| format!("{CSV}: no {imp:?} at {tokens} tokens of {shape}"))
            };
            Ok(Point {
                one: get(Impl::OneGpu)?,
                tp: get(Impl::Tp)?,
                ep: get(Impl::Ep)?,
                shape,
                tokens,
            })
        })
        .collect()
}

/// A share in percent, no decimals (under 1%: `<1`).
fn pct(part: f64, whole: f64) -> String {
    let p = 100.0 * part / whole;
    if p > 0.0 && p < 1.0 {
        "<1".into()
    } else {
        format!("{p:.0}")
    }
}

/// One table per shape: T, the three times, each collective with its share, the two ratios.
fn tables(points: &[Point]) -> String {
    let mut s = String::new();
    let mut last = "";
    for p in points {
        if p.shape != last {
            if !last.is_empty() {
                s.push('\n');
            }
            let _ = writeln!(
                s,
                "**{}**\n\n| T | one GPU, µs | tensor, µs | its collective, µs (share) | \
                 expert, µs | its collective, µs (share) | tensor ÷ one GPU | expert ÷ one GPU |\n\
                 |---:|---:|---:|---:|---:|---:|---:|---:|",
                shape_title(&p.shape)
            );
            last = &p.shape;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} ({}%) | {} | {} ({}%) | {:.2} | {:.2} |",
            p.tokens,
            fmt_us(p.one.median_us),
            fmt_us(p.tp.median_us),
            fmt_us(p.tp.collective_us),
            pct(p.tp.collective_us, p.tp.median_us),
            fmt_us(p.ep.median_us),
            fmt_us(p.ep.collective_us),
            pct(p.ep.collective_us, p.ep.median_us),
            p.tp_ratio(),
            p.ep_ratio(),
        );
    }
    s
}

/// `1, 8 and 64`.
fn list(t: &[u64]) -> String {
    and_list(&t.iter().map(u64::to_string).collect::<Vec<_>>())
}

/// The paragraph under the tables, one sentence group per shape: where each design is faster,
/// the range of each over one GPU, and the range of each collective's share.
fn paragraph(points: &[Point]) -> String {
    let mut s = String::new();
    for shape in first_seen(points.iter().map(|p| p.shape.as_str())) {
        let mine: Vec<&Point> = points.iter().filter(|p| p.shape == shape).collect();
        let at = |design: &str| -> Vec<u64> {
            mine.iter()
                .filter(|p| p.faster() == design)
                .map(|p| p.tokens)
                .collect()
        };
        let (tp_at, ep_at) = (at("tensor"), at("expert"));
        let faster = match (tp_at.is_empty(), ep_at.is_empty()) {
            (false, true) => "tensor parallelism is the faster at every T".to_string(),
            (true, false) => "expert parallelism is the faster at every T".to_string(),
            _ => format!(
                "tensor parallelism is the faster at T = {}, expert parallelism at T = {}",
                list(&tp_at),
                list(&ep_at)
            ),
        };
        let range = |f: &dyn Fn(&Point) -> f64| {
            let v: Vec<f64> = mine.iter().map(|p| f(p)).collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        };
        let (tlo, thi) = range(&|p| p.tp_ratio());
        let (elo, ehi) = range(&|p| p.ep_ratio());
        let (tslo, tshi) = range(&|p| p.tp.collective_us / p.tp.median_us);
        let (eslo, eshi) = range(&|p| p.ep.collective_us / p.ep.median_us);
        let _ = write!(
            s,
            "{}: {faster}. Against the one-GPU layer, tensor parallelism takes {tlo:.2}–{thi:.2}× \
             its time and expert parallelism {elo:.2}–{ehi:.2}×; the collective is {}–{}% of \
             tensor parallelism's call and {}–{}% of expert parallelism's. ",
            title(short(&shape)),
            pct(tslo, 1.0),
            pct(tshi, 1.0),
            pct(eslo, 1.0),
            pct(eshi, 1.0),
        );
    }
    s.truncate(s.trim_end().len());
    s.push('\n');
    s
}

// ---------------------------------------------------------------------------------------------
// The figure

/// Tensor and expert parallelism's colors (Okabe–Ito) and legend names.
const DESIGNS: [(&str, &str, &str); 2] = [
    ("tp", "#0072b2", "tensor parallelism"),
    ("ep", "#d55e00", "expert parallelism"),
];
const PANEL_W: f64 = 380.0;
const PANEL_H: f64 = 240.0;
const LEFT: f64 = 56.0;
const GAP: f64 = 34.0;
const BAR_W: f64 = 22.0;

/// One panel per shape: along T, a bar for each design, its height the design's time over the
/// one-GPU layer's, the part spent in the collective drawn solid and the rest light; a line at 1
/// (one GPU) and one at 1 / world (the work split evenly, nothing spent moving it).
fn render(points: &[Point]) -> String {
    let shapes = first_seen(points.iter().map(|p| p.shape.as_str()));
    let n = shapes.len() as f64;
    let width = n * (LEFT + PANEL_W) + (n - 1.0) * GAP + 24.0;
    let top = 150.0;
    let height = top + PANEL_H + 60.0;
    let world = points[0].one.world;
    let device = &points[0].one.device;
    let max = points
        .iter()
        .flat_map(|p| [p.tp_ratio(), p.ep_ratio()])
        .fold(1.0, f64::max)
        * 1.12;
    let step = linear_step(max);
    let ytop = (max / step).ceil() * step;
    let mut s = String::new();
    svg::open(
        &mut s,
        width,
        height,
        &format!("The layer on {world} GPUs: each design's time over the one-GPU layer's (ch12, {device})"),
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="46" fill="{MUTED}">Rank 0's wall-time median per call (no graph, weights warm); solid: inside the collective, light: the rest.</text>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="64" fill="{MUTED}">Below 1: faster than one GPU. The dashed line at 1/{world}: the work split evenly with nothing spent moving it.</text>"#
    );
    for (k, (_, color, name)) in DESIGNS.iter().enumerate() {
        let y = 88.0 + 20.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<rect x="16" y="{:.1}" width="14" height="12" fill="{color}" fill-opacity="0.35"/><rect x="30" y="{:.1}" width="14" height="12" fill="{color}"/><text x="52" y="{:.1}">{name}: the rest, then the collective</text>"#,
            y - 10.0,
            y - 10.0,
            y
        );
    }
    for (i, shape) in shapes.iter().enumerate() {
        let x0 = i as f64 * (LEFT + PANEL_W + GAP) + LEFT;
        let mine: Vec<&Point> = points.iter().filter(|p| &p.shape == shape).collect();
        let y = |v: f64| top + PANEL_H * (1.0 - v / ytop);
        let _ = writeln!(
            s,
            r#"<g data-shape="{}"><text x="{x0:.1}" y="{:.1}" font-weight="600">{}</text>"#,
            esc(shape),
            top - 14.0,
            esc(&format!("{} ({shape})", title(short(shape))))
        );
        let mut v = 0.0;
        while v <= ytop + 1e-9 {
            let _ = writeln!(
                s,
                r#"<line x1="{x0:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{GRID}"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                y(v),
                x0 + PANEL_W,
                y(v),
                x0 - 6.0,
                y(v) + 4.0,
                format_tick(v)
            );
            v += step;
        }
        for (level, dash) in [
            (1.0, ""),
            (1.0 / world as f64, r#" stroke-dasharray="5 4""#),
        ] {
            let _ = writeln!(
                s,
                r#"<line class="level" x1="{x0:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{INK}"{dash}/>"#,
                y(level),
                x0 + PANEL_W,
                y(level)
            );
        }
        let slot = PANEL_W / mine.len() as f64;
        for (j, p) in mine.iter().enumerate() {
            let cx = x0 + slot * (j as f64 + 0.5);
            for (k, (tag, color, _)) in DESIGNS.iter().enumerate() {
                let run = if k == 0 { &p.tp } else { &p.ep };
                let ratio = run.median_us / p.one.median_us;
                let coll = run.collective_us / p.one.median_us;
                let bx = cx - BAR_W - 1.0 + k as f64 * (BAR_W + 2.0);
                let _ = writeln!(
                    s,
                    r#"<g class="bar" data-impl="{tag}" data-tokens="{}" data-ratio="{ratio:.4}"><rect x="{bx:.1}" y="{:.1}" width="{BAR_W}" height="{:.1}" fill="{color}" fill-opacity="0.35"/><rect x="{bx:.1}" y="{:.1}" width="{BAR_W}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{ratio:.2}</text></g>"#,
                    p.tokens,
                    y(ratio - coll),
                    PANEL_H * (ratio - coll) / ytop,
                    y(ratio),
                    PANEL_H * coll / ytop,
                    bx + BAR_W / 2.0,
                    y(ratio) - 4.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                top + PANEL_H + 18.0,
                p.tokens
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{MUTED}">tokens served (T)</text></g>"#,
            x0 + PANEL_W / 2.0,
            top + PANEL_H + 40.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A tick of the ratio axis: `0`, `0.5`, `1`, `1.5`.
fn format_tick(v: f64) -> String {
    let r = (v * 1000.0).round() / 1000.0;
    format!("{r}")
}

/// `ch12-measured.md` (and, once measured, `ch12-measured.svg`) from the CSV; until the CSV is
/// committed, the page's file is one marked line.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    if !root.join(CSV).exists() {
        return Ok(vec![super::not_measured_yet(
            OUT,
            CSV,
            "chapter 12's measured section",
            &format!(
                "On a machine with two GPUs, `{COMMAND}` runs the NCCL tests and `bench ch12`, and \
                 `tools/plot` makes this section's figure and tables from the CSV it writes."
            ),
        )]);
    }
    let runs = parse(&read(root, CSV)?, CSV)?;
    let points = points(&runs)?;
    let first = &points[0].one;
    let mut md = format!(
        "![Tensor and expert parallelism on {} GPUs, each as a share of the one-GPU layer's time \
         at each T, split into the collective and the rest](figures/ch12-measured.svg)\n\n\
         Rank 0's wall-time median over {} calls per line, on {} × {}:\n\n",
        first.world,
        first.samples,
        first.world,
        first.device.replace('_', " ")
    );
    md += &tables(&points);
    md.push('\n');
    md += &paragraph(&points);
    Ok(vec![
        Generated {
            path: OUT.into(),
            content: md,
        },
        Generated {
            path: SVG.into(),
            content: render(&points),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "shape,tokens,impl,world,rank_tokens,median_us,p10_us,p90_us,collective_median_us,samples,device\n";

    /// Per T: (T, one GPU, (tensor, its collective), (expert, its collective)), µs.
    type Line = (u64, f64, (f64, f64), (f64, f64));

    /// A CSV of one shape, its lines as [`Line`]s.
    fn csv(shape: &str, lines: &[Line]) -> String {
        let mut s = String::from(HEAD);
        for &(t, one, (tp, tc), (ep, ec)) in lines {
            let _ = writeln!(
                s,
                "{shape},{t},one_gpu,2,{t},{one},{one},{one},0,30,NVIDIA_H200"
            );
            let _ = writeln!(s, "{shape},{t},tp,2,{t},{tp},{tp},{tp},{tc},30,NVIDIA_H200");
            let _ = writeln!(
                s,
                "{shape},{t},ep,2,{},{ep},{ep},{ep},{ec},30,NVIDIA_H200",
                t.div_ceil(2)
            );
        }
        s
    }

    const QWEN: &str = "qwen3_h2048_i768_e128_k8";

    #[test]
    fn the_tables_the_reading_and_the_bars_follow_a_hand_made_csv() {
        // T out of order on purpose; tensor faster at 1 and 8, expert at 4,096.
        let text = csv(
            QWEN,
            &[
                (4096, 1000.0, (700.0, 100.0), (600.0, 300.0)),
                (1, 40.0, (30.0, 10.0), (50.0, 20.0)),
                (8, 100.0, (80.0, 20.0), (90.0, 30.0)),
            ],
        );
        let points = points(&parse(&text, "c.csv").unwrap()).unwrap();
        let t: Vec<u64> = points.iter().map(|p| p.tokens).collect();
        assert_eq!(t, [1, 8, 4096]);
        let md = tables(&points);
        assert!(
            md.contains("**Qwen3-30B-A3B (`qwen3_h2048_i768_e128_k8`)**"),
            "{md}"
        );
        // 30 / 40 = 0.75, 50 / 40 = 1.25; the collective 10 of 30 µs (33%).
        assert!(
            md.contains("| 1 | 40.0 | 30.0 | 10.0 (33%) | 50.0 | 20.0 (40%) | 0.75 | 1.25 |"),
            "{md}"
        );
        assert!(
            md.contains("| 4096 | 1000 | 700 | 100 (14%) | 600 | 300 (50%) | 0.70 | 0.60 |"),
            "{md}"
        );
        let p = paragraph(&points);
        assert!(
            p.contains(
                "tensor parallelism is the faster at T = 1 and 8, expert parallelism at T = 4096"
            ),
            "{p}"
        );
        // Ratios: tensor 0.75, 0.80, 0.70; expert 1.25, 0.90, 0.60. Shares: tensor 33%, 25%,
        // 14%; expert 40%, 33%, 50%.
        assert!(p.contains("tensor parallelism takes 0.70–0.80×"), "{p}");
        assert!(p.contains("expert parallelism 0.60–1.25×"), "{p}");
        assert!(p.contains("the collective is 14–33% of tensor"), "{p}");
        assert!(p.contains("and 33–50% of expert"), "{p}");
        // The figure: six bars, each carrying its ratio; the solid part is the collective's.
        let svg = render(&points);
        assert_eq!(svg.matches(r#"class="bar""#).count(), 6, "{svg}");
        assert!(
            svg.contains(r#"data-impl="ep" data-tokens="1" data-ratio="1.2500""#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"data-impl="tp" data-tokens="4096" data-ratio="0.7000""#),
            "{svg}"
        );
        assert_eq!(svg.matches(r#"class="level""#).count(), 2, "{svg}");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn one_design_faster_everywhere_reads_so() {
        let text = csv(
            QWEN,
            &[
                (1, 40.0, (30.0, 5.0), (50.0, 20.0)),
                (8, 90.0, (60.0, 0.2), (70.0, 9.0)),
            ],
        );
        let p = paragraph(&points(&parse(&text, "c.csv").unwrap()).unwrap());
        assert!(
            p.contains("tensor parallelism is the faster at every T"),
            "{p}"
        );
        // 0.2 of 60 µs is under 1%.
        assert!(p.contains("the collective is <1–17% of tensor"), "{p}");
    }

    #[test]
    fn bad_csvs_are_errors() {
        let ok = "q,8,tp,2,8,10,9,11,2,30,d\n";
        let bad = [
            (
                format!("{HEAD}q,8,xx,2,8,10,9,11,2,30,d\n"),
                "unknown impl `xx`",
            ),
            (
                format!("{HEAD}q,8,tp,2,8,10,11,12,2,30,d\n"),
                "p10 11 ≤ median 10",
            ),
            (
                format!("{HEAD}q,8,tp,2,8,10,9,11,12,30,d\n"),
                "longer than the call",
            ),
            (
                format!("{HEAD}q,8,one_gpu,2,8,10,9,11,1,30,d\n"),
                "one GPU with a collective",
            ),
            (
                format!("{HEAD}q,8,ep,2,8,10,9,11,2,30,d\n"),
                "served 8 tokens of 8, not 4",
            ),
            (
                format!("{HEAD}q,8,tp,1,8,10,9,11,2,30,d\n"),
                "world at least 2",
            ),
            (
                format!("{HEAD}q,8,tp,2,8,x,9,11,2,30,d\n"),
                "`x` is not a time",
            ),
            (format!("{HEAD}{ok}{ok}"), "tp at 8 tokens of q twice"),
            (
                format!("{HEAD}{ok}q,1,tp,2,1,10,9,11,2,30,e\n"),
                "after world 2 on d",
            ),
            ("shape,tokens\nq,8\n".to_string(), "no column `impl`"),
            (HEAD.to_string(), "no rows"),
        ];
        for (text, want) in bad {
            let e = parse(&text, "c.csv").unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        // A T without all three implementations.
        let e = points(&parse(&format!("{HEAD}{ok}"), "c.csv").unwrap()).unwrap_err();
        assert!(e.contains("no OneGpu at 8 tokens of q"), "{e}");
    }

    #[test]
    fn without_the_csv_the_file_says_not_measured_yet_and_there_is_no_figure() {
        let root = std::env::temp_dir().join(format!("moe-ch12-measured-{}", std::process::id()));
        let g = generate(&root).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].path, OUT);
        assert!(
            g[0].content.starts_with("*Not measured yet:"),
            "{}",
            g[0].content
        );
        // With it (written to a temporary folder, never the tree): the figure, then the tables.
        std::fs::create_dir_all(root.join("bench/results/h200x2")).unwrap();
        std::fs::write(
            root.join(CSV),
            csv(QWEN, &[(1, 40.0, (30.0, 10.0), (50.0, 20.0))]),
        )
        .unwrap();
        let g = generate(&root);
        std::fs::remove_dir_all(&root).unwrap();
        let g = g.unwrap();
        assert_eq!(g.len(), 2);
        assert!(
            g[0].content.starts_with("![Tensor and expert"),
            "{}",
            g[0].content
        );
        assert!(
            g[0].content
                .contains("over 30 calls per line, on 2 × NVIDIA H200"),
            "{}",
            g[0].content
        );
        assert!(g[0].content.contains("| 1 | 40.0 |"), "{}", g[0].content);
        assert_eq!(g[1].path, SVG);
    }
}
