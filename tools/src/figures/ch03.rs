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
//!
//! What the specs cannot say stays in named functions: the padding figure (its own drawing, not
//! a chart of µs per call), the share of padded slots (`1 − pairs / slots`, 0 with no slots),
//! the first T at which the rule takes each larger tile, and the determinism CSV's lists (`1,
//! 64 and 4,096`), its runs and whether ours and PyTorch's hashes agree.

use super::facts::thousands;
use super::spec::{
    self, each, fact, Absent, Cell, Chart, Csv, Ctx, Data, Fmt, Item, Line, Loop, Make, Name, Over,
    Part, Pivot, Slot, Source, Style, Value,
};
use super::svg::{self, Marker, GRID, INK, MUTED};
use super::tables::parse_steps;
use super::{esc, Generated};
use crate::csv::Table;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

/// This file, as the specs' errors name it.
const HERE: &str = "tools/src/figures/ch03.rs";
const PADDING: Csv = Csv::at("bench/results/cpu/ch03_padding.csv");
const GPU: Csv = Csv::at("bench/results/h200/ch03.csv");
const LAYOUT: Csv = Csv::at("bench/results/h200/ch03_layout.csv");
const STEPS: Csv = Csv::at("bench/results/h200/ch03_steps.csv");
const HASHES: Csv = Csv::at("bench/results/h200/ch03_determinism.csv");
const PADDING_SVG: &str = "book/src/figures/ch03-padding.svg";
const SVG: &str = "book/src/figures/ch03-align.svg";
const TABLE: &str = "book/src/figures/ch03-align-table.md";
const FACTS: &str = "book/src/figures/ch03-facts.md";

/// The token counts whose padding shares the facts file carries (decode sizes, then larger).
const PAD_FACT_TOKENS: [&str; 6] = ["1", "8", "16", "64", "512", "8192"];
/// Decode sizes: where the distance to one launch is read.
const SMALL: f64 = 16.0;

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

/// The share of padded slots of the row matching `rows` (`slots`: its column of slots).
fn share_of(c: &Ctx, rows: &str, slots: &str) -> Result<Option<f64>, String> {
    let Some(r) = c.rows(rows)?.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(padded_share(
        c.num(r, "pairs")? as u64,
        c.num(r, slots)? as u64,
    )))
}
fn padding_share(c: &Ctx) -> Result<Option<f64>, String> {
    share_of(c, "experts={e} tokens={t} block_m={bm}", "padded_slots")
}

/// The first T at which the rule takes BLOCK_M `{bm}` at `{e}` experts; none for the smallest
/// BLOCK_M (the rule starts there: no switch).
fn rule_switch(c: &Ctx) -> Result<Option<f64>, String> {
    let mut tiles = Vec::new();
    for r in c.rows("experts={e}")? {
        tiles.push(c.num(r, "block_m")?);
    }
    let bm: f64 = c.var("bm")?.parse().map_err(|_| "`bm`: not a number")?;
    if tiles.iter().all(|&b| b >= bm) {
        return Ok(None);
    }
    let mut first: Option<f64> = None;
    for r in c.rows("experts={e} block_m={bm} chosen=1")? {
        let t = c.num(r, "tokens")?;
        first = Some(first.map_or(t, |f| f.min(t)));
    }
    Ok(first)
}

const EXPERTS: Loop = Loop::csv("e", &PADDING, "", "experts").numeric();

/// The padding numbers: at a few token counts, each E and BLOCK_M's share in percent
/// (`padding_e128_t1_bm16`), the rule's pick and its share (`rule_e128_t1`,
/// `padding_rule_e128_t1`), and the first token count at which the rule takes each larger tile
/// (`rule_switch_e128_bm32`).
#[rustfmt::skip]
const PADDING_FACTS: &[Item] = &[each!(EXPERTS, [
    each!(Loop::list("t", &PAD_FACT_TOKENS), [
        each!(Loop::csv("bm", &PADDING, "experts={e} tokens={t}", "block_m"), [
            fact!("padding_e{e}_t{t}_bm{bm}", Value::Times(100.0, &PAD_SHARE), Fmt::Fixed(1)),
        ]),
        each!(Loop::csv("bm", &PADDING, "experts={e} tokens={t} chosen=1", "block_m"), [
            fact!("rule_e{e}_t{t}", Value::col(&PADDING, "experts={e} tokens={t} block_m={bm}", "block_m"), Fmt::Raw),
            fact!("padding_rule_e{e}_t{t}", Value::Times(100.0, &PAD_SHARE), Fmt::Fixed(1)),
        ]),
    ]),
    each!(Loop::csv("bm", &PADDING, "experts={e}", "block_m").numeric(), [
        fact!(? "rule_switch_e{e}_bm{bm}", Value::named(&PADDING, rule_switch), Fmt::Thousands),
    ]),
])];
const PAD_SHARE: Value = Value::named(&PADDING, padding_share);

/// The padding CSV's own rule, checked before it is read: one BLOCK_M chosen at each (E, T).
fn check_padding(text: &str, name: &str) -> Result<(), String> {
    parse_padding(text, name).map(|_| ())
}

/// The padding figure, drawn from the parsed CSV.
fn draw_padding(d: &Data) -> Result<Option<String>, String> {
    let rows = parse_padding(d.text(&PADDING)?, PADDING.path)?;
    Ok(Some(padding_svg(&rows)))
}

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
    svg::open(
        &mut s,
        width,
        height,
        &format!("What padding costs: the share of padded slots against tokens (k = {k})"),
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

/// How the implementations are drawn (Okabe–Ito colors, as the other chapters' figures).
#[rustfmt::skip]
const DRAWN: &[Style] = &[
    Style::new("align", "#0072b2", Marker::Circle, "ours: one launch up to 512 pairs, two above"),
    Style::new("align_arrival", "#009e73", Marker::Triangle, "ours in arrival order: atomic cursors, not deterministic"),
    Style::new("torch_align", "#d55e00", Marker::Square, "torch_align: PyTorch, stable argsort + counts + cumsum + scatter"),
];

/// The timing figure: one panel per shape, µs per call against tokens, log-log; ours and the
/// PyTorch version (cold: solid, markers, p10–p90 whiskers; warm: dashed), the floor dotted.
const FIGURE: Chart = Chart {
    csv: &GPU,
    draw: DRAWN,
    floor_from: "align",
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
    floor_label: "floor: one empty launch + the ids and outputs at copy bw",
    probes: false,
};

/// The measured shapes (the empty launch's row, at 0 tokens, left out), `e128` in facts.
const SHAPES: Loop = Loop::csv("shape", &GPU, "rows>0", "shape").named(Name::Prefix);
/// The token counts measured at a shape, ascending; those up to [`SMALL`].
const COUNTS: Loop = Loop::csv("n", &GPU, "shape={shape} rows>0", "rows").numeric();
const SMALL_COUNTS: Loop = Loop::csv("n", &GPU, SMALL_ROWS, "rows").numeric();
const SMALL_ROWS: &str = "shape={shape} rows>0 rows<=16";

/// Column `col` of the run's first row matching `rows`.
const fn at(rows: &'static str, col: &'static str) -> Value {
    Value::col(&GPU, rows, col)
}
const OURS: &str = "shape={shape} rows={n} impl=align";
const ARRIVAL: &str = "shape={shape} rows={n} impl=align_arrival";
const TORCH: &str = "shape={shape} rows={n} impl=torch_align";
const IMP: &str = "shape={shape} rows={n} impl={imp}";
const EMPTY: &str = "impl=empty_kernel";
const COLD: Value = at(OURS, "cold_median_us");
const WARM: Value = at(OURS, "warm_median_us");
/// Ours minus one empty launch; ours minus the arrival-order twin (what the stable order
/// costs); PyTorch's time over ours.
const OVER_EMPTY: Value = Value::Diff(&COLD, &at(EMPTY, "cold_median_us"));
const OVER_EMPTY_WARM: Value = Value::Diff(&WARM, &at(EMPTY, "warm_median_us"));
const STABLE: Value = Value::Diff(&COLD, &at(ARRIVAL, "cold_median_us"));
const STABLE_WARM: Value = Value::Diff(&WARM, &at(ARRIVAL, "warm_median_us"));
const PEER: Value = Value::Ratio(&at(TORCH, "cold_median_us"), &COLD);
const PEER_WARM: Value = Value::Ratio(&at(TORCH, "warm_median_us"), &WARM);
/// The layout of a measured case.
const fn layout(col: &'static str) -> Value {
    Value::col(&LAYOUT, "shape={shape} tokens={n}", col)
}
fn layout_share(c: &Ctx) -> Result<Option<f64>, String> {
    share_of(c, "shape={shape} tokens={n}", "num_tokens_post_padded")
}
const LAYOUT_PCT: Value = Value::Times(100.0, &Value::named(&LAYOUT, layout_share));

/// The implementations' lines, in order, and their labels.
const LINES: &[(&str, &str)] = &[
    ("align", "ours"),
    ("align_arrival", "ours, arrival order (atomic cursors)"),
    ("torch_align", "PyTorch (argsort, counts, cumsum, scatter)"),
];

/// `{cold} / {warm}` of two values, µs.
macro_rules! pair {
    ($text:literal, $cold:expr, $warm:expr, $fmt:expr) => {
        Cell {
            text: $text,
            slots: &[Slot::new("c", $cold, $fmt), Slot::new("w", $warm, $fmt)],
        }
    };
}

/// The table the chapter quotes: one block per shape, one column per token count; BLOCK_M and
/// the padded slots, then each implementation (`cold / warm` µs), ours minus one empty launch,
/// the PyTorch version over ours, the launches and the floor.
#[rustfmt::skip]
const ALIGN_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(describe))),
    block_head: "**{shape}**: µs per call, cold / warm{ec}{ew}\n\n",
    block_slots: &[
        Slot::optional("ec", at(EMPTY, "cold_median_us"), Fmt::Us, "; one empty launch: {}", ""),
        Slot::optional("ew", at(EMPTY, "warm_median_us"), Fmt::Us, " / {}", ""),
    ],
    block_tail: "\n",
    lead: &[
        Line::new("BLOCK_M (the rule)", Cell { text: "{b}", slots: &[Slot::new("b", layout("block_m"), Fmt::Raw)] }),
        Line::new("padded slots (padding)", Cell {
            text: "{s} ({p}%)",
            slots: &[Slot::new("s", layout("num_tokens_post_padded"), Fmt::Thousands), Slot::new("p", LAYOUT_PCT, Fmt::Short)],
        }),
    ],
    rows: Loop { var: "imp", over: Over::Keys(LINES), name: Name::Map(LINES) },
    row_if: Some((&GPU, "shape={shape} impl={imp}")),
    cols: COUNTS.named(Name::Plural("token")),
    cell: pair!("{c} / {w}", at(IMP, "cold_median_us"), at(IMP, "warm_median_us"), Fmt::Us),
    extra: &[
        Line::new("ours − one empty launch", pair!("{c} / {w}", OVER_EMPTY, OVER_EMPTY_WARM, Fmt::Us))
            .only_if(&GPU, EMPTY),
        Line::new("ours − arrival order (the stable order's cost)", pair!("{c} / {w}", STABLE, STABLE_WARM, Fmt::Us))
            .only_if(&GPU, "shape={shape} impl=align_arrival"),
        Line::new("PyTorch ÷ ours", pair!("{c}× / {w}×", PEER, PEER_WARM, Fmt::Fixed(1)))
            .only_if(&GPU, "shape={shape} impl=torch_align"),
        Line::new("launches: ours · PyTorch", Cell {
            text: "{a} · {b}",
            slots: &[Slot::or("a", at(OURS, "launches"), Fmt::Raw, "–"), Slot::or("b", at(TORCH, "launches"), Fmt::Raw, "–")],
        }),
        Line::new("floor: one launch + bytes at copy bandwidth", Cell { text: "{f}", slots: &[Slot::new("f", at(OURS, "floor_us"), Fmt::Us)] }),
    ],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The implementations' names in facts: ours bare (`e128_t1_cold`), the others with a suffix.
const SUFFIX: &[(&str, &str)] = &[
    ("align", ""),
    ("align_arrival", "_arrival"),
    ("torch_align", "_torch"),
];

/// The numbers chapter 3's prose quotes from the GPU run: per shape (`e128`, `e288`) and token
/// count (`e128_t1_…`): ours (`_cold`, `_warm`, `_launches`, `_floor`), the arrival-order twin
/// (`_arrival_cold`, …) and the PyTorch version (`_torch_cold`, …), ours minus one empty launch
/// (`_over_empty_cold`, `_over_empty_warm`), what the stable order costs (`_stable_cost_cold`,
/// `_stable_cost_warm`), PyTorch over ours (`_peer_ratio`, `_peer_ratio_warm`), BLOCK_M, the
/// padding in percent, the tiles and the active experts; then the extremes the closing note
/// quotes (`peer_ratio_min`, `_max`, their warm and per-shape versions,
/// `small_over_empty_cold_max` and `_warm_max`: ours minus one empty launch at T ≤ 16, and
/// `stable_cost_{cold,warm}_{min,max}`).
#[rustfmt::skip]
const GPU_FACTS: &[Item] = &[
    fact!(? "empty_cold", at(EMPTY, "cold_median_us"), Fmt::Us),
    fact!(? "empty_warm", at(EMPTY, "warm_median_us"), Fmt::Us),
    each!(SHAPES, [
        each!(COUNTS, [
            each!(Loop { var: "imp", over: Over::Keys(SUFFIX), name: Name::Map(SUFFIX) }, [
                fact!(? "{shape}_t{n}{imp}_cold", at(IMP, "cold_median_us"), Fmt::Us),
                fact!(? "{shape}_t{n}{imp}_warm", at(IMP, "warm_median_us"), Fmt::Us),
                fact!(? "{shape}_t{n}{imp}_launches", at(IMP, "launches"), Fmt::Raw),
            ]),
            fact!(? "{shape}_t{n}_floor", at(OURS, "floor_us"), Fmt::Us),
            fact!(? "{shape}_t{n}_over_empty_cold", OVER_EMPTY, Fmt::Us),
            fact!(? "{shape}_t{n}_over_empty_warm", OVER_EMPTY_WARM, Fmt::Us),
            fact!(? "{shape}_t{n}_stable_cost_cold", STABLE, Fmt::Us),
            fact!(? "{shape}_t{n}_stable_cost_warm", STABLE_WARM, Fmt::Us),
            fact!(? "{shape}_t{n}_peer_ratio", PEER, Fmt::Fixed(1)),
            fact!(? "{shape}_t{n}_peer_ratio_warm", PEER_WARM, Fmt::Fixed(1)),
            fact!("{shape}_t{n}_block_m", layout("block_m"), Fmt::Raw),
            fact!("{shape}_t{n}_padding", LAYOUT_PCT, Fmt::Fixed(1)),
            fact!("{shape}_t{n}_tiles", layout("tiles"), Fmt::Thousands),
            fact!("{shape}_t{n}_active", layout("active_experts"), Fmt::Raw),
        ]),
        fact!(? "{shape}_peer_ratio_min", Value::Min(&COUNTS, &PEER), Fmt::Fixed(1)),
        fact!(? "{shape}_peer_ratio_max", Value::Max(&COUNTS, &PEER), Fmt::Fixed(1)),
    ]),
    // Over every shape and count (T ≤ 16 for the distance to one empty launch).
    fact!(? "peer_ratio_min", Value::Min(&SHAPES, &Value::Min(&COUNTS, &PEER)), Fmt::Fixed(1)),
    fact!(? "peer_ratio_max", Value::Max(&SHAPES, &Value::Max(&COUNTS, &PEER)), Fmt::Fixed(1)),
    fact!(? "peer_ratio_warm_min", Value::Min(&SHAPES, &Value::Min(&COUNTS, &PEER_WARM)), Fmt::Fixed(1)),
    fact!(? "peer_ratio_warm_max", Value::Max(&SHAPES, &Value::Max(&COUNTS, &PEER_WARM)), Fmt::Fixed(1)),
    fact!(? "small_over_empty_cold_min", Value::Min(&SHAPES, &Value::Min(&SMALL_COUNTS, &OVER_EMPTY)), Fmt::Us),
    fact!(? "small_over_empty_cold_max", Value::Max(&SHAPES, &Value::Max(&SMALL_COUNTS, &OVER_EMPTY)), Fmt::Us),
    fact!(? "small_over_empty_warm_min", Value::Min(&SHAPES, &Value::Min(&SMALL_COUNTS, &OVER_EMPTY_WARM)), Fmt::Us),
    fact!(? "small_over_empty_warm_max", Value::Max(&SHAPES, &Value::Max(&SMALL_COUNTS, &OVER_EMPTY_WARM)), Fmt::Us),
    fact!(? "stable_cost_cold_min", Value::Min(&SHAPES, &Value::Min(&COUNTS, &STABLE)), Fmt::Us),
    fact!(? "stable_cost_cold_max", Value::Max(&SHAPES, &Value::Max(&COUNTS, &STABLE)), Fmt::Us),
    fact!(? "stable_cost_warm_min", Value::Min(&SHAPES, &Value::Min(&COUNTS, &STABLE_WARM)), Fmt::Us),
    fact!(? "stable_cost_warm_max", Value::Max(&SHAPES, &Value::Max(&COUNTS, &STABLE_WARM)), Fmt::Us),
    // The decode sizes' bound (`SMALL_COUNTS`' filter), a constant filed with the run's numbers.
    fact!("small_tokens", Value::Const(SMALL, GPU.path), Fmt::Int),
];
/// The three-launch path kernel by kernel: `e288_t16384_count_cold` (the kernel's name less
/// `align_`), cold and warm µs.
#[rustfmt::skip]
const STEP_FACTS: &[Item] = &[
    each!(Loop::csv("shape", &STEPS, "", "shape").named(Name::Prefix), [
        each!(Loop::csv("n", &STEPS, "shape={shape}", "rows"), [
            each!(Loop::csv("k", &STEPS, "shape={shape} rows={n}", "kernel").named(Name::Fn(kernel)), [
                fact!("{shape}_t{n}_{k}_cold", Value::col(&STEPS, "shape={shape} rows={n} kernel={k}", "cold_us"), Fmt::Us),
                fact!("{shape}_t{n}_{k}_warm", Value::col(&STEPS, "shape={shape} rows={n} kernel={k}", "warm_us"), Fmt::Us),
            ]),
        ]),
    ]),
];
fn kernel(k: &str) -> String {
    k.trim_start_matches("align_").to_string()
}
fn check_steps(text: &str, name: &str) -> Result<(), String> {
    parse_steps(text, name).map(|_| ())
}

// ---------------------------------------------------------------------------------------------
// Determinism.

/// Ours bare (`hash_runs`), the PyTorch version's with a suffix (`hash_torch_runs`).
const WHO: &[(&str, &str)] = &[("align", ""), ("torch_align", "_torch")];

/// The determinism numbers: E (`hash_experts`); per implementation the sizes (`hash_tokens`,
/// `1, 64 and 4,096`; `hash_sizes`), the runs, the most distinct hashes at any size (1 when
/// deterministic) and each size's hash (`hash_t1`, `hash_torch_t1`); whether ours and
/// PyTorch's hashes agree at every size (`hash_same_as_torch`).
#[rustfmt::skip]
const HASH_FACTS: &[Item] = &[
    fact!(? "hash_experts", Value::col(&HASHES, "", "experts"), Fmt::Raw),
    each!(Loop::csv("who", &HASHES, "", "impl").named(Name::Map(WHO)), [
        fact!("hash{who}_tokens", Value::NamedText { csv: &HASHES, f: hash_tokens }, Fmt::Raw),
        fact!("hash{who}_sizes", Value::Count { csv: &HASHES, rows: "impl={who}" }, Fmt::Int),
        fact!("hash{who}_runs", Value::NamedText { csv: &HASHES, f: hash_runs }, Fmt::Raw),
        fact!("hash{who}_distinct_max", Value::Max(&SIZES, &Value::col(&HASHES, "impl={who} tokens={t}", "distinct_hashes")), Fmt::Int),
        each!(SIZES, [fact!("hash{who}_t{t}", Value::col(&HASHES, "impl={who} tokens={t}", "hash"), Fmt::Raw)]),
    ]),
    fact!(? "hash_same_as_torch", Value::NamedText { csv: &HASHES, f: same_as_torch }, Fmt::Raw),
];
const SIZES: Loop = Loop::csv("t", &HASHES, "impl={who}", "tokens");

/// The CSV's rules, checked before it is read: every impl ours or PyTorch's, every count a
/// count.
fn check_hashes(text: &str, name: &str) -> Result<(), String> {
    let t = Table::parse(text, name)?;
    for r in t.records() {
        if !WHO.iter().any(|(w, _)| *w == r("impl")) {
            return Err(format!("{name}: unknown impl `{}`", r("impl")));
        }
        for c in ["experts", "tokens", "runs", "distinct_hashes"] {
            r(c).parse::<u64>()
                .map_err(|_| format!("{name}: `{}` in column `{c}` is not a count", r(c)))?;
        }
    }
    Ok(())
}

/// A column of `{who}`'s rows, in the CSV's order, as numbers.
fn counts(c: &Ctx, col: &str) -> Result<Vec<u64>, String> {
    c.rows("impl={who}")?
        .into_iter()
        .map(|r| c.num(r, col).map(|x| x as u64))
        .collect()
}

/// `1, 64 and 4,096`: the sizes hashed.
fn hash_tokens(c: &Ctx) -> Result<Option<String>, String> {
    let s: Vec<String> = counts(c, "tokens")?.into_iter().map(thousands).collect();
    Ok(Some(match s.len() {
        0 => String::new(),
        1 => s[0].clone(),
        n => format!("{} and {}", s[..n - 1].join(", "), s[n - 1]),
    }))
}

/// The runs per size, each count once: `1,000`, or `100/1,000`.
fn hash_runs(c: &Ctx) -> Result<Option<String>, String> {
    let runs: BTreeSet<u64> = counts(c, "runs")?.into_iter().collect();
    let s: Vec<String> = runs.into_iter().map(thousands).collect();
    Ok(Some(s.join("/")))
}

/// `yes` where every size of ours has PyTorch's hash at that size, else `no`; none without
/// both.
fn same_as_torch(c: &Ctx) -> Result<Option<String>, String> {
    let col = |imp: &str| -> Result<Vec<(String, String)>, String> {
        let (t, h) = (c.table.col("tokens")?, c.table.col("hash")?);
        Ok(c.rows(&format!("impl={imp}"))?
            .into_iter()
            .map(|r| (r.fields[t].clone(), r.fields[h].clone()))
            .collect())
    };
    let (ours, torch) = (col("align")?, col("torch_align")?);
    if ours.is_empty() || torch.is_empty() {
        return Ok(None);
    }
    let same = ours.iter().all(|x| torch.contains(x));
    Ok(Some((if same { "yes" } else { "no" }).to_string()))
}

/// Chapter 3's files: the padding figure and numbers, always; the GPU run's figure, table and
/// numbers once its CSVs are committed; the steps' and the hashes' numbers with theirs.
const GROUP: spec::Group = spec::Group {
    name: "ch03",
    spec: HERE,
    first: Source {
        csv: &PADDING,
        absent: Absent::Never,
        check: Some(check_padding),
    },
    reads: &[],
    parts: &[
        Part {
            needs: &[],
            files: &[Make::Drawn(PADDING_SVG, draw_padding)],
            facts: PADDING_FACTS,
        },
        Part {
            needs: &[
                Source {
                    csv: &GPU,
                    absent: Absent::GpuRun {
                        stage: "bench",
                        copy: "ch03.csv, ch03_layout.csv, ch03_steps.csv and ch03_ceilings.csv",
                        left_out: "the timing figure, the table and the GPU numbers are left out; the padding figure and numbers are made",
                    },
                    check: None,
                },
                Source {
                    csv: &LAYOUT,
                    absent: Absent::Never,
                    check: None,
                },
            ],
            files: &[Make::Chart(SVG, &FIGURE), Make::Table(TABLE, &ALIGN_TABLE)],
            facts: GPU_FACTS,
        },
        Part {
            needs: &[
                Source {
                    csv: &GPU,
                    absent: Absent::Quiet,
                    check: None,
                },
                Source {
                    csv: &STEPS,
                    absent: Absent::Quiet,
                    check: Some(check_steps),
                },
            ],
            files: &[],
            facts: STEP_FACTS,
        },
        Part {
            needs: &[Source {
                csv: &HASHES,
                absent: Absent::GpuRun {
                    stage: "bench",
                    copy: "ch03_determinism.csv",
                    left_out: "the determinism numbers are left out",
                },
                check: Some(check_hashes),
            }],
            files: &[],
            facts: HASH_FACTS,
        },
    ],
    facts: FACTS,
    facts_title: "Chapter 3's numbers",
};

/// The group's files, generated from the repository at `root`.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    spec::generate(root, &GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::{header, BenchRow};
    use crate::figures::facts::Facts;

    const OURS: &str = "align";
    const ARRIVAL: &str = "align_arrival";
    const TORCH: &str = "torch_align";
    const PADDING_CSV: &str = PADDING.path;
    const GPU_CSV: &str = GPU.path;
    const LAYOUT_CSV: &str = LAYOUT.path;
    const STEPS_CSV: &str = super::STEPS.path;
    const HASHES_CSV: &str = HASHES.path;

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

    const STEPS_TEXT: &str =
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
            std::fs::write(d.join(STEPS_CSV), STEPS_TEXT).unwrap();
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
        let mut d = Data::default();
        d.add(&GPU, &gpu_csv(false)).unwrap();
        d.add(&LAYOUT, &layout_csv()).unwrap();
        let md = spec::pivot(&d, HERE, &ALIGN_TABLE).unwrap();
        assert!(
            !md.contains("PyTorch ÷ ours") && !md.contains("PyTorch (argsort"),
            "{md}"
        );
        assert!(md.contains("| 1 · – |"), "{md}");
        let svg = spec::chart(&d, &FIGURE).unwrap();
        assert!(!svg.contains(TORCH), "{svg}");
        let mut f = Facts::default();
        spec::facts(&d, HERE, GPU_FACTS, &mut f).unwrap();
        assert_eq!(f.get("peer_ratio_min"), None);
        assert_eq!(f.get("e128_t16_peer_ratio"), None);
        assert_eq!(f.get("e128_t16_over_empty_cold"), Some("1.00"));
        // A measured case the layout CSV lacks: an error naming the spec line and the CSV.
        let mut short = Data::default();
        short.add(&GPU, &gpu_csv(false)).unwrap();
        let layout = layout_csv().replace("e288_k8,0,512,", "e288_k8,0,513,");
        short.add(&LAYOUT, &layout).unwrap();
        let e = spec::facts(&short, HERE, GPU_FACTS, &mut f).unwrap_err();
        assert!(e.starts_with("tools/src/figures/ch03.rs:"), "{e}");
        assert!(
            e.contains(
                "bench/results/h200/ch03_layout.csv has no row with shape=e288_k8 tokens=512"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_hashes_read_back() {
        let csv = |rows: &[(&str, u64, u64, &str)]| {
            let mut s = String::from("impl,experts,tokens,runs,distinct_hashes,hash\n");
            for (imp, t, runs, h) in rows {
                s += &format!("{imp},288,{t},{runs},1,{h}\n");
            }
            s
        };
        let facts = |text: &str| {
            check_hashes(text, "h.csv")?;
            let mut d = Data::default();
            d.add(&HASHES, text)?;
            let mut f = Facts::default();
            spec::facts(&d, HERE, HASH_FACTS, &mut f)?;
            Ok::<Facts, String>(f)
        };
        let f = facts(&csv(&[
            (OURS, 1, 1000, "a"),
            (OURS, 64, 100, "b"),
            (OURS, 4096, 1000, "c"),
            (OURS, 16384, 1000, "d"),
            (TORCH, 1, 1000, "a"),
            (TORCH, 64, 1000, "x"),
        ]))
        .unwrap();
        assert_eq!(f.get("hash_tokens"), Some("1, 64, 4,096 and 16,384"));
        assert_eq!(f.get("hash_runs"), Some("100/1,000"));
        assert_eq!(f.get("hash_sizes"), Some("4"));
        assert_eq!(f.get("hash_torch_tokens"), Some("1 and 64"));
        assert_eq!(f.get("hash_torch_t64"), Some("x"));
        assert_eq!(f.get("hash_same_as_torch"), Some("no"));
        // Ours alone: no comparison; an impl neither ours nor PyTorch's: an error.
        let f = facts(&csv(&[(OURS, 1, 1000, "a")])).unwrap();
        assert_eq!(f.get("hash_same_as_torch"), None);
        let e = facts(&csv(&[("other", 1, 1000, "a")])).unwrap_err();
        assert_eq!(e, "h.csv: unknown impl `other`");
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
        // The decode sizes' bound is the one the small counts' filter reads.
        assert!(SMALL_ROWS.ends_with(&format!("rows<={SMALL}")));
    }
}
