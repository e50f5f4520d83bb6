//! Chapter 8's generated files, from the GPU run of `bench ch08` (`tools/bench/src/ch08.rs`):
//! `bench/results/h100/ch08.csv`, the routing stage (`stage`, in the arrangement the chapter
//! picks, and in each arrangement, `stage_one_block` and `stage_two_launches`) beside what it
//! replaces (`pair_align`: chapter 5's fused router from the same logits, then chapter 3's
//! align) along the row axis, and the layer with the stage (`layer_stage`) beside chapter 6's
//! (`layer_pair`) at chapter 4's token counts; a floor probe after every measured row, one
//! empty launch.
//!
//! Made from it: the row-axis figure (`ch08-rows.svg`), the timing tables of the routers and of
//! the layers (`ch08-table.md`, `ch08-layer-table.md`: cells `cold / warm`), the targets table
//! (`ch08-targets.md`: each target's worst ratio, where, and its verdict) and the facts file.
//! Every number, ratio and verdict is read off the CSV here: nothing is typed from a run.
//!
//! The floor probe of a router row is one launch reading the logits and the bias cold (what the
//! issue's "≤ 1.25× one launch + reading the logits" compares with). The probes at one row count
//! repeat one measurement (each case has its own), so the fastest counts, as in chapter 5; a
//! layer's probe at the same count reads far more (the layer's weights), so a router's probe is
//! one of the smallest read there, a layer's one of the largest.

use super::spec::{
    self, each, fact, when, Absent, Cell, Chart, Csv, Ctx, Fmt, Item, Line, Loop, Make, Name, Part,
    Pivot, Slot, Source, Style, Value,
};
use super::svg::{describe_shape, Marker};
use super::Generated;
use crate::figures::facts::{and_list, thousands};
use crate::figures::tables::fmt_us;
use std::path::Path;

/// This file, as the specs' errors name it.
const HERE: &str = "tools/src/figures/ch08.rs";
const CH08: Csv = Csv::at("bench/results/h100/ch08.csv");
const SVG: &str = "book/src/figures/ch08-rows.svg";
const TABLE: &str = "book/src/figures/ch08-table.md";
const LAYER_TABLE: &str = "book/src/figures/ch08-layer-table.md";
const TARGETS_TABLE: &str = "book/src/figures/ch08-targets.md";
const FACTS: &str = "book/src/figures/ch08-facts.md";

/// The routers `bench ch08` measures along the row axis, in the table's order.
pub const ROUTERS: [&str; 4] = [
    "stage",
    "stage_one_block",
    "stage_two_launches",
    "pair_align",
];
/// The layers it measures at chapter 4's token counts.
pub const LAYERS: [&str; 2] = ["layer_stage", "layer_pair"];
/// The facts' short names of the implementations (`{s}_{n}_one_block_cold`).
const SHORT: &[(&str, &str)] = &[
    ("stage_one_block", "one_block"),
    ("stage_two_launches", "two_launches"),
];

/// What a target's ratio is over: the fastest floor probe of the smallest read at the row count
/// (one launch reading the case's inputs cold), or another implementation's cold median.
#[derive(Clone, Copy)]
pub(crate) enum Over {
    Probe,
    Imp(&'static str),
}

/// One target of the issue: `imp`'s cold median over `over`, at every measured row count up to
/// `up_to`, at most `max` (the worst of those rows decides).
pub(crate) struct Target {
    /// The facts' name of the target (`{s}_{key}_worst`).
    pub key: &'static str,
    /// The targets table's words for it, before `≤ max×`.
    pub what: &'static str,
    pub imp: &'static str,
    pub over: Over,
    pub up_to: u64,
    pub max: f64,
    /// Whether the counts are tokens of a layer (`T = 64`) rather than rows (`64 rows`).
    pub tokens: bool,
}

/// The targets (cold, same call, both shapes).
pub const STAGE_OVER_PROBE_MAX: f64 = 1.25;
pub const STAGE_OVER_PAIR_SMALL_MAX: f64 = 0.75;
pub const STAGE_OVER_PAIR_MAX: f64 = 1.0;
pub const LAYER_OVER_PAIR_MAX: f64 = 1.0;
const TARGETS_SRC: &str = "tools/src/figures/ch08.rs (the issue's targets)";

#[rustfmt::skip]
const TARGETS: &[Target] = &[
    Target { key: "probe", what: "the stage over its floor probe, worst of 1 to 16 rows,", imp: "stage", over: Over::Probe, up_to: 16, max: STAGE_OVER_PROBE_MAX, tokens: false },
    Target { key: "pair_small", what: "the stage over the pair + align, worst of 1 to 96 rows,", imp: "stage", over: Over::Imp("pair_align"), up_to: 96, max: STAGE_OVER_PAIR_SMALL_MAX, tokens: false },
    Target { key: "pair", what: "the stage over the pair + align, worst of every row count,", imp: "stage", over: Over::Imp("pair_align"), up_to: u64::MAX, max: STAGE_OVER_PAIR_MAX, tokens: false },
    Target { key: "layer", what: "the layer with the stage over the layer with the pair, worst of every T,", imp: "layer_stage", over: Over::Imp("layer_pair"), up_to: u64::MAX, max: LAYER_OVER_PAIR_MAX, tokens: true },
];
/// [`TARGETS`]' keys, the loop the facts and the targets table run over.
const TARGET_KEYS: [&str; 4] = ["probe", "pair_small", "pair", "layer"];

/// The routers the figure draws, each in its color and marker with its legend line.
#[rustfmt::skip]
const DRAWN: &[Style] = &[
    Style::new("stage", "#0072b2", Marker::Circle, "stage: the routing stage, its arrangement for the row count"),
    Style::new("stage_one_block", "#56b4e9", Marker::Triangle, "stage_one_block: one block, one launch"),
    Style::new("stage_two_launches", "#009e73", Marker::Diamond, "stage_two_launches: route and count, then scatter"),
    Style::new("pair_align", "#d55e00", Marker::Square, "pair_align: chapter 5's fused router + chapter 3's align"),
];

/// A shape's title without its intermediate size (the routing does not read it).
pub(crate) fn shape_title(shape: &str) -> String {
    let kept: Vec<&str> = shape
        .split('_')
        .filter(|p| {
            !p.strip_prefix('i')
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    describe_shape(&kept.join("_"))
}

/// The figure: the stage in each arrangement beside the pair + align, µs per call against rows.
const FIGURE: Chart = Chart {
    csv: &CH08,
    draw: DRAWN,
    floor_from: "stage",
    panel_w: 440.0,
    panel_h: 320.0,
    left: 62.0,
    title: "The routing stage along the row axis: µs per call against rows",
    notes: &[
        "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
        "Warm: back-to-back copies in one graph, divided by their number. Both axes logarithmic.",
    ],
    panel_title: shape_title,
    x_label: "rows routed (tokens), log scale",
    floor_label: "floor: one launch + the stage's bytes at copy bw",
    probes: false,
};

/// The shapes (the empty launch's rows left out), named `glm`, `qwen3` in facts.
const SHAPES: Loop = Loop::csv("shape", &CH08, "rows>0", "shape").named(Name::Prefix);
/// The row counts of the routers at a shape, ascending.
const COUNTS: Loop = Loop::csv("n", &CH08, "shape={shape} impl=stage", "rows").numeric();
/// The token counts of the layers at a shape, ascending.
const TOKENS: Loop = Loop::csv("t", &CH08, "shape={shape} impl=layer_stage", "rows").numeric();
const IMPS: Loop = Loop::list("imp", &ROUTERS).named(Name::Map(SHORT));
const LAYER_IMPS: Loop = Loop::list("imp", &LAYERS);
const TARGET_LOOP: Loop = Loop::list("target", &TARGET_KEYS);

const fn cold(rows: &'static str) -> Value {
    Value::col(&CH08, rows, "cold_median_us")
}
const fn warm(rows: &'static str) -> Value {
    Value::col(&CH08, rows, "warm_median_us")
}
const IMP_COLD: Value = cold("shape={shape} rows={n} impl={imp}");
const IMP_WARM: Value = warm("shape={shape} rows={n} impl={imp}");
const STAGE_COLD: Value = cold("shape={shape} rows={n} impl=stage");
const PAIR_COLD: Value = cold("shape={shape} rows={n} impl=pair_align");
const ONE_BLOCK_COLD: Value = cold("shape={shape} rows={n} impl=stage_one_block");
const TWO_COLD: Value = cold("shape={shape} rows={n} impl=stage_two_launches");
const PROBE: Value = Value::named(&CH08, router_probe);
const OVER_PAIR: Value = Value::Ratio(&IMP_COLD, &PAIR_COLD);
const STAGE_OVER_PROBE: Value = Value::Ratio(&STAGE_COLD, &PROBE);
const STAGE_OVER_PAIR: Value = Value::Ratio(&STAGE_COLD, &PAIR_COLD);
const LAYER_COLD: Value = cold("shape={shape} rows={t} impl={imp}");
const LAYER_WARM: Value = warm("shape={shape} rows={t} impl={imp}");
const LAYER_STAGE_COLD: Value = cold("shape={shape} rows={t} impl=layer_stage");
const LAYER_PAIR_COLD: Value = cold("shape={shape} rows={t} impl=layer_pair");
const LAYER_OVER_PAIR: Value = Value::Ratio(&LAYER_COLD, &LAYER_PAIR_COLD);
const LAYER_PROBE: Value = Value::named(&CH08, layer_probe);
const LAUNCHES: Value = Value::distinct(&CH08, "shape={shape} impl={imp}", "launches");
const WORST: Value = Value::named(&CH08, worst);
const WORST_AT: Value = Value::named(&CH08, worst_at);
const WORST_WHERE: Value = Value::NamedText {
    csv: &CH08,
    f: worst_where,
};
const LIMIT: Value = Value::named(&CH08, limit);
const WHAT: Value = Value::NamedText {
    csv: &CH08,
    f: target_what,
};
const ONE_BLOCK_AHEAD: Value = Value::NamedText {
    csv: &CH08,
    f: one_block_ahead_up_to,
};
const STAGE_AHEAD_AT: Value = Value::NamedText {
    csv: &CH08,
    f: stage_ahead_at,
};
const STAGE_MOST_BEHIND: Value = Value::NamedText {
    csv: &CH08,
    f: stage_most_behind,
};
const MISSED: Value = Value::NamedText {
    csv: &CH08,
    f: missed,
};
const ONE_LAUNCH_UP_TO: Value = Value::NamedText {
    csv: &CH08,
    f: stage_one_launch_up_to,
};

/// The numbers the page may quote. Per shape `s` (`glm`, `qwen3`) and row count `n`:
/// `{s}_{n}_{imp}_cold` / `_warm` (imp: `stage`, `one_block`, `two_launches`, `pair_align`),
/// `{s}_{n}_probe` (the stage's floor probe), `{s}_{n}_stage_over_probe`,
/// `{s}_{n}_stage_over_pair_align`, `{s}_{n}_one_block_over_two_launches`; per token count `t`:
/// `{s}_{t}_layer_stage_cold` / `_warm`, the same for `layer_pair`, and
/// `{s}_{t}_layer_stage_over_layer_pair`; per target (`probe`, `pair_small`, `pair`, `layer`):
/// `{s}_{target}_worst` (the largest ratio over the target's rows), `{s}_{target}_worst_at` (the
/// count where it is) and `{s}_{target}_verdict` (`met` or `**missed**`, from the unrounded
/// ratio); `{s}_one_block_ahead_up_to` (the largest row count where one block is faster cold than
/// two launches, or `none`), `{s}_stage_one_launch_up_to` (the largest row count where the stage
/// as the chapter arranges it is one launch), `{s}_{imp}_launches`; for sentences,
/// `{s}_stage_ahead_at` (the row counts where the stage is faster cold than the pair + align),
/// `{s}_stage_most_behind` (where it is furthest behind) and `{s}_missed` (how many targets are
/// missed); and the targets' limits, `target_{target}`.
#[rustfmt::skip]
const GPU_FACTS: &[Item] = &[
    fact!(? "empty_cold", cold("impl=empty_kernel"), Fmt::Us),
    fact!(? "empty_warm", warm("impl=empty_kernel"), Fmt::Us),
    each!(SHAPES, [
        each!(COUNTS, [
            each!(IMPS, [
                fact!(? "{shape}_{n}_{imp}_cold", IMP_COLD, Fmt::Us),
                fact!(? "{shape}_{n}_{imp}_warm", IMP_WARM, Fmt::Us),
            ]),
            fact!(? "{shape}_{n}_probe", PROBE, Fmt::Us),
            fact!(? "{shape}_{n}_stage_over_probe", STAGE_OVER_PROBE, Fmt::Fixed(2)),
            fact!(? "{shape}_{n}_stage_over_pair_align", STAGE_OVER_PAIR, Fmt::Fixed(2)),
            fact!(? "{shape}_{n}_one_block_over_two_launches", Value::Ratio(&ONE_BLOCK_COLD, &TWO_COLD), Fmt::Fixed(2)),
        ]),
        each!(TOKENS, [
            each!(LAYER_IMPS, [
                fact!(? "{shape}_{t}_{imp}_cold", LAYER_COLD, Fmt::Us),
                fact!(? "{shape}_{t}_{imp}_warm", LAYER_WARM, Fmt::Us),
            ]),
            fact!(? "{shape}_{t}_layer_stage_over_layer_pair", Value::Ratio(&LAYER_STAGE_COLD, &LAYER_PAIR_COLD), Fmt::Fixed(2)),
        ]),
        each!(TARGET_LOOP, [
            fact!(? "{shape}_{target}_worst", WORST, Fmt::Fixed(2)),
            fact!(? "{shape}_{target}_worst_at", WORST_AT, Fmt::Int),
            when!("target=probe", [fact!(? "{shape}_probe_verdict", WORST, Fmt::AtMost(STAGE_OVER_PROBE_MAX))]),
            when!("target=pair_small", [fact!(? "{shape}_pair_small_verdict", WORST, Fmt::AtMost(STAGE_OVER_PAIR_SMALL_MAX))]),
            when!("target=pair", [fact!(? "{shape}_pair_verdict", WORST, Fmt::AtMost(STAGE_OVER_PAIR_MAX))]),
            when!("target=layer", [fact!(? "{shape}_layer_verdict", WORST, Fmt::AtMost(LAYER_OVER_PAIR_MAX))]),
        ]),
        fact!(? "{shape}_one_block_ahead_up_to", ONE_BLOCK_AHEAD, Fmt::Raw),
        fact!(? "{shape}_stage_ahead_at", STAGE_AHEAD_AT, Fmt::Raw),
        fact!(? "{shape}_stage_most_behind", STAGE_MOST_BEHIND, Fmt::Raw),
        fact!(? "{shape}_missed", MISSED, Fmt::Raw),
        fact!(? "{shape}_stage_one_launch_up_to", ONE_LAUNCH_UP_TO, Fmt::Raw),
        each!(IMPS, [
            fact!(? "{shape}_{imp}_launches", LAUNCHES, Fmt::Raw),
        ]),
    ]),
    fact!("target_probe", Value::Const(STAGE_OVER_PROBE_MAX, TARGETS_SRC), Fmt::Plain),
    fact!("target_pair_small", Value::Const(STAGE_OVER_PAIR_SMALL_MAX, TARGETS_SRC), Fmt::Plain),
    fact!("target_pair", Value::Const(STAGE_OVER_PAIR_MAX, TARGETS_SRC), Fmt::Plain),
    fact!("target_layer", Value::Const(LAYER_OVER_PAIR_MAX, TARGETS_SRC), Fmt::Plain),
];

// ---------------------------------------------------------------------------------------------
// What a spec cannot say: the probes, a target's worst row and where it is, a switch point.
// Chapter 9 reads its own CSV and targets through the same functions.

/// The fastest probe of the smallest read (`most`: the largest) at `{shape}` and `rows`.
pub(crate) fn probe_at(c: &Ctx, rows: u64, most: bool) -> Result<Option<f64>, String> {
    let mut probes = Vec::new();
    for r in c.rows(&format!("shape={{shape}} rows={rows} impl=floor_probe"))? {
        probes.push((c.num(r, "bytes")?, c.num(r, "cold_median_us")?));
    }
    let pick = if most { f64::max } else { f64::min };
    let Some(bytes) = probes.iter().map(|p| p.0).reduce(pick) else {
        return Ok(None);
    };
    Ok(probes
        .iter()
        .filter(|p| p.0 == bytes)
        .map(|p| p.1)
        .reduce(f64::min))
}

fn var_rows(c: &Ctx, v: &str) -> Result<u64, String> {
    let s = c.var(v)?;
    s.parse()
        .map_err(|_| format!("`{s}` (variable `{v}`) is not a row count"))
}

/// The router's floor probe at `{shape}` and `{n}`.
pub(crate) fn router_probe(c: &Ctx) -> Result<Option<f64>, String> {
    probe_at(c, var_rows(c, "n")?, false)
}

/// The layer's floor probe at `{shape}` and `{t}`.
pub(crate) fn layer_probe(c: &Ctx) -> Result<Option<f64>, String> {
    probe_at(c, var_rows(c, "t")?, true)
}

/// `imp`'s cold median at `{shape}` and `rows`, where measured.
pub(crate) fn cold_at(c: &Ctx, imp: &str, rows: u64) -> Result<Option<f64>, String> {
    let found = c.rows(&format!("shape={{shape}} rows={rows} impl={imp}"))?;
    found
        .first()
        .map(|r| c.num(r, "cold_median_us"))
        .transpose()
}

/// The row counts `imp` is measured at, at `{shape}`, ascending.
pub(crate) fn counts_of(c: &Ctx, imp: &str) -> Result<Vec<u64>, String> {
    let mut v = Vec::new();
    for r in c.rows(&format!("shape={{shape}} impl={imp}"))? {
        let n = c.num(r, "rows")? as u64;
        if !v.contains(&n) {
            v.push(n);
        }
    }
    v.sort();
    Ok(v)
}

/// The target `{target}` names in `targets`.
pub(crate) fn target<'t>(c: &Ctx, targets: &'t [Target]) -> Result<&'t Target, String> {
    let key = c.var("target")?;
    targets
        .iter()
        .find(|t| t.key == key)
        .ok_or_else(|| format!("no target `{key}`"))
}

/// A target's largest ratio over its row counts at `{shape}` and the count where it is (the
/// first, where several tie); `None` where no count has both sides measured.
pub(crate) fn worst_of(c: &Ctx, targets: &[Target]) -> Result<Option<(f64, u64)>, String> {
    worst_for(c, target(c, targets)?)
}

/// [`worst_of`] for the target `t`.
pub(crate) fn worst_for(c: &Ctx, t: &Target) -> Result<Option<(f64, u64)>, String> {
    let mut w: Option<(f64, u64)> = None;
    for n in counts_of(c, t.imp)? {
        if n > t.up_to {
            continue;
        }
        let den = match t.over {
            Over::Probe => probe_at(c, n, false)?,
            Over::Imp(imp) => cold_at(c, imp, n)?,
        };
        if let (Some(a), Some(b)) = (cold_at(c, t.imp, n)?, den) {
            let x = a / b;
            if w.is_none_or(|(best, _)| x > best) {
                w = Some((x, n));
            }
        }
    }
    Ok(w)
}

/// Where the worst ratio is, written for the targets table: `16 rows`, `T = 4,096`.
pub(crate) fn where_text(c: &Ctx, targets: &[Target]) -> Result<Option<String>, String> {
    let t = target(c, targets)?;
    Ok(worst_of(c, targets)?.map(|(_, n)| {
        if t.tokens {
            format!("T = {}", thousands(n))
        } else {
            format!("{} row{}", thousands(n), if n == 1 { "" } else { "s" })
        }
    }))
}

/// The largest row count at `{shape}` where `a` is faster (cold) than `b`, or `none`: where an
/// engine would switch from `a` to `b` (a count past it where `a` is ahead again would show as
/// the largest).
pub(crate) fn ahead_up_to(c: &Ctx, a: &str, b: &str) -> Result<Option<String>, String> {
    let mut last = None;
    let mut any = false;
    for n in counts_of(c, a)? {
        if let (Some(x), Some(y)) = (cold_at(c, a, n)?, cold_at(c, b, n)?) {
            any = true;
            if x < y {
                last = Some(n);
            }
        }
    }
    Ok(any.then(|| last.map_or("none".to_string(), thousands)))
}

/// `1 row`, `2, 4 and 8 rows`, with thousands separators.
fn rows_list(counts: &[u64]) -> String {
    let list = and_list(&counts.iter().map(|&n| thousands(n)).collect::<Vec<_>>());
    let plural = !(counts.len() == 1 && counts[0] == 1);
    format!("{list} row{}", if plural { "s" } else { "" })
}

/// The row counts at `{shape}` where `a` is faster (cold) than `b`, for a sentence: `no row
/// count`, `4 rows`, `2, 4 and 8 rows`. A count where `b`'s own time stands more than a quarter
/// above both its neighbours' (a sample the page should not read as `a` winning) is named in a
/// parenthesis, with `b_words` for `b`.
pub(crate) fn ahead_at_text(
    c: &Ctx,
    a: &str,
    b: &str,
    b_words: &str,
) -> Result<Option<String>, String> {
    let mut b_times: Vec<(u64, f64)> = Vec::new();
    for n in counts_of(c, b)? {
        if let Some(y) = cold_at(c, b, n)? {
            b_times.push((n, y));
        }
    }
    let (mut ahead, mut jumps) = (Vec::new(), Vec::new());
    let mut any = false;
    for (i, &(n, y)) in b_times.iter().enumerate() {
        let Some(x) = cold_at(c, a, n)? else { continue };
        any = true;
        if x < y {
            ahead.push(n);
            let jumped =
                i > 0 && i + 1 < b_times.len() && y > 1.25 * b_times[i - 1].1.max(b_times[i + 1].1);
            if jumped {
                jumps.push(n);
            }
        }
    }
    if !any {
        return Ok(None);
    }
    if ahead.is_empty() {
        return Ok(Some("no row count".to_string()));
    }
    let mut s = rows_list(&ahead);
    if !jumps.is_empty() {
        let at = match jumps == ahead {
            true => "where".to_string(),
            false => format!("at {},", rows_list(&jumps)),
        };
        s += &format!(
            " ({at} the {b_words}'s own time stands more than a quarter above both its \
             neighbours')"
        );
    }
    Ok(Some(s))
}

/// Where `a` is furthest behind `b` (cold) at `{shape}`, for a sentence: `at 24 rows (13.4 µs
/// against 8.64)`, or `nowhere` where it is never behind.
pub(crate) fn most_behind_text(c: &Ctx, a: &str, b: &str) -> Result<Option<String>, String> {
    let mut w: Option<(f64, u64, f64, f64)> = None;
    for n in counts_of(c, a)? {
        if let (Some(x), Some(y)) = (cold_at(c, a, n)?, cold_at(c, b, n)?) {
            if w.is_none_or(|(r, ..)| x / y > r) {
                w = Some((x / y, n, x, y));
            }
        }
    }
    Ok(w.map(|(r, n, x, y)| match r > 1.0 {
        true => format!(
            "at {} ({} µs against {})",
            rows_list(&[n]),
            fmt_us(x),
            fmt_us(y)
        ),
        false => "nowhere".to_string(),
    }))
}

/// How many of `targets` `{shape}` misses, for a sentence: `every target is missed`, `2 of the 4
/// targets are missed`, `no target is missed` (a target with nothing measured is left out).
pub(crate) fn missed_text(c: &Ctx, targets: &[Target]) -> Result<Option<String>, String> {
    let (mut measured, mut missed) = (0, 0);
    for t in targets {
        if let Some((w, _)) = worst_for(c, t)? {
            measured += 1;
            missed += usize::from(w > t.max);
        }
    }
    Ok((measured > 0).then(|| match missed {
        0 => "no target is missed".to_string(),
        m if m == measured => "every target is missed".to_string(),
        m => format!("{m} of the {measured} targets are missed"),
    }))
}

fn worst(c: &Ctx) -> Result<Option<f64>, String> {
    Ok(worst_of(c, TARGETS)?.map(|w| w.0))
}
fn worst_at(c: &Ctx) -> Result<Option<f64>, String> {
    Ok(worst_of(c, TARGETS)?.map(|w| w.1 as f64))
}
fn worst_where(c: &Ctx) -> Result<Option<String>, String> {
    where_text(c, TARGETS)
}
fn limit(c: &Ctx) -> Result<Option<f64>, String> {
    Ok(Some(target(c, TARGETS)?.max))
}
fn target_what(c: &Ctx) -> Result<Option<String>, String> {
    Ok(Some(target(c, TARGETS)?.what.to_string()))
}
fn stage_ahead_at(c: &Ctx) -> Result<Option<String>, String> {
    ahead_at_text(c, "stage", "pair_align", "pair + align")
}
fn stage_most_behind(c: &Ctx) -> Result<Option<String>, String> {
    most_behind_text(c, "stage", "pair_align")
}
fn missed(c: &Ctx) -> Result<Option<String>, String> {
    missed_text(c, TARGETS)
}
fn one_block_ahead_up_to(c: &Ctx) -> Result<Option<String>, String> {
    ahead_up_to(c, "stage_one_block", "stage_two_launches")
}

/// The largest row count where the stage, as the chapter arranges it, is one launch.
fn stage_one_launch_up_to(c: &Ctx) -> Result<Option<String>, String> {
    let mut last = None;
    for r in c.rows("shape={shape} impl=stage")? {
        if c.num(r, "launches")? == 1.0 {
            let n = c.num(r, "rows")? as u64;
            last = Some(last.map_or(n, |l: u64| l.max(n)));
        }
    }
    Ok(Some(last.map_or("none".to_string(), thousands)))
}

// ---------------------------------------------------------------------------------------------
// The tables.

/// The routers' table: per shape, a line per router and a column per row count; cells
/// `cold / warm` µs and, but for the pair + align, the cold time over the pair + align's; then
/// the floor probe and the stage over it.
const ROUTER_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(shape_title))),
    block_head: "**{shape}**: µs per call, cold / warm (× = cold time over pair_align's)\n\n",
    block_tail: "\n",
    rows: Loop::list("imp", &ROUTERS),
    row_if: Some((&CH08, "shape={shape} impl={imp}")),
    cols: COUNTS.named(Name::Plural("row")),
    label: Cell {
        text: "{row} ({launches})",
        slots: &[Slot::new(
            "launches",
            LAUNCHES,
            Fmt::Noun("launch", "launches"),
        )],
    },
    cell: Cell {
        text: "{cold} / {warm}{ratio}",
        slots: &[
            Slot::new("cold", IMP_COLD, Fmt::Us),
            Slot::new("warm", IMP_WARM, Fmt::Us),
            Slot::optional(
                "ratio",
                OVER_PAIR,
                Fmt::Fixed(2),
                " ({}×)",
                "imp!=pair_align",
            ),
        ],
    },
    extra: &[Line::new(
        "floor probe: one launch reading the logits and the bias, cold",
        Cell {
            text: "{probe}{stage}",
            slots: &[
                Slot::new("probe", PROBE, Fmt::Us),
                Slot::optional("stage", STAGE_OVER_PROBE, Fmt::Fixed(2), " (stage {}×)", ""),
            ],
        },
    )],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The layers' table: per shape, a line per layer and a column per token count; cells
/// `cold / warm` µs and the layer with the stage over the layer with the pair; then the layer's
/// floor probe.
const LAYERS_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(shape_title))),
    block_head: "**{shape}**: µs per layer call, cold / warm (× = cold time over layer_pair's)\n\n",
    block_tail: "\n",
    rows: LAYER_IMPS,
    row_if: Some((&CH08, "shape={shape} impl={imp}")),
    cols: TOKENS.named(Name::Plural("token")),
    // The launches vary with T (the experts' path): the label names the layer alone.
    label: Cell::ROW,
    cell: Cell {
        text: "{cold} / {warm}{ratio}",
        slots: &[
            Slot::new("cold", LAYER_COLD, Fmt::Us),
            Slot::new("warm", LAYER_WARM, Fmt::Us),
            Slot::optional(
                "ratio",
                LAYER_OVER_PAIR,
                Fmt::Fixed(2),
                " ({}×)",
                "imp!=layer_pair",
            ),
        ],
    },
    extra: &[Line::new(
        "floor probe: one launch reading the layer's bytes, cold",
        Cell {
            text: "{probe}",
            slots: &[Slot::new("probe", LAYER_PROBE, Fmt::Us)],
        },
    )],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The targets table: a line per target, a column per shape; each cell the worst ratio, where it
/// is, and the verdict (`met` or `**missed**`, from the unrounded ratio); then the measured
/// switch between the arrangements and the chapter's own.
const VERDICT_CELL: &str = "{worst}× at {at}: {v0}{v1}{v2}{v3}";
const TARGETS_PAGE: Pivot = Pivot {
    line: line!(),
    head: "<!-- generated by tools/plot from bench/results/h100/ch08.csv; do not edit -->\n\n",
    corner: "target (cold, the worst of its rows)",
    rows: TARGET_LOOP,
    cols: SHAPES.named(Name::Fn(shape_title)),
    label: Cell {
        text: "{what} ≤ {limit}×",
        slots: &[
            Slot::new("what", WHAT, Fmt::Raw),
            Slot::new("limit", LIMIT, Fmt::Plain),
        ],
    },
    cell: Cell {
        text: VERDICT_CELL,
        slots: &[
            Slot::new("worst", WORST, Fmt::Fixed(2)),
            Slot::new("at", WORST_WHERE, Fmt::Raw),
            Slot::optional(
                "v0",
                WORST,
                Fmt::AtMost(STAGE_OVER_PROBE_MAX),
                "{}",
                "target=probe",
            ),
            Slot::optional(
                "v1",
                WORST,
                Fmt::AtMost(STAGE_OVER_PAIR_SMALL_MAX),
                "{}",
                "target=pair_small",
            ),
            Slot::optional(
                "v2",
                WORST,
                Fmt::AtMost(STAGE_OVER_PAIR_MAX),
                "{}",
                "target=pair",
            ),
            Slot::optional(
                "v3",
                WORST,
                Fmt::AtMost(LAYER_OVER_PAIR_MAX),
                "{}",
                "target=layer",
            ),
        ],
    },
    extra: &[
        Line::new(
            "measured: one block faster than two launches, up to (rows)",
            Cell {
                text: "{x}",
                slots: &[Slot::new("x", ONE_BLOCK_AHEAD, Fmt::Raw)],
            },
        ),
        Line::new(
            "the stage's rule: one launch up to (rows)",
            Cell {
                text: "{x}",
                slots: &[Slot::new("x", ONE_LAUNCH_UP_TO, Fmt::Raw)],
            },
        ),
    ],
    missing: Some("–"),
    ..Pivot::PLAIN
};

/// Chapter 8's files.
const GROUP: spec::Group = spec::Group {
    name: "ch08",
    spec: HERE,
    first: Source {
        csv: &CH08,
        absent: Absent::GpuRun {
            stage: "bench",
            copy: "ch08.csv and ch08_ceilings.csv",
            left_out: "the figure, the tables and the facts are left out",
        },
        check: None,
    },
    reads: &[],
    parts: &[Part {
        needs: &[],
        files: &[
            Make::Chart(SVG, &FIGURE),
            Make::Table(TABLE, &ROUTER_TABLE),
            Make::Table(LAYER_TABLE, &LAYERS_TABLE),
            Make::Table(TARGETS_TABLE, &TARGETS_PAGE),
        ],
        facts: GPU_FACTS,
    }],
    facts: FACTS,
    facts_title: "Chapter 8's numbers",
};

/// The group's files, generated from the repository at `root` (the page's example and tree
/// join them in `figures::generate`).
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    spec::generate(root, &GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::header;
    use crate::figures::facts::Facts;
    use crate::figures::spec::Data;

    const GLM: &str = "glm_h4096_i1024_e288_k8";

    /// A bench row: `imp` at `n` rows, its cold median, launches and bytes (warm: half).
    pub(crate) fn line(
        chapter: &str,
        imp: &str,
        n: u64,
        launches: u32,
        cold: f64,
        bytes: f64,
    ) -> String {
        format!(
            "{chapter},{GLM},{imp},{n},{launches},{cold},{cold},{cold},{w},{w},{w},3.5,{bytes},0,0,0,200,H200",
            w = cold / 2.0
        )
    }

    /// A small CSV as the bench writes it: one shape, rows 1, 16 and 24, a layer at T = 1.
    fn csv() -> String {
        let l = |imp: &str, n: u64, launches: u32, cold: f64, bytes: f64| {
            line("ch08", imp, n, launches, cold, bytes)
        };
        let lines = [
            header(),
            "ch08,none,empty_kernel,0,1,3.7,3.7,3.7,0.6,0.6,0.6,3.7,0,0,0,0,200,H200".to_string(),
            l("stage", 1, 1, 6.0, 5e3),
            l("floor_probe", 1, 1, 5.0, 2e3),
            l("stage_one_block", 1, 1, 6.0, 5e3),
            // A repeat of the stage's probe: the faster counts.
            l("floor_probe", 1, 1, 4.0, 2e3),
            l("stage_two_launches", 1, 2, 9.0, 5e3),
            l("floor_probe", 1, 1, 4.5, 2e3),
            l("pair_align", 1, 2, 8.0, 5e3),
            l("floor_probe", 1, 1, 4.2, 2e3),
            l("stage", 16, 1, 6.6, 3e4),
            l("floor_probe", 16, 1, 4.4, 2e4),
            l("stage_one_block", 16, 1, 6.6, 3e4),
            l("floor_probe", 16, 1, 4.4, 2e4),
            l("stage_two_launches", 16, 2, 9.0, 3e4),
            l("floor_probe", 16, 1, 4.4, 2e4),
            l("pair_align", 16, 2, 12.0, 3e4),
            l("floor_probe", 16, 1, 4.4, 2e4),
            l("stage", 24, 2, 10.0, 4e4),
            l("floor_probe", 24, 1, 4.5, 3e4),
            l("stage_one_block", 24, 1, 11.0, 4e4),
            l("floor_probe", 24, 1, 4.5, 3e4),
            l("stage_two_launches", 24, 2, 10.0, 4e4),
            l("floor_probe", 24, 1, 4.5, 3e4),
            l("pair_align", 24, 2, 8.0, 4e4),
            l("floor_probe", 24, 1, 4.5, 3e4),
            // The layer at T = 1: its probe reads far more, and is slower, than the stage's.
            l("layer_stage", 1, 5, 66.0, 2e8),
            l("floor_probe", 1, 1, 50.0, 2e8),
            l("layer_pair", 1, 5, 60.0, 2e8),
            l("floor_probe", 1, 1, 51.0, 2e8),
        ];
        lines.join("\n") + "\n"
    }

    fn data() -> Data {
        let mut d = Data::default();
        d.add(&CH08, &csv()).unwrap();
        d
    }

    fn gpu_facts(d: &Data) -> Facts {
        let mut f = Facts::default();
        spec::facts(d, HERE, GPU_FACTS, &mut f).unwrap();
        f
    }

    #[test]
    fn sentence_facts_say_where_and_how_many() {
        assert_eq!(rows_list(&[1]), "1 row");
        assert_eq!(rows_list(&[16]), "16 rows");
        assert_eq!(rows_list(&[2, 4, 4096]), "2, 4 and 4,096 rows");
        // The stage slower at 1 row (9 against 8), so ahead only where the pair + align jumps;
        // the layer with the stage faster than with the pair, so one target of four is met.
        let text = csv()
            .replace(
                &line("ch08", "stage", 1, 1, 6.0, 5e3),
                &line("ch08", "stage", 1, 1, 9.0, 5e3),
            )
            .replace(
                &line("ch08", "layer_stage", 1, 5, 66.0, 2e8),
                &line("ch08", "layer_stage", 1, 5, 50.0, 2e8),
            );
        let mut d = Data::default();
        d.add(&CH08, &text).unwrap();
        let f = gpu_facts(&d);
        assert_eq!(
            f.get("glm_stage_ahead_at"),
            Some("16 rows (where the pair + align's own time stands more than a quarter above both its neighbours')")
        );
        assert_eq!(
            f.get("glm_stage_most_behind"),
            Some("at 24 rows (10.0 µs against 8.00)")
        );
        assert_eq!(f.get("glm_missed"), Some("3 of the 4 targets are missed"));
    }

    #[test]
    fn the_targets_list_is_the_loop_the_facts_run_over() {
        let keys: Vec<&str> = TARGETS.iter().map(|t| t.key).collect();
        assert_eq!(keys, TARGET_KEYS);
    }

    #[test]
    fn facts_are_ratios_of_the_rows_and_targets_their_worst() {
        let f = gpu_facts(&data());
        assert_eq!(f.get("empty_cold"), Some("3.70"));
        assert_eq!(f.get("glm_1_stage_cold"), Some("6.00"));
        assert_eq!(f.get("glm_1_one_block_warm"), Some("3.00"));
        assert_eq!(f.get("glm_1_pair_align_cold"), Some("8.00"));
        // The fastest probe of the smallest read: the stage's, not the layer's at the same count.
        assert_eq!(f.get("glm_1_probe"), Some("4.00"));
        assert_eq!(f.get("glm_1_stage_over_probe"), Some("1.50"));
        assert_eq!(f.get("glm_16_stage_over_probe"), Some("1.50"));
        assert_eq!(f.get("glm_24_stage_over_pair_align"), Some("1.25"));
        assert_eq!(f.get("glm_1_layer_stage_over_layer_pair"), Some("1.10"));
        // Over 1 to 16 rows: 6 / 4 and 6.6 / 4.4, a tie: the first count.
        assert_eq!(f.get("glm_probe_worst"), Some("1.50"));
        assert_eq!(f.get("glm_probe_worst_at"), Some("1"));
        assert_eq!(f.get("glm_probe_verdict"), Some("**missed**"));
        // Up to 96 rows: 0.75, 0.55 and 1.25; the worst at 24.
        assert_eq!(f.get("glm_pair_small_worst"), Some("1.25"));
        assert_eq!(f.get("glm_pair_small_worst_at"), Some("24"));
        assert_eq!(f.get("glm_pair_verdict"), Some("**missed**"));
        assert_eq!(f.get("glm_layer_worst"), Some("1.10"));
        assert_eq!(f.get("glm_layer_verdict"), Some("**missed**"));
        // One block is ahead at 1 and 16 rows, behind at 24.
        assert_eq!(f.get("glm_one_block_ahead_up_to"), Some("16"));
        // The stage is faster than the pair + align at 1 and 16 rows; at 16 the pair + align's
        // 12 µs stands more than a quarter above its neighbours' 8 and 8. Behind at 24 only.
        assert_eq!(
            f.get("glm_stage_ahead_at"),
            Some("1 and 16 rows (at 16 rows, the pair + align's own time stands more than a quarter above both its neighbours')")
        );
        assert_eq!(
            f.get("glm_stage_most_behind"),
            Some("at 24 rows (10.0 µs against 8.00)")
        );
        assert_eq!(f.get("glm_missed"), Some("every target is missed"));
        assert_eq!(f.get("glm_stage_one_launch_up_to"), Some("16"));
        assert_eq!(f.get("glm_stage_launches"), Some("1–2"));
        assert_eq!(f.get("target_pair_small"), Some("0.75"));
    }

    #[test]
    fn a_target_within_its_limit_is_met() {
        // The stage ahead of the pair + align by 0.75× or better at every row: met.
        let text = csv()
            .replace(
                &line("ch08", "pair_align", 24, 2, 8.0, 4e4),
                &line("ch08", "pair_align", 24, 2, 14.0, 4e4),
            )
            .replace(
                &line("ch08", "pair_align", 1, 2, 8.0, 5e3),
                &line("ch08", "pair_align", 1, 2, 8.5, 5e3),
            );
        let mut d = Data::default();
        d.add(&CH08, &text).unwrap();
        let f = gpu_facts(&d);
        assert_eq!(f.get("glm_pair_small_worst"), Some("0.71"));
        assert_eq!(f.get("glm_pair_small_verdict"), Some("met"));
        assert_eq!(f.get("glm_pair_verdict"), Some("met"));
    }

    #[test]
    fn the_tables_and_the_figure_read_the_same_rows() {
        let d = data();
        let t = spec::pivot(&d, HERE, &TARGETS_PAGE).unwrap();
        assert!(
            t.contains("| the stage over the pair + align, worst of 1 to 96 rows, ≤ 0.75× | 1.25× at 24 rows: **missed** |"),
            "{t}"
        );
        assert!(
            t.contains("worst of every T, ≤ 1× | 1.10× at T = 1: **missed** |"),
            "{t}"
        );
        assert!(
            t.contains("| measured: one block faster than two launches, up to (rows) | 16 |"),
            "{t}"
        );
        let r = spec::pivot(&d, HERE, &ROUTER_TABLE).unwrap();
        assert!(
            r.starts_with("**GLM: hidden 4096, 288 experts, k = 8, sigmoid + bias**"),
            "{r}"
        );
        assert!(r.contains("| stage (1–2 launches) | 6.00 / 3.00 (0.75×) | 6.60 / 3.30 (0.55×) | 10.0 / 5.00 (1.25×) |"), "{r}");
        assert!(r.contains("| 4.00 (stage 1.50×) |"), "{r}");
        let l = spec::pivot(&d, HERE, &LAYERS_TABLE).unwrap();
        assert!(l.contains("| layer_stage | 66.0 / 33.0 (1.10×) |"), "{l}");
        assert!(
            l.contains("| floor probe: one launch reading the layer's bytes, cold | 50.0 |"),
            "{l}"
        );
        let svg = spec::chart(&d, &FIGURE).unwrap();
        for imp in ROUTERS {
            assert!(svg.contains(&format!("data-impl=\"{imp}\"")), "{imp}");
        }
        assert!(!svg.contains("data-impl=\"layer_stage\""));
    }

    #[test]
    fn no_csv_no_files() {
        let dir = std::env::temp_dir().join(format!("ch08-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(generate(&dir).unwrap(), Vec::new());
        std::fs::create_dir_all(dir.join("book/src/figures")).unwrap();
        std::fs::write(dir.join(TARGETS_TABLE), "stale").unwrap();
        let e = generate(&dir).unwrap_err();
        assert!(e.contains("cannot be regenerated"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
