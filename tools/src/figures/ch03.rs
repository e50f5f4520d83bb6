//! Chapter 3's generated files: what padding costs, from `bench/results/cpu/ch03_padding.csv`
//! (`bench ch03 --padding`: the exact share of padded slots by E, T and BLOCK_M, and the
//! BLOCK_M the chapter's rule picks), and the GPU run, from `bench/results/h200/ch03.csv` (our
//! kernel, the PyTorch version and one empty launch), `ch03_layout.csv` (BLOCK_M and the padded
//! slots of each measured case), `ch03_steps.csv` (the three-launch path kernel by kernel) and
//! `ch03_determinism.csv` (one hash per size in 1,000 runs).
//!
//! The padding figure and the padding numbers are always made. Until the GPU run's CSVs are
//! committed, the timing figure, the table and the GPU numbers are left out and stderr says so;
//! once the figure or the table is committed, a missing CSV is an error.

use super::facts::{thousands, Facts};
use super::svg::{shapes, Figure, Marker, Series};
use super::tables::{fmt_us, parse_steps};
use super::{esc, find, read, short, token_counts, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

const PADDING_CSV: &str = "bench/results/cpu/ch03_padding.csv";
const GPU_CSV: &str = "bench/results/h200/ch03.csv";
const LAYOUT_CSV: &str = "bench/results/h200/ch03_layout.csv";
const STEPS_CSV: &str = "bench/results/h200/ch03_steps.csv";
const HASHES_CSV: &str = "bench/results/h200/ch03_determinism.csv";
const PADDING_SVG: &str = "book/src/figures/ch03-padding.svg";
const SVG: &str = "book/src/figures/ch03-align.svg";
const TABLE: &str = "book/src/figures/ch03-align-table.md";
const FACTS: &str = "book/src/figures/ch03-facts.md";

/// The implementations, as the CSV names them.
const OURS: &str = "align";
/// Our kernel's twin that scatters through atomic cursors (pairs in arrival order).
const ARRIVAL: &str = "align_arrival";
const TORCH: &str = "torch_align";
const EMPTY: &str = "empty_kernel";

/// The token counts whose padding shares the facts file carries (decode sizes, then larger).
const PAD_FACT_TOKENS: [u64; 6] = [1, 8, 16, 64, 512, 8192];
/// Decode sizes: where the distance to one launch is read.
const SMALL: u64 = 16;

/// The group's files, generated from the repository at `root`.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let pad = parse_padding(&read(root, PADDING_CSV)?, PADDING_CSV)?;
    let mut f = Facts::default();
    padding_facts(&pad, &mut f);
    let mut out = vec![Generated {
        path: PADDING_SVG.into(),
        content: padding_svg(&pad),
    }];
    if root.join(GPU_CSV).exists() {
        let rows = parse_csv(&read(root, GPU_CSV)?, GPU_CSV)?;
        let layout = parse_layout(&read(root, LAYOUT_CSV)?, LAYOUT_CSV)?;
        out.push(Generated {
            path: SVG.into(),
            content: render_svg(&rows),
        });
        out.push(Generated {
            path: TABLE.into(),
            content: table(&rows, &layout),
        });
        gpu_facts(&rows, &layout, &mut f)?;
        if root.join(STEPS_CSV).exists() {
            let steps = parse_steps(&read(root, STEPS_CSV)?, STEPS_CSV)?;
            for st in &steps {
                let kernel = st.kernel.trim_start_matches("align_");
                let name = format!("{}_t{}_{kernel}", short(&st.shape), st.rows);
                f.add(format!("{name}_cold"), fmt_us(st.cold_us), STEPS_CSV);
                f.add(format!("{name}_warm"), fmt_us(st.warm_us), STEPS_CSV);
            }
        }
    } else {
        super::no_gpu_csv_yet(
            root,
            "ch03",
            GPU_CSV,
            &[SVG, TABLE],
            "bench",
            "ch03.csv, ch03_layout.csv, ch03_steps.csv and ch03_ceilings.csv",
            "the timing figure, the table and the GPU numbers are left out; the padding figure and numbers are made",
        )?;
    }
    if root.join(HASHES_CSV).exists() {
        let t = Table::parse(&read(root, HASHES_CSV)?, HASHES_CSV)?;
        hash_facts(&t, &mut f)?;
    } else {
        eprintln!(
            "plot: ch03: no {HASHES_CSV} yet (tools/gpu/run … bench makes it): the determinism numbers are left out"
        );
    }
    out.push(Generated {
        path: FACTS.into(),
        content: f.render("Chapter 3's numbers"),
    });
    Ok(out)
}

/// `e128_k8` → `(128, 8)`.
pub fn dims(shape: &str) -> Option<(u64, u64)> {
    let get = |p: &str| {
        shape
            .split('_')
            .find_map(|s| s.strip_prefix(p).and_then(|n| n.parse::<u64>().ok()))
    };
    Some((get("e")?, get("k")?))
}

/// `e128_k8` → `128 experts, k = 8`.
pub fn describe(shape: &str) -> String {
    match dims(shape) {
        Some((e, k)) => format!("{e} experts, k = {k}"),
        None => shape.to_string(),
    }
}

/// A share in percent, one decimal: `0.9375` → `93.8`.
fn pct(share: f64) -> String {
    format!("{:.1}", 100.0 * share)
}

// ---------------------------------------------------------------------------------------------
// What padding costs.

/// One row of the padding CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct PadRow {
    pub experts: u64,
    pub k: u64,
    pub tokens: u64,
    pub pairs: u64,
    pub block_m: u64,
    pub padded: u64,
    pub chosen: bool,
}

/// The share of padded slots among `padded` slots holding `pairs` pairs (0 when there are none).
fn padded_share(pairs: u64, padded: u64) -> f64 {
    if padded == 0 {
        0.0
    } else {
        1.0 - pairs as f64 / padded as f64
    }
}

impl PadRow {
    /// The share of padded slots, from the exact counts.
    pub fn share(&self) -> f64 {
        padded_share(self.pairs, self.padded)
    }
}

/// Parses the padding CSV, checking that the rule picks exactly one BLOCK_M at each (E, T).
pub fn parse_padding(text: &str, name: &str) -> Result<Vec<PadRow>, String> {
    let t = Table::parse(text, name)?;
    for c in [
        "experts",
        "k",
        "tokens",
        "pairs",
        "block_m",
        "padded_slots",
        "chosen",
    ] {
        t.col(c)?;
    }
    let rows: Vec<PadRow> = t
        .rows()
        .iter()
        .zip(t.records())
        .map(|(row, r)| {
            let n = |c: &str| {
                r(c).parse::<u64>().map_err(|_| {
                    format!(
                        "{name}:{}: `{}` in column `{c}` is not a count",
                        row.line,
                        r(c)
                    )
                })
            };
            Ok(PadRow {
                experts: n("experts")?,
                k: n("k")?,
                tokens: n("tokens")?,
                pairs: n("pairs")?,
                block_m: n("block_m")?,
                padded: n("padded_slots")?,
                chosen: n("chosen")? == 1,
            })
        })
        .collect::<Result<_, String>>()?;
    let cases: BTreeSet<(u64, u64)> = rows.iter().map(|r| (r.experts, r.tokens)).collect();
    for (e, tok) in cases {
        let n = rows
            .iter()
            .filter(|r| r.experts == e && r.tokens == tok && r.chosen)
            .count();
        if n != 1 {
            return Err(format!(
                "{name}: {n} BLOCK_M chosen at {e} experts, {tok} tokens (expected exactly one)"
            ));
        }
    }
    Ok(rows)
}

fn unique<T: Ord + Copy>(v: impl Iterator<Item = T>) -> Vec<T> {
    v.collect::<BTreeSet<_>>().into_iter().collect()
}

/// The padding numbers: at a few token counts, each E and BLOCK_M's share in percent
/// (`padding_e128_t1_bm16`), the rule's pick and its share (`rule_e128_t1`,
/// `padding_rule_e128_t1`), and the first token
/// count at which the rule takes each larger tile (`rule_switch_e128_bm32`).
pub fn padding_facts(rows: &[PadRow], f: &mut Facts) {
    let src = PADDING_CSV;
    for e in unique(rows.iter().map(|r| r.experts)) {
        let here: Vec<&PadRow> = rows.iter().filter(|r| r.experts == e).collect();
        for t in PAD_FACT_TOKENS {
            for r in here.iter().filter(|r| r.tokens == t) {
                f.add(
                    format!("padding_e{e}_t{t}_bm{}", r.block_m),
                    pct(r.share()),
                    src,
                );
            }
            if let Some(r) = here.iter().find(|r| r.tokens == t && r.chosen) {
                f.add(format!("rule_e{e}_t{t}"), r.block_m.to_string(), src);
                f.add(format!("padding_rule_e{e}_t{t}"), pct(r.share()), src);
            }
        }
        for b in unique(here.iter().map(|r| r.block_m)).into_iter().skip(1) {
            if let Some(t) = here
                .iter()
                .filter(|r| r.chosen && r.block_m == b)
                .map(|r| r.tokens)
                .min()
            {
                f.add(format!("rule_switch_e{e}_bm{b}"), thousands(t), src);
            }
        }
    }
}

const INK: &str = "#1f2328";
const MUTED: &str = "#57606a";
const GRID: &str = "#e4e7eb";
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

/// BLOCK_M's color (Okabe–Ito, in order of size).
fn tile_color(k: usize) -> &'static str {
    [
        "#0072b2", "#009e73", "#e69f00", "#d55e00", "#cc79a7", "#56b4e9",
    ][k % 6]
}

/// The padding figure: one panel per E (three to a row), the share of padded slots against T
/// (log scale), one line per BLOCK_M, and a ringed marker where the rule picks that BLOCK_M.
/// Every line carries `class="share"`, `data-experts` and `data-block-m`; every marker
/// `class="chosen"`, `data-experts`, `data-tokens` and `data-block-m`.
pub fn padding_svg(rows: &[PadRow]) -> String {
    let experts = unique(rows.iter().map(|r| r.experts));
    let blocks = unique(rows.iter().map(|r| r.block_m));
    let tokens = unique(rows.iter().map(|r| r.tokens));
    let k = rows.first().map_or(0, |r| r.k);
    const COLS: usize = 3;
    let (pw, ph, left, gap, right) = (300.0, 190.0, 58.0, 30.0, 24.0);
    let ncols = COLS.min(experts.len().max(1));
    let nrows = experts.len().div_ceil(COLS).max(1);
    let width = ncols as f64 * (left + pw) + (ncols - 1) as f64 * gap + right;
    let legend_y = 92.0;
    let top = legend_y + 28.0;
    let row_h = 30.0 + ph + 52.0;
    let height = top + nrows as f64 * row_h + 8.0;
    let (tmin, tmax) = (
        *tokens.first().unwrap_or(&1) as f64,
        *tokens.last().unwrap_or(&1) as f64,
    );
    let (xlo, xhi) = ((tmin / 1.4).ln(), (tmax * 1.4).ln());

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}" font-size="13" fill="{INK}">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="26" font-size="17" font-weight="600">What padding costs: the share of padded slots against tokens (k = {k})</text>"#
    );
    for (i, line) in [
        "Each expert's run of pairs is padded to a multiple of BLOCK_M; pairs spread as evenly as they can over the E experts. Exact.",
        "A ringed marker: the BLOCK_M the chapter's rule picks at that T. Tokens on a logarithmic axis.",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            s,
            r#"<text x="16" y="{}" fill="{MUTED}">{}</text>"#,
            48 + 18 * i,
            esc(line)
        );
    }
    for (i, b) in blocks.iter().enumerate() {
        let lx = 16.0 + 150.0 * i as f64;
        let c = tile_color(i);
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{legend_y}" x2="{}" y2="{legend_y}" stroke="{c}" stroke-width="2"/>"#,
            lx + 28.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">BLOCK_M {b}</text>"#,
            lx + 36.0,
            legend_y + 4.5
        );
    }
    let lx = 16.0 + 150.0 * blocks.len() as f64;
    let _ = writeln!(
        s,
        r#"<circle cx="{}" cy="{legend_y}" r="5" fill="{MUTED}" stroke="{INK}" stroke-width="1.5"/>"#,
        lx + 14.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}">the rule's pick</text>"#,
        lx + 36.0,
        legend_y + 4.5
    );

    for (p, &e) in experts.iter().enumerate() {
        let (r, c) = (p / COLS, p % COLS);
        let px = c as f64 * (left + pw + gap) + left;
        let py = top + r as f64 * row_h + 30.0;
        let x = |t: u64| px + ((t as f64).ln() - xlo) / (xhi - xlo) * pw;
        let y = |share: f64| py + ph - share * ph;
        let _ = writeln!(s, r#"<g class="panel" data-experts="{e}">"#);
        let _ = writeln!(
            s,
            r#"<text x="{px}" y="{}" font-size="14" font-weight="600">E = {e} experts</text>"#,
            py - 10.0
        );
        for v in [0u32, 25, 50, 75, 100] {
            let yy = y(v as f64 / 100.0);
            let _ = writeln!(
                s,
                r#"<line x1="{px}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{GRID}"/>"#,
                px + pw
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{MUTED}">{v}%</text>"#,
                px - 6.0,
                yy + 4.0
            );
        }
        // Ticks at the powers of 4 the axis holds.
        let mut t = 1u64;
        while (t as f64) <= tmax {
            if (t as f64) >= tmin {
                let xx = x(t);
                let _ = writeln!(
                    s,
                    r#"<line x1="{xx:.1}" y1="{py}" x2="{xx:.1}" y2="{:.1}" stroke="{GRID}"/>"#,
                    py + ph
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="{MUTED}">{t}</text>"#,
                    py + ph + 17.0
                );
            }
            t *= 4;
        }
        let _ = writeln!(
            s,
            r#"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="{MUTED}" stroke-width="1"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">tokens T, log scale</text>"#,
            px + pw / 2.0,
            py + ph + 38.0
        );
        let (tx, ty) = (px - (left - 14.0), py + ph / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{tx}" y="{ty}" text-anchor="middle" transform="rotate(-90 {tx} {ty})">padded slots</text>"#
        );
        for (i, &b) in blocks.iter().enumerate() {
            let mut line: Vec<&PadRow> = rows
                .iter()
                .filter(|r| r.experts == e && r.block_m == b)
                .collect();
            line.sort_by_key(|r| r.tokens);
            let pts: Vec<String> = line
                .iter()
                .map(|r| format!("{:.1},{:.1}", x(r.tokens), y(r.share())))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline class="share" data-experts="{e}" data-block-m="{b}" points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
                pts.join(" "),
                tile_color(i)
            );
        }
        for (i, &b) in blocks.iter().enumerate() {
            for r in rows
                .iter()
                .filter(|r| r.experts == e && r.block_m == b && r.chosen)
            {
                let _ = writeln!(
                    s,
                    r#"<circle class="chosen" data-experts="{e}" data-tokens="{}" data-block-m="{b}" cx="{:.1}" cy="{:.1}" r="4.5" fill="{}" stroke="{INK}" stroke-width="1.5"/>"#,
                    r.tokens,
                    x(r.tokens),
                    y(r.share()),
                    tile_color(i)
                );
            }
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

// ---------------------------------------------------------------------------------------------
// The GPU run.

/// One measured case's layout (`ch03_layout.csv`).
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub shape: String,
    pub tokens: u64,
    pub pairs: u64,
    pub block_m: u64,
    pub tiles: u64,
    pub padded: u64,
    pub active: u64,
}

impl Layout {
    /// The share of padded slots, from the exact counts.
    pub fn share(&self) -> f64 {
        padded_share(self.pairs, self.padded)
    }
}

pub fn parse_layout(text: &str, name: &str) -> Result<Vec<Layout>, String> {
    let t = Table::parse(text, name)?;
    for c in [
        "shape",
        "tokens",
        "pairs",
        "block_m",
        "tiles",
        "num_tokens_post_padded",
        "active_experts",
    ] {
        t.col(c)?;
    }
    t.rows()
        .iter()
        .zip(t.records())
        .map(|(row, r)| {
            let n = |c: &str| {
                r(c).parse::<u64>().map_err(|_| {
                    format!(
                        "{name}:{}: `{}` in column `{c}` is not a count",
                        row.line,
                        r(c)
                    )
                })
            };
            Ok(Layout {
                shape: r("shape"),
                tokens: n("tokens")?,
                pairs: n("pairs")?,
                block_m: n("block_m")?,
                tiles: n("tiles")?,
                padded: n("num_tokens_post_padded")?,
                active: n("active_experts")?,
            })
        })
        .collect()
}

/// PyTorch's time over ours at one shape and token count: (cold, warm).
pub fn torch_over_ours(rows: &[BenchRow], shape: &str, n: u64) -> Option<(f64, f64)> {
    let (o, t) = (find(rows, shape, n, OURS)?, find(rows, shape, n, TORCH)?);
    Some((
        t.cold_median_us / o.cold_median_us,
        t.warm_median_us / o.warm_median_us,
    ))
}

/// What the stable order costs at one shape and token count: ours minus the arrival-order twin,
/// (cold, warm) µs.
pub fn stable_cost(rows: &[BenchRow], shape: &str, n: u64) -> Option<(f64, f64)> {
    let (o, a) = (find(rows, shape, n, OURS)?, find(rows, shape, n, ARRIVAL)?);
    Some((
        o.cold_median_us - a.cold_median_us,
        o.warm_median_us - a.warm_median_us,
    ))
}

/// Ours minus one empty launch at one shape and token count: (cold, warm) µs.
pub fn over_empty(rows: &[BenchRow], shape: &str, n: u64) -> Option<(f64, f64)> {
    let o = find(rows, shape, n, OURS)?;
    let e = rows.iter().find(|r| r.imp == EMPTY)?;
    Some((
        o.cold_median_us - e.cold_median_us,
        o.warm_median_us - e.warm_median_us,
    ))
}

/// The table the chapter quotes: one block per shape, one column per token count; BLOCK_M and
/// the padded slots, then each implementation (`cold / warm` µs), ours minus one empty launch,
/// the PyTorch version over ours, the launches and the floor.
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
        let _ = write!(s, "**{}**: µs per call, cold / warm", describe(&shape));
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
        line(&mut s, "BLOCK_M (the rule)", &|n| {
            here(n).map(|l| l.block_m.to_string()).unwrap_or_default()
        });
        line(&mut s, "padded slots (padding)", &|n| {
            here(n)
                .map(|l| {
                    let p = 100.0 * l.share();
                    let p = if p < 10.0 {
                        format!("{p:.1}")
                    } else {
                        format!("{p:.0}")
                    };
                    format!("{} ({p}%)", thousands(l.padded))
                })
                .unwrap_or_default()
        });
        for (imp, label) in [
            (OURS, "ours"),
            (ARRIVAL, "ours, arrival order (atomic cursors)"),
            (TORCH, "PyTorch (argsort, counts, cumsum, scatter)"),
        ] {
            if measured.iter().any(|r| r.shape == shape && r.imp == imp) {
                line(&mut s, label, &|n| {
                    find(&measured, &shape, n, imp).map(cw).unwrap_or_default()
                });
            }
        }
        if empty.is_some() {
            line(&mut s, "ours − one empty launch", &|n| {
                over_empty(rows, &shape, n)
                    .map(|(c, w)| format!("{} / {}", fmt_us(c), fmt_us(w)))
                    .unwrap_or_default()
            });
        }
        if measured
            .iter()
            .any(|r| r.shape == shape && r.imp == ARRIVAL)
        {
            line(
                &mut s,
                "ours − arrival order (the stable order's cost)",
                &|n| {
                    stable_cost(&measured, &shape, n)
                        .map(|(c, w)| format!("{} / {}", fmt_us(c), fmt_us(w)))
                        .unwrap_or_default()
                },
            );
        }
        if measured.iter().any(|r| r.shape == shape && r.imp == TORCH) {
            line(&mut s, "PyTorch ÷ ours", &|n| {
                torch_over_ours(&measured, &shape, n)
                    .map(|(c, w)| format!("{c:.1}× / {w:.1}×"))
                    .unwrap_or_default()
            });
        }
        line(&mut s, "launches: ours · PyTorch", &|n| {
            [OURS, TORCH]
                .iter()
                .map(|imp| {
                    find(&measured, &shape, n, imp)
                        .map(|r| r.launches.to_string())
                        .unwrap_or("–".into())
                })
                .collect::<Vec<_>>()
                .join(" · ")
        });
        line(
            &mut s,
            "floor: one launch + bytes at copy bandwidth",
            &|n| {
                find(&measured, &shape, n, OURS)
                    .map(|r| fmt_us(r.floor_us))
                    .unwrap_or_default()
            },
        );
        s.push('\n');
    }
    s
}

/// The numbers chapter 3's prose quotes from the GPU run: per shape (`e128`, `e288`) and token
/// count (`e128_t1_…`): ours (`_cold`, `_warm`, `_launches`, `_floor`), the PyTorch version
/// (`_torch_cold`, …), ours minus one empty launch (`_over_empty_cold`, `_over_empty_warm`),
/// PyTorch over ours (`_peer_ratio`, `_peer_ratio_warm`), BLOCK_M, the padding in percent, the
/// tiles and the active experts; then the extremes the closing note quotes (`peer_ratio_min`,
/// `peer_ratio_max`, their warm and per-shape versions, and `small_over_empty_cold_max` and
/// `small_over_empty_warm_max`: ours minus one empty launch at T ≤ 16, the worst case); with the
/// arrival-order twin measured, its times (`_arrival_cold`, …) and what the stable order costs
/// (`_stable_cost_cold`, `_stable_cost_warm`, and `stable_cost_{cold,warm}_{min,max}`).
pub fn gpu_facts(rows: &[BenchRow], layout: &[Layout], f: &mut Facts) -> Result<(), String> {
    let src = GPU_CSV;
    if let Some(r) = rows.iter().find(|r| r.imp == EMPTY) {
        f.add("empty_cold", fmt_us(r.cold_median_us), src);
        f.add("empty_warm", fmt_us(r.warm_median_us), src);
    }
    let measured: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    let (mut ratios, mut ratios_warm, mut small_gap, mut small_gap_warm) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut cost, mut cost_warm) = (Vec::new(), Vec::new());
    for shape in shapes(&measured) {
        let s = short(&shape).to_string();
        let mut here_ratios = Vec::new();
        for n in token_counts(&measured, &shape) {
            for (imp, name) in [(OURS, ""), (ARRIVAL, "_arrival"), (TORCH, "_torch")] {
                if let Some(r) = find(&measured, &shape, n, imp) {
                    f.add(
                        format!("{s}_t{n}{name}_cold"),
                        fmt_us(r.cold_median_us),
                        src,
                    );
                    f.add(
                        format!("{s}_t{n}{name}_warm"),
                        fmt_us(r.warm_median_us),
                        src,
                    );
                    f.add(
                        format!("{s}_t{n}{name}_launches"),
                        r.launches.to_string(),
                        src,
                    );
                }
            }
            if let Some(r) = find(&measured, &shape, n, OURS) {
                f.add(format!("{s}_t{n}_floor"), fmt_us(r.floor_us), src);
            }
            if let Some((c, w)) = over_empty(rows, &shape, n) {
                f.add(format!("{s}_t{n}_over_empty_cold"), fmt_us(c), src);
                f.add(format!("{s}_t{n}_over_empty_warm"), fmt_us(w), src);
                if n <= SMALL {
                    small_gap.push(c);
                    small_gap_warm.push(w);
                }
            }
            if let Some((c, w)) = stable_cost(&measured, &shape, n) {
                f.add(format!("{s}_t{n}_stable_cost_cold"), fmt_us(c), src);
                f.add(format!("{s}_t{n}_stable_cost_warm"), fmt_us(w), src);
                cost.push(c);
                cost_warm.push(w);
            }
            if let Some((c, w)) = torch_over_ours(&measured, &shape, n) {
                f.add(format!("{s}_t{n}_peer_ratio"), format!("{c:.1}"), src);
                f.add(format!("{s}_t{n}_peer_ratio_warm"), format!("{w:.1}"), src);
                here_ratios.push(c);
                ratios.push(c);
                ratios_warm.push(w);
            }
            let l = layout
                .iter()
                .find(|l| l.shape == shape && l.tokens == n)
                .ok_or(format!("{LAYOUT_CSV}: no row for {shape} at {n} tokens"))?;
            f.add(
                format!("{s}_t{n}_block_m"),
                l.block_m.to_string(),
                LAYOUT_CSV,
            );
            f.add(format!("{s}_t{n}_padding"), pct(l.share()), LAYOUT_CSV);
            f.add(format!("{s}_t{n}_tiles"), thousands(l.tiles), LAYOUT_CSV);
            f.add(format!("{s}_t{n}_active"), l.active.to_string(), LAYOUT_CSV);
        }
        if let Some((lo, hi)) = extremes(&here_ratios) {
            f.add(format!("{s}_peer_ratio_min"), format!("{lo:.1}"), src);
            f.add(format!("{s}_peer_ratio_max"), format!("{hi:.1}"), src);
        }
    }
    for (v, name, digits) in [
        (&ratios, "peer_ratio", 1),
        (&ratios_warm, "peer_ratio_warm", 1),
    ] {
        if let Some((lo, hi)) = extremes(v) {
            f.add(format!("{name}_min"), format!("{lo:.digits$}"), src);
            f.add(format!("{name}_max"), format!("{hi:.digits$}"), src);
        }
    }
    if let Some((lo, hi)) = extremes(&small_gap) {
        f.add("small_over_empty_cold_min", fmt_us(lo), src);
        f.add("small_over_empty_cold_max", fmt_us(hi), src);
    }
    if let Some((lo, hi)) = extremes(&small_gap_warm) {
        f.add("small_over_empty_warm_min", fmt_us(lo), src);
        f.add("small_over_empty_warm_max", fmt_us(hi), src);
    }
    for (v, name) in [
        (&cost, "stable_cost_cold"),
        (&cost_warm, "stable_cost_warm"),
    ] {
        if let Some((lo, hi)) = extremes(v) {
            f.add(format!("{name}_min"), fmt_us(lo), src);
            f.add(format!("{name}_max"), fmt_us(hi), src);
        }
    }
    f.add("small_tokens", SMALL.to_string(), src);
    Ok(())
}

fn extremes(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    Some((
        v.iter().cloned().fold(f64::INFINITY, f64::min),
        v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    ))
}

/// `[1, 64, 4096]` → `1, 64 and 4,096`.
fn and_list(v: &[u64]) -> String {
    let s: Vec<String> = v.iter().map(|&n| thousands(n)).collect();
    match s.len() {
        0 => String::new(),
        1 => s[0].clone(),
        n => format!("{} and {}", s[..n - 1].join(", "), s[n - 1]),
    }
}

/// The determinism numbers: the runs, the sizes, the most distinct hashes at any size (1 when
/// deterministic) and each size's hash, ours (`hash_runs`, `hash_tokens`, `hash_sizes`,
/// `hash_distinct_max`, `hash_t1`, …) and the PyTorch version's (`hash_torch_runs`, …); E
/// (`hash_experts`); whether ours and PyTorch's hashes agree at every size
/// (`hash_same_as_torch`).
/// One size of one implementation in the determinism CSV.
struct HashEntry {
    tokens: u64,
    runs: u64,
    distinct: u64,
    hash: String,
}

pub fn hash_facts(t: &Table, f: &mut Facts) -> Result<(), String> {
    let src = HASHES_CSV;
    let mut by: Vec<(String, Vec<HashEntry>)> = Vec::new();
    let mut experts = None;
    for r in t.records() {
        let n = |c: &str| {
            r(c).parse::<u64>()
                .map_err(|_| format!("{src}: `{}` in column `{c}` is not a count", r(c)))
        };
        let who = match r("impl").as_str() {
            OURS => "ours",
            TORCH => "torch",
            other => return Err(format!("{src}: unknown impl `{other}`")),
        };
        experts.get_or_insert(n("experts")?);
        let entry = HashEntry {
            tokens: n("tokens")?,
            runs: n("runs")?,
            distinct: n("distinct_hashes")?,
            hash: r("hash"),
        };
        match by.iter_mut().find(|(w, _)| w == who) {
            Some((_, v)) => v.push(entry),
            None => by.push((who.to_string(), vec![entry])),
        }
    }
    if let Some(e) = experts {
        f.add("hash_experts", e.to_string(), src);
    }
    for (who, v) in &by {
        // Ours: `hash_runs`, `hash_tokens`, …; the PyTorch version's: `hash_torch_runs`, ….
        let who = if who == "ours" {
            String::new()
        } else {
            format!("_{who}")
        };
        let tokens: Vec<u64> = v.iter().map(|x| x.tokens).collect();
        let runs = unique(v.iter().map(|x| x.runs));
        f.add(format!("hash{who}_tokens"), and_list(&tokens), src);
        f.add(format!("hash{who}_sizes"), v.len().to_string(), src);
        f.add(
            format!("hash{who}_runs"),
            runs.iter()
                .map(|&r| thousands(r))
                .collect::<Vec<_>>()
                .join("/"),
            src,
        );
        f.add(
            format!("hash{who}_distinct_max"),
            v.iter().map(|x| x.distinct).max().unwrap_or(0).to_string(),
            src,
        );
        for x in v {
            f.add(format!("hash{who}_t{}", x.tokens), x.hash.clone(), src);
        }
    }
    let get = |w: &str| by.iter().find(|(x, _)| x == w).map(|(_, v)| v);
    if let (Some(o), Some(t)) = (get("ours"), get("torch")) {
        let same = o
            .iter()
            .all(|x| t.iter().any(|y| y.tokens == x.tokens && y.hash == x.hash));
        f.add("hash_same_as_torch", if same { "yes" } else { "no" }, src);
    }
    Ok(())
}

/// How an implementation is drawn (Okabe–Ito colors, as the other chapters' figures).
fn style(imp: &str) -> Series {
    let (color, marker, label) = match imp {
        OURS => (
            "#0072b2",
            Marker::Circle,
            "ours: one launch up to 512 pairs, two above",
        ),
        ARRIVAL => (
            "#009e73",
            Marker::Triangle,
            "ours in arrival order: atomic cursors, not deterministic",
        ),
        _ => (
            "#d55e00",
            Marker::Square,
            "torch_align: PyTorch, stable argsort + counts + cumsum + scatter",
        ),
    };
    Series {
        imp: imp.to_string(),
        color,
        marker,
        label: label.to_string(),
    }
}

/// The timing figure: one panel per shape, µs per call against tokens, log-log; ours and the
/// PyTorch version (cold: solid, markers, p10–p90 whiskers; warm: dashed), the floor dotted.
pub fn render_svg(rows: &[BenchRow]) -> String {
    let rows: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.rows > 0 && (r.imp == OURS || r.imp == ARRIVAL || r.imp == TORCH))
        .collect();
    Figure {
        panel_w: 460.0,
        panel_h: 320.0,
        left: 62.0,
        title: "Sorting pairs by expert, padded to tiles: µs per call against tokens",
        notes: &[
            "The same ids for both, BLOCK_M by the chapter's rule; both axes logarithmic.",
            "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
            "Warm: back-to-back copies in one graph, divided by their number.",
        ],
        panel_title: describe,
        x_label: "tokens T (8 pairs each), log scale",
        series: [OURS, ARRIVAL, TORCH]
            .into_iter()
            .filter(|i| rows.iter().any(|r| r.imp == *i))
            .map(style)
            .collect(),
        floor_label: "floor: one empty launch + the ids and outputs at copy bw",
        floor_from: OURS,
    }
    .render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::header;

    const SHAPES: [&str; 2] = ["e128_k8", "e288_k8"];
    const TOKENS: [u64; 4] = [1, 16, 512, 16384];

    /// The padding CSV of `experts` and `tokens`, made here from the definition (pairs spread
    /// evenly, each run rounded up to BLOCK_M), the rule marking 16 below 32 pairs per expert,
    /// 32 below 64, 64 below 128, then 128.
    fn padding_csv(experts: &[u64], tokens: &[u64]) -> String {
        let mut s =
            "experts,k,tokens,pairs,block_m,padded_slots,padding_share,chosen\n".to_string();
        for &e in experts {
            for &t in tokens {
                let p = 8 * t;
                let rule = match p / e {
                    0..=31 => 16,
                    32..=63 => 32,
                    64..=127 => 64,
                    _ => 128,
                };
                for b in [16, 32, 64, 128] {
                    let (q, r) = (p / e, p % e);
                    let pad = |c: u64| c.div_ceil(b) * b;
                    let padded = r * pad(q + 1) + (e - r) * pad(q);
                    let share = 1.0 - p as f64 / padded as f64;
                    s += &format!(
                        "{e},8,{t},{p},{b},{padded},{share:.6},{}\n",
                        u8::from(b == rule)
                    );
                }
            }
        }
        s
    }

    /// A cold median with known ratios: ours 1 µs above a 4 µs empty launch up to 16 tokens and
    /// 2 µs above it from 512; the arrival-order twin 0.25 µs below ours up to 16 tokens and 1 µs
    /// below from 512; PyTorch 10× ours up to 16 tokens and 7× above.
    fn cold(imp: &str, t: u64) -> f64 {
        let ours = if t <= 16 { 5.0 } else { 6.0 };
        match imp {
            OURS => ours,
            ARRIVAL => ours - if t <= 16 { 0.25 } else { 1.0 },
            TORCH if t <= 16 => 10.0 * ours,
            TORCH => 7.0 * ours,
            _ => 4.5,
        }
    }

    fn gpu_csv(with_torch: bool) -> String {
        let mut s = header() + "\n";
        s += "ch03,none,empty_kernel,0,1,4.0,3.9,4.2,0.6,0.59,0.62,4.0,0,0,0,0,200,NVIDIA_H200\n";
        for shape in SHAPES {
            for t in TOKENS {
                for imp in [OURS, "floor_probe", ARRIVAL, TORCH] {
                    if imp == TORCH && !with_torch {
                        continue;
                    }
                    let c = cold(imp, t);
                    let launches = match imp {
                        OURS | ARRIVAL if t >= 512 => 2,
                        TORCH => 21,
                        _ => 1,
                    };
                    s += &BenchRow {
                        chapter: "ch03".into(),
                        shape: shape.into(),
                        imp: imp.into(),
                        rows: t,
                        launches,
                        cold_median_us: c,
                        cold_p10_us: c * 0.95,
                        cold_p90_us: c * 1.1,
                        warm_median_us: c / 4.0,
                        warm_p10_us: c / 4.1,
                        warm_p90_us: c / 3.9,
                        floor_us: 4.1,
                        bytes: (t * 64) as f64,
                        flops: 0.0,
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
        let mut s = "shape,experts,tokens,k,pairs,block_m,capacity,max_tiles,tiles,num_tokens_post_padded,active_experts\n".to_string();
        for shape in SHAPES {
            for t in TOKENS {
                let p = 8 * t;
                let (bm, padded) = if t == 1 { (16, 128) } else { (16, 2 * p) };
                s += &format!(
                    "{shape},0,{t},8,{p},{bm},0,0,{},{padded},{}\n",
                    padded / bm,
                    p.min(100)
                );
            }
        }
        s
    }

    const STEPS: &str =
        "chapter,shape,rows,step,kernel,prefix_cold_us,prefix_warm_us,cold_us,warm_us\n\
        ch03,e288_k8,16384,1,align_count,5.0,2.0,5.0,2.0\n\
        ch03,e288_k8,16384,2,align_scatter,10.0,4.5,5.0,2.5\n";

    /// A repository of CSVs in a fresh temporary folder (tests never write into the tree).
    fn repo(name: &str, gpu: Option<&str>) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("moe-tools-ch03-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bench/results/h200")).unwrap();
        std::fs::create_dir_all(d.join("bench/results/cpu")).unwrap();
        std::fs::write(
            d.join(PADDING_CSV),
            padding_csv(&[8, 128, 256, 384], &[1, 2, 8, 16, 64, 512, 1024, 8192]),
        )
        .unwrap();
        if let Some(g) = gpu {
            std::fs::write(d.join(GPU_CSV), g).unwrap();
            std::fs::write(d.join(LAYOUT_CSV), layout_csv()).unwrap();
            std::fs::write(d.join(STEPS_CSV), STEPS).unwrap();
            std::fs::write(
                d.join(HASHES_CSV),
                "impl,experts,tokens,k,block_m,pairs,runs,distinct_hashes,runs_equal_to_reference,hash,reference_hash,device\n\
                 align,288,1,8,16,8,1000,1,1000,fd3322b6,fd3322b6,NVIDIA_H200\n\
                 align,288,64,8,16,512,1000,1,1000,9a8f8eb8,9a8f8eb8,NVIDIA_H200\n\
                 torch_align,288,1,8,16,8,1000,1,1000,fd3322b6,fd3322b6,NVIDIA_H200\n\
                 torch_align,288,64,8,16,512,1000,1,1000,9a8f8eb8,9a8f8eb8,NVIDIA_H200\n",
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

    #[test]
    fn the_group_from_a_synthetic_run() {
        let root = repo("full", Some(&gpu_csv(true)));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, [PADDING_SVG, SVG, TABLE, FACTS]);

        let svg = content(&files, SVG);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        for shape in SHAPES {
            for imp in [OURS, ARRIVAL, TORCH] {
                for class in ["cold", "warm"] {
                    let key = format!(r#"class="{class}" data-shape="{shape}" data-impl="{imp}""#);
                    assert_eq!(svg.matches(&key).count(), 1, "{key}");
                }
            }
        }
        assert_eq!(svg.matches(r#"class="floor""#).count(), 2);
        assert!(!svg.contains("floor_probe") && !svg.contains("empty_kernel"));
        assert!(svg.contains("288 experts, k = 8"));

        let md = content(&files, TABLE);
        assert!(
            md.contains(
                "**128 experts, k = 8**: µs per call, cold / warm; one empty launch: 4.00 / 0.60\n"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| PyTorch ÷ ours | 10.0× / 10.0× | 10.0× / 10.0× | 7.0× / 7.0× | 7.0× / 7.0× |"
            ),
            "{md}"
        );
        assert!(md.contains("| ours − one empty launch | 1.00 / 0.65 | 1.00 / 0.65 | 2.00 / 0.90 | 2.00 / 0.90 |"), "{md}");
        assert!(
            md.contains("| padded slots (padding) | 128 (94%) | 256 (50%) |"),
            "{md}"
        );
        assert!(
            md.contains("| launches: ours · PyTorch | 1 · 21 | 1 · 21 | 2 · 21 | 2 · 21 |"),
            "{md}"
        );
        assert!(
            md.contains("| ours − arrival order (the stable order's cost) | 0.25 / 0.06 | 0.25 / 0.06 | 1.00 / 0.25 | 1.00 / 0.25 |"),
            "{md}"
        );
        for line in md.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(line.matches('|').count(), 6, "5 columns: {line}");
        }

        let facts = content(&files, FACTS);
        for (name, value) in [
            ("padding_e128_t1_bm16", "93.8"),
            ("padding_e128_t1_bm128", "99.2"),
            ("rule_e128_t1", "16"),
            ("padding_rule_e8_t512", "0.0"),
            ("rule_e8_t512", "128"),
            ("rule_switch_e8_bm64", "64"),
            ("rule_switch_e8_bm128", "512"),
            ("rule_switch_e128_bm32", "512"),
            ("rule_switch_e128_bm128", "8,192"),
            ("empty_cold", "4.00"),
            ("e128_t1_cold", "5.00"),
            ("e128_t1_warm", "1.25"),
            ("e288_t16384_torch_launches", "21"),
            ("e288_t16384_launches", "2"),
            ("e288_t16384_arrival_cold", "5.00"),
            ("e128_t1_stable_cost_cold", "0.25"),
            ("e288_t16384_stable_cost_warm", "0.25"),
            ("stable_cost_cold_min", "0.25"),
            ("stable_cost_cold_max", "1.00"),
            ("e288_t16384_floor", "4.10"),
            ("e288_t16_over_empty_cold", "1.00"),
            ("e288_t1_peer_ratio", "10.0"),
            ("e128_peer_ratio_min", "7.0"),
            ("peer_ratio_max", "10.0"),
            ("peer_ratio_min", "7.0"),
            ("small_over_empty_cold_max", "1.00"),
            ("small_over_empty_warm_max", "0.65"),
            ("e288_t1_padding", "93.8"),
            ("e288_t512_block_m", "16"),
            ("e288_t16384_count_cold", "5.00"),
            ("e288_t16384_scatter_warm", "2.50"),
            ("hash_experts", "288"),
            ("hash_tokens", "1 and 64"),
            ("hash_runs", "1,000"),
            ("hash_distinct_max", "1"),
            ("hash_t1", "fd3322b6"),
            ("hash_torch_t64", "9a8f8eb8"),
            ("hash_same_as_torch", "yes"),
        ] {
            has(facts, name, value);
        }
    }

    #[test]
    fn the_padding_figure_marks_one_pick_per_size() {
        let rows = parse_padding(
            &padding_csv(&[8, 64, 128, 256, 384], &[1, 4, 64, 8192]),
            "p.csv",
        )
        .unwrap();
        let svg = padding_svg(&rows);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(r#"<g class="panel""#).count(), 5);
        assert_eq!(svg.matches(r#"class="share""#).count(), 5 * 4);
        assert_eq!(svg.matches(r#"class="chosen""#).count(), 5 * 4);
        let line = svg
            .lines()
            .find(|l| l.contains(r#"class="share" data-experts="128" data-block-m="16""#))
            .unwrap();
        let points = line
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 4, "one point per T");
        assert!(svg
            .contains(r#"class="chosen" data-experts="8" data-tokens="8192" data-block-m="128""#));
        assert!(
            svg.contains(r#"class="chosen" data-experts="384" data-tokens="1" data-block-m="16""#)
        );
        // Two picks at one size, or none, is an error.
        let two = padding_csv(&[8], &[1])
            .replace("8,8,1,8,32,256,0.968750,0", "8,8,1,8,32,256,0.968750,1");
        assert!(parse_padding(&two, "p.csv")
            .unwrap_err()
            .contains("2 BLOCK_M chosen at 8 experts, 1 tokens"));
    }

    #[test]
    fn a_missing_peer_leaves_its_lines_out() {
        let rows = parse_csv(&gpu_csv(false), "x.csv").unwrap();
        let layout = parse_layout(&layout_csv(), "l.csv").unwrap();
        assert_eq!(torch_over_ours(&rows, SHAPES[0], 16), None);
        let md = table(&rows, &layout);
        assert!(
            !md.contains("PyTorch ÷ ours") && !md.contains("PyTorch (argsort"),
            "{md}"
        );
        assert!(md.contains("| 1 · – |"), "{md}");
        let svg = render_svg(&rows);
        assert!(!svg.contains(TORCH), "{svg}");
        let mut f = Facts::default();
        gpu_facts(&rows, &layout, &mut f).unwrap();
        assert_eq!(f.get("peer_ratio_min"), None);
        assert_eq!(f.get("e128_t16_over_empty_cold"), Some("1.00"));
    }

    #[test]
    fn without_the_gpu_csv_the_padding_alone() {
        let root = repo("cpu", None);
        let files = generate(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, [PADDING_SVG, FACTS]);
        assert!(content(&files, FACTS).contains("ANCHOR: padding_e256_t8_bm16\n"));
        assert!(!content(&files, FACTS).contains("empty_cold"));
        // Once the table is committed, its CSV may not go missing.
        std::fs::create_dir_all(root.join("book/src/figures")).unwrap();
        std::fs::write(root.join(TABLE), "x").unwrap();
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            e.contains("ch03-align-table.md exist but bench/results/h200/ch03.csv does not"),
            "{e}"
        );
    }

    #[test]
    fn shapes_read_back() {
        assert_eq!(dims("e288_k8"), Some((288, 8)));
        assert_eq!(describe("e128_k8"), "128 experts, k = 8");
        assert_eq!(describe("toy"), "toy");
        assert_eq!(and_list(&[1, 64, 4096, 16384]), "1, 64, 4,096 and 16,384");
    }
}
