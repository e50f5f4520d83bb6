//! Chapter 10's generated files, from the CPU run `cargo run -p ch10-precision --bin ch10-flips`
//! (`bench/results/cpu/ch10_flips.csv`: flips and the median rank-key error per shape, bias and
//! arithmetic; `ch10_cases.csv`: per shape and bias, the sizes, the bias range and its bf16
//! values, the median gap, the two fp32 orders; `ch10_gaps.csv`: the fp64 router's gap at the
//! cut, a tenth of a decade per bin; `ch10_flip_output.csv`: one flip through chapter 2's layer,
//! a line per token): the gap figure (the router article's Figure 5 in shape), the flip-rate
//! table, the key-error table, the layer table, the facts file, and the page's example and tree.

mod gpu;

use super::facts::{thousands, Facts};
use super::svg::{self, GRID, INK, MUTED};
use super::{esc, example_and_tree, read, short, Generated};
use crate::csv::Table;
use std::fmt::Write as _;
use std::path::Path;

const FLIPS: &str = "bench/results/cpu/ch10_flips.csv";
const CASES: &str = "bench/results/cpu/ch10_cases.csv";
const GAPS: &str = "bench/results/cpu/ch10_gaps.csv";
const OUTPUT: &str = "bench/results/cpu/ch10_flip_output.csv";
const SVG: &str = "book/src/figures/ch10-gap.svg";
const FLIP_TABLE: &str = "book/src/figures/ch10-flips-table.md";
const ERR_TABLE: &str = "book/src/figures/ch10-key-error-table.md";
const OUTPUT_TABLE: &str = "book/src/figures/ch10-output-table.md";
const FACTS: &str = "book/src/figures/ch10-facts.md";

/// The arithmetics in table order, with a reader's label and a color (Okabe–Ito).
const ARITH: [(&str, &str, &str); 5] = [
    ("fp32", "fp32 logits, in order", "#0072b2"),
    ("fp32_tiny_gemm", "fp32 logits, tiny GEMM order", "#56b4e9"),
    ("bf16_logits", "bf16 logits", "#009e73"),
    ("bf16_bias", "bf16 bias", "#d55e00"),
    ("bf16_both", "bf16 logits and bias", "#cc79a7"),
];

/// A shape's title from its short name.
fn shape_title(s: &str) -> &str {
    match s {
        "glm" => "GLM-like",
        "qwen3" => "Qwen3-30B-A3B",
        "deepseek" => "DeepSeek-V3",
        other => other,
    }
}

/// An arithmetic's short column head in the tables.
fn arith_head(a: &str) -> &str {
    match a {
        "fp32" => "fp32",
        "fp32_tiny_gemm" => "fp32, tiny GEMM order",
        "bf16_logits" => "bf16 logits",
        "bf16_bias" => "bf16 bias",
        "bf16_both" => "both bf16",
        other => other,
    }
}

/// A bias spread's short name in the tables.
fn bias_short(b: &str) -> &str {
    match b {
        "glm53" => "GLM-5.3-Flash's",
        "kimi_k3" => "Kimi K3's",
        other => other,
    }
}

/// A bias spread's title from its name.
fn bias_title(b: &str) -> &str {
    match b {
        "glm53" => "GLM-5.3-Flash's bias range",
        "kimi_k3" => "Kimi K3's bias range",
        "none" => "no bias (softmax)",
        other => other,
    }
}

/// One line of `ch10_flips.csv`.
#[derive(Clone, Debug)]
pub struct Flip {
    pub shape: String,
    pub bias: String,
    pub arithmetic: String,
    pub rows: u64,
    pub flips: u64,
    pub key_err: f64,
    /// The mean share of a row's weight on experts the fp64 router did not select.
    pub weight_outside: f64,
}

/// One line of `ch10_cases.csv` (what the page uses of it).
#[derive(Clone, Debug)]
pub struct Case {
    pub shape: String,
    pub hidden: u64,
    pub experts: u64,
    pub k: u64,
    pub bias: String,
    pub distinct: String,
    pub rows: u64,
    pub gap_median: f64,
    pub orders_differ: u64,
    pub max_order_diff: f64,
    pub err_seq: f64,
    pub err_tiny: f64,
}

fn num<T: std::str::FromStr>(name: &str, line: usize, col: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{name}:{line}: `{v}` in column `{col}` is not a number"))
}

/// Parses `ch10_flips.csv`: every arithmetic known, flips at most the rows.
pub fn parse_flips(text: &str, name: &str) -> Result<Vec<Flip>, String> {
    let t = Table::parse(text, name)?;
    let mut out = Vec::new();
    for (row, r) in t.rows().iter().zip(t.records()) {
        let l = row.line;
        let f = Flip {
            shape: r("shape"),
            bias: r("bias"),
            arithmetic: r("arithmetic"),
            rows: num(name, l, "rows", &r("rows"))?,
            flips: num(name, l, "flips", &r("flips"))?,
            key_err: num(name, l, "key_err_median", &r("key_err_median"))?,
            weight_outside: num(name, l, "weight_outside", &r("weight_outside"))?,
        };
        if !ARITH.iter().any(|a| a.0 == f.arithmetic) {
            return Err(format!("{name}:{l}: unknown arithmetic `{}`", f.arithmetic));
        }
        if f.flips > f.rows || f.rows == 0 {
            return Err(format!("{name}:{l}: {} flips of {} rows", f.flips, f.rows));
        }
        out.push(f);
    }
    Ok(out)
}

/// Parses `ch10_cases.csv`.
pub fn parse_cases(text: &str, name: &str) -> Result<Vec<Case>, String> {
    let t = Table::parse(text, name)?;
    let mut out = Vec::new();
    for (row, r) in t.rows().iter().zip(t.records()) {
        let l = row.line;
        out.push(Case {
            shape: r("shape"),
            hidden: num(name, l, "hidden", &r("hidden"))?,
            experts: num(name, l, "experts", &r("experts"))?,
            k: num(name, l, "k", &r("k"))?,
            bias: r("bias"),
            distinct: r("bias_distinct_bf16"),
            rows: num(name, l, "rows", &r("rows"))?,
            gap_median: num(name, l, "gap_median", &r("gap_median"))?,
            orders_differ: num(name, l, "orders_sets_differ", &r("orders_sets_differ"))?,
            max_order_diff: num(
                name,
                l,
                "max_logit_diff_orders",
                &r("max_logit_diff_orders"),
            )?,
            err_seq: num(
                name,
                l,
                "max_logit_err_sequential",
                &r("max_logit_err_sequential"),
            )?,
            err_tiny: num(name, l, "max_logit_err_tiny", &r("max_logit_err_tiny"))?,
        });
    }
    if out.is_empty() {
        return Err(format!("{name}: no cases"));
    }
    Ok(out)
}

/// `(shape, bias, lo, hi, rows)` of `ch10_gaps.csv`.
type GapBin = (String, String, f64, f64, u64);

fn parse_gaps(text: &str, name: &str) -> Result<Vec<GapBin>, String> {
    let t = Table::parse(text, name)?;
    let mut out = Vec::new();
    for (row, r) in t.rows().iter().zip(t.records()) {
        let l = row.line;
        out.push((
            r("shape"),
            r("bias"),
            num(name, l, "lo", &r("lo"))?,
            num(name, l, "hi", &r("hi"))?,
            num(name, l, "rows", &r("rows"))?,
        ));
    }
    Ok(out)
}

/// `(gap, swapped_weight, flip_rel_err, bf16_rel_err)` per token, and the layer's sizes
/// `(hidden, intermediate, experts, k)`.
type Tokens = (Vec<[f64; 4]>, [String; 4]);

fn parse_output(text: &str, name: &str) -> Result<Tokens, String> {
    let t = Table::parse(text, name)?;
    let mut v = Vec::new();
    let mut sizes: Option<[String; 4]> = None;
    for (row, r) in t.rows().iter().zip(t.records()) {
        let l = row.line;
        v.push([
            num(name, l, "gap", &r("gap"))?,
            num(name, l, "swapped_weight", &r("swapped_weight"))?,
            num(name, l, "flip_rel_err", &r("flip_rel_err"))?,
            num(name, l, "bf16_rel_err", &r("bf16_rel_err"))?,
        ]);
        sizes.get_or_insert([r("hidden"), r("intermediate"), r("experts"), r("k")]);
    }
    let sizes = sizes.ok_or(format!("{name}: no tokens"))?;
    Ok((v, sizes))
}

/// A share of rows in percent, written for reading: `65`, `1.9`, `0.002`, `0`.
pub fn pct(flips: u64, rows: u64) -> String {
    share_pct(flips as f64 / rows as f64)
}

/// A share (0 to 1) in percent, written as [`pct`] writes it.
pub fn share_pct(share: f64) -> String {
    let p = 100.0 * share;
    if share == 0.0 {
        "0".into()
    } else if p >= 10.0 {
        format!("{p:.0}")
    } else if p >= 1.0 {
        format!("{p:.1}")
    } else if p >= 0.1 {
        format!("{p:.2}")
    } else {
        format!("{p:.3}")
    }
}

/// A small value with two significant digits: `0.00015`, `2.4e-7` below a ten-thousandth.
pub fn small(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 1e-4 {
        let digits = (1 - v.log10().floor() as i32).max(0) as usize;
        format!("{v:.digits$}")
    } else {
        let s = format!("{v:.1e}");
        s.replace("e-", "e−")
    }
}

/// The median of `v` (the upper middle value for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The flip-rate table: one row per shape and bias, one column per arithmetic, cells
/// `share % (rows)`.
pub fn flip_table(cases: &[Case], flips: &[Flip]) -> String {
    let mut s = String::from("| shape | bias range | bf16 biases |");
    for a in ARITH {
        let _ = write!(s, " {} |", arith_head(a.0));
    }
    s.push_str("\n|---|---|---:|");
    for _ in ARITH {
        s.push_str("---:|");
    }
    s.push('\n');
    for c in cases {
        let distinct = if c.distinct.is_empty() {
            "–".to_string()
        } else {
            c.distinct.clone()
        };
        let _ = write!(
            s,
            "| {} | {} | {distinct} |",
            shape_title(short(&c.shape)),
            bias_short(&c.bias)
        );
        for a in ARITH {
            match flips
                .iter()
                .find(|f| f.shape == c.shape && f.bias == c.bias && f.arithmetic == a.0)
            {
                Some(f) => {
                    let _ = write!(s, " {}% ({}) |", pct(f.flips, f.rows), thousands(f.flips));
                }
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    s
}

/// The key-error table: the median gap at the cut beside each arithmetic's median rank-key
/// error.
pub fn error_table(cases: &[Case], flips: &[Flip]) -> String {
    let mut s = String::from("| shape | bias range | median gap at the cut |");
    for a in ARITH {
        let _ = write!(s, " {} |", arith_head(a.0));
    }
    s.push_str("\n|---|---|---:|");
    for _ in ARITH {
        s.push_str("---:|");
    }
    s.push('\n');
    for c in cases {
        let _ = write!(
            s,
            "| {} | {} | {} |",
            shape_title(short(&c.shape)),
            bias_short(&c.bias),
            small(c.gap_median)
        );
        for a in ARITH {
            match flips
                .iter()
                .find(|f| f.shape == c.shape && f.bias == c.bias && f.arithmetic == a.0)
            {
                Some(f) => {
                    let _ = write!(s, " {} |", small(f.key_err));
                }
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    s
}

/// The gap figure: one panel per shape and bias, the fp64 router's gap at the cut as a
/// histogram over a log axis, a solid line at its median, and a dashed line at each
/// arithmetic's median rank-key error. Bars carry `class="gap"`, lines `class="key-err"` with
/// `data-arithmetic`, or `class="gap-median"`.
pub fn gap_svg(cases: &[Case], gaps: &[GapBin], flips: &[Flip]) -> String {
    const BAR: &str = "#b8c4d0";
    let (cols, pw, ph, left, gap, right) = (3usize, 300.0, 170.0, 30.0, 30.0, 20.0);
    let (xlo, xhi) = (-10.0f64, 1.0f64);
    let n = cases.len();
    let ncols = cols.min(n.max(1));
    let width = ncols as f64 * (left + pw) + (ncols - 1) as f64 * gap + right;
    let legend_y = 84.0;
    let top = legend_y + 44.0;
    let row_h = 34.0 + ph + 46.0;
    let height = top + n.div_ceil(cols) as f64 * row_h + 8.0;
    let mut s = String::new();
    svg::open(
        &mut s,
        width,
        height,
        "The gap at the cut against the rounding error of the rank key",
    );
    for (i, line) in [
        "Bars: the fp64 router's gap at the cut over the rows (synthetic rows; a tenth of a decade per bar, log axis). Solid line: its median.",
        "Dashed lines: the median |rank key − fp64 rank key| of each arithmetic. An error right of most of the bars flips most rows.",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            s,
            r#"<text x="16" y="{}" fill="{MUTED}">{}</text>"#,
            46 + 18 * i,
            esc(line)
        );
    }
    for (i, a) in ARITH.iter().enumerate() {
        let (lx, ly) = (
            16.0 + 300.0 * (i % 3) as f64,
            legend_y + 20.0 * (i / 3) as f64,
        );
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2.5" stroke-dasharray="5 3"/>"#,
            lx + 26.0,
            a.2
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 32.0,
            ly + 4.5,
            esc(a.1)
        );
    }
    for (p, c) in cases.iter().enumerate() {
        let (r, col) = (p / cols, p % cols);
        let px = col as f64 * (left + pw + gap) + left;
        let py = top + r as f64 * row_h + 34.0;
        let x = |v: f64| px + (v.log10().clamp(xlo, xhi) - xlo) / (xhi - xlo) * pw;
        let bins: Vec<&GapBin> = gaps
            .iter()
            .filter(|g| g.0 == c.shape && g.1 == c.bias && g.2 > 0.0)
            .collect();
        let most = bins.iter().map(|b| b.4).max().unwrap_or(1).max(1) as f64;
        let _ = writeln!(
            s,
            r#"<g class="panel" data-shape="{}" data-bias="{}">"#,
            c.shape, c.bias
        );
        let _ = writeln!(
            s,
            r#"<text x="{px}" y="{}" font-size="14" font-weight="600">{}, {}</text>"#,
            py - 20.0,
            esc(shape_title(short(&c.shape))),
            esc(bias_title(&c.bias))
        );
        let _ = writeln!(
            s,
            r#"<text x="{px}" y="{}" fill="{MUTED}">H {}, {} experts, k = {}; {} rows</text>"#,
            py - 5.0,
            c.hidden,
            c.experts,
            c.k,
            thousands(c.rows)
        );
        for d in (xlo as i32)..=(xhi as i32) {
            let xx = px + (d as f64 - xlo) / (xhi - xlo) * pw;
            let _ = writeln!(
                s,
                r#"<line x1="{xx:.1}" y1="{py}" x2="{xx:.1}" y2="{:.1}" stroke="{GRID}"/>"#,
                py + ph
            );
            if d.rem_euclid(2) == 0 {
                let _ = writeln!(
                    s,
                    r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="{MUTED}" font-size="11">1e{d}</text>"#,
                    py + ph + 15.0
                );
            }
        }
        for b in &bins {
            let (x0, x1) = (x(b.2), x(b.3));
            let hgt = b.4 as f64 / most * (ph - 6.0);
            let _ = writeln!(
                s,
                r#"<rect class="gap" data-lo="{:e}" data-rows="{}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{hgt:.1}" fill="{BAR}"/>"#,
                b.2,
                b.4,
                py + ph - hgt,
                (x1 - x0 - 0.3).max(0.3)
            );
        }
        let gm = x(c.gap_median);
        let _ = writeln!(
            s,
            r#"<line class="gap-median" x1="{gm:.1}" y1="{py}" x2="{gm:.1}" y2="{:.1}" stroke="{INK}" stroke-width="2"/>"#,
            py + ph
        );
        for a in ARITH {
            if let Some(f) = flips
                .iter()
                .find(|f| f.shape == c.shape && f.bias == c.bias && f.arithmetic == a.0)
            {
                let xx = x(f.key_err);
                let _ = writeln!(
                    s,
                    r#"<line class="key-err" data-arithmetic="{}" x1="{xx:.1}" y1="{py}" x2="{xx:.1}" y2="{:.1}" stroke="{}" stroke-width="2.5" stroke-dasharray="5 3"/>"#,
                    a.0,
                    py + ph,
                    a.2
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="{MUTED}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">gap at the cut, and rank-key error (log)</text>"#,
            px + pw / 2.0,
            py + ph + 32.0
        );
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

/// Chapter 10's generated files.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let flips = parse_flips(&read(root, FLIPS)?, FLIPS)?;
    let cases = parse_cases(&read(root, CASES)?, CASES)?;
    let gaps = parse_gaps(&read(root, GAPS)?, GAPS)?;
    let (tokens, sizes) = parse_output(&read(root, OUTPUT)?, OUTPUT)?;
    for c in &cases {
        if !flips.iter().any(|f| f.shape == c.shape && f.bias == c.bias) {
            return Err(format!(
                "{FLIPS}: no flips of {} with bias {}",
                c.shape, c.bias
            ));
        }
    }
    let mut f = Facts::default();
    let rows = cases[0].rows;
    if cases.iter().any(|c| c.rows != rows) || flips.iter().any(|x| x.rows != rows) {
        return Err(format!("{CASES}: the shapes ran different numbers of rows"));
    }
    f.add("rows", thousands(rows), CASES);
    for c in &cases {
        let s = format!("{}_{}", short(&c.shape), c.bias);
        f.add(format!("{s}_gap_median"), small(c.gap_median), CASES);
        if !c.distinct.is_empty() {
            f.add(format!("{s}_distinct"), c.distinct.clone(), CASES);
        }
        f.add(
            format!("{s}_orders_differ"),
            thousands(c.orders_differ),
            CASES,
        );
    }
    for c in cases
        .iter()
        .filter(|c| c.bias == cases[0].bias || c.bias == "none")
    {
        let s = short(&c.shape);
        if f.get(&format!("{s}_max_order_diff")).is_none() {
            f.add(
                format!("{s}_max_order_diff"),
                small(c.max_order_diff),
                CASES,
            );
            f.add(format!("{s}_err_sequential"), small(c.err_seq), CASES);
            f.add(format!("{s}_err_tiny"), small(c.err_tiny), CASES);
        }
    }
    for x in &flips {
        let s = format!("{}_{}_{}", short(&x.shape), x.bias, x.arithmetic);
        f.add(format!("{s}_pct"), pct(x.flips, x.rows), FLIPS);
        f.add(format!("{s}_flips"), thousands(x.flips), FLIPS);
        f.add(format!("{s}_key_err"), small(x.key_err), FLIPS);
        f.add(
            format!("{s}_weight_pct"),
            share_pct(x.weight_outside),
            FLIPS,
        );
    }
    let col = |i: usize| tokens.iter().map(|t| t[i]).collect::<Vec<f64>>();
    let (flip_m, bf16_m) = (median(col(2)), median(col(3)));
    f.add("out_tokens", tokens.len().to_string(), OUTPUT);
    for (name, v) in ["hidden", "intermediate", "experts", "k"]
        .iter()
        .zip(&sizes)
    {
        f.add(format!("out_{name}"), v.clone(), OUTPUT);
    }
    f.add("out_flip_median", format!("{flip_m:.2}"), OUTPUT);
    f.add("out_bf16_median", small(bf16_m), OUTPUT);
    f.add("out_ratio", format!("{:.0}", flip_m / bf16_m), OUTPUT);
    f.add(
        "out_swapped_median",
        format!("{:.3}", median(col(1))),
        OUTPUT,
    );
    let smallest = col(2).into_iter().fold(f64::INFINITY, f64::min);
    f.add("out_flip_min", format!("{smallest:.3}"), OUTPUT);
    let largest_bf16 = col(3).into_iter().fold(0.0, f64::max);
    f.add("out_bf16_max", small(largest_bf16), OUTPUT);

    let mut out_table =
        String::from("| per token | median | smallest | largest |\n|---|---:|---:|---:|\n");
    for (label, i) in [
        ("relative error, one expert swapped", 2),
        ("relative error, chapter 2's bf16 layer", 3),
        ("weight of the swapped-out expert", 1),
        ("gap at the cut", 0),
    ] {
        let v = col(i);
        let (lo, hi) = (
            v.iter().cloned().fold(f64::INFINITY, f64::min),
            v.iter().cloned().fold(0.0, f64::max),
        );
        let _ = writeln!(
            out_table,
            "| {label} | {} | {} | {} |",
            small(median(v)),
            small(lo),
            small(hi)
        );
    }

    let mut v = vec![
        Generated {
            path: SVG.into(),
            content: gap_svg(&cases, &gaps, &flips),
        },
        Generated {
            path: FLIP_TABLE.into(),
            content: flip_table(&cases, &flips),
        },
        Generated {
            path: ERR_TABLE.into(),
            content: error_table(&cases, &flips),
        },
        Generated {
            path: OUTPUT_TABLE.into(),
            content: out_table,
        },
        Generated {
            path: FACTS.into(),
            content: f.render("Chapter 10's numbers"),
        },
    ];
    v.extend(gpu::generate(root)?);
    v.extend(example_and_tree(root, 10)?);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLIPS_CSV: &str = "shape,bias,arithmetic,rows,flips,key_err_median,weight_outside\n\
        glm_h4096_e288_k8,glm53,fp32,1000,0,2.39e-7,0\n\
        glm_h4096_e288_k8,glm53,bf16_bias,1000,650,1.50e-2,7.6e-2\n";
    const CASES_CSV: &str = "shape,hidden,experts,k,bias,bias_lo,bias_hi,bias_distinct_bf16,rows,gap_median,orders_sets_differ,max_logit_diff_orders,max_logit_err_sequential,max_logit_err_tiny,logit_std\n\
        glm_h4096_e288_k8,4096,288,8,glm53,11.54,11.96,7,1000,7.12e-3,0,1.43e-5,1.38e-5,7.20e-7,1\n";

    #[test]
    fn tables_and_figure_read_the_csvs() {
        let flips = parse_flips(FLIPS_CSV, "f").unwrap();
        let cases = parse_cases(CASES_CSV, "c").unwrap();
        let t = flip_table(&cases, &flips);
        assert!(
            t.contains("| GLM-like | GLM-5.3-Flash's | 7 | 0% (0) | – | – | 65% (650) | – |"),
            "{t}"
        );
        let e = error_table(&cases, &flips);
        assert!(e.contains("| 0.0071 | 2.4e−7 | – | – | 0.015 | – |"), "{e}");
        let gaps = vec![(
            cases[0].shape.clone(),
            "glm53".to_string(),
            1e-3,
            1.2589e-3,
            5u64,
        )];
        let svg = gap_svg(&cases, &gaps, &flips);
        assert_eq!(svg.matches(r#"class="gap""#).count(), 1);
        assert_eq!(svg.matches(r#"class="key-err""#).count(), 2);
        assert!(svg.contains(r#"data-arithmetic="bf16_bias""#));
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn bad_csvs_are_errors() {
        let e = parse_flips(
            "shape,bias,arithmetic,rows,flips,key_err_median,weight_outside\ns,b,fp16,10,1,1e-3,0\n",
            "f.csv",
        )
        .unwrap_err();
        assert!(e.contains("unknown arithmetic `fp16`"), "{e}");
        let e = parse_flips(
            "shape,bias,arithmetic,rows,flips,key_err_median,weight_outside\ns,b,fp32,10,11,1e-3,0\n",
            "f.csv",
        )
        .unwrap_err();
        assert!(e.contains("11 flips of 10 rows"), "{e}");
    }

    #[test]
    fn numbers_are_written_for_reading() {
        assert_eq!(pct(65068, 100000), "65");
        assert_eq!(pct(1947, 100000), "1.9");
        assert_eq!(pct(544, 100000), "0.54");
        assert_eq!(pct(2, 100000), "0.002");
        assert_eq!(pct(0, 100000), "0");
        assert_eq!(share_pct(0.076), "7.6");
        assert_eq!(small(1.5e-2), "0.015");
        assert_eq!(small(1.5e-4), "0.00015");
        assert_eq!(small(2.39e-7), "2.4e−7");
        assert_eq!(small(0.5), "0.50");
    }
}
