//! Chapter 9's generated files, from the GPU run of `bench ch09` (`tools/bench/src/ch09.rs`):
//! `bench/results/h100/ch09.csv`, the one-launch router (`one_launch`: bf16 hidden states and
//! gate in, ids, weights and chapter 3's layout out) beside chapter 6's router followed by
//! chapter 3's align (`pair_align`: the tiny GEMM or cuBLAS, chapter 5's fused router, the
//! align) and the same logits GEMM followed by chapter 8's stage (`gemm_stage`) along the row
//! axis, and the layer with it (`layer_one_launch`) at chapter 4's token counts; a floor probe
//! after every measured row, one empty launch.
//!
//! Made from it: the row-axis figure (`ch09-rows.svg`), the timing tables of the routers and of
//! the layer (`ch09-table.md`, `ch09-layer-table.md`), the targets table (`ch09-targets.md`) and
//! the facts file, through chapter 8's functions for the probes, a target's worst row and a
//! crossover. Every number, ratio and verdict is read off the CSV here.
//!
//! The floor probe of a router row is one launch reading the gate weight and the hidden rows
//! cold: the "the floor at one row (one launch + one cold read of the gate weight)". The
//! bench does not time chapter 6's layer in this session; the layer table sets beside the layer
//! with one launch chapter 8's `layer_pair`, timed by `bench ch08` in its own session (a
//! comparison across two sessions, named so wherever it is written).

use super::ch08::{
    ahead_at_text, ahead_up_to, layer_probe, missed_text, router_probe, shape_title, target,
    where_text, worst_of, Over, Target,
};
use super::spec::{
    self, each, fact, when, Absent, Cell, Chart, Csv, Ctx, Fmt, Item, Line, Loop, Make, Name, Part,
    Pivot, Slot, Source, Style, Value,
};
use super::svg::Marker;
use super::Generated;
use std::path::Path;

/// This file, as the specs' errors name it.
const HERE: &str = "tools/src/figures/ch09.rs";
const CH09: Csv = Csv::at("bench/results/h100/ch09.csv");
/// Chapter 8's run, for chapter 6's layer (`layer_pair`), which this chapter's bench does not time.
const CH08: Csv = Csv::at("bench/results/h100/ch08.csv");
/// Chapter 5's kernels alone, from Part II's run of `bench ch05` on the same GPU (chapter 5's own
/// page reads the H200's): the page explains this chapter's times with them.
const CH05: Csv = Csv::at("bench/results/h100/ch05.csv");
/// A chapter 5 cold median at the GLM-like router shape (`ch05.csv`'s shape name).
const fn ch05_glm(rows: &'static str) -> Value {
    Value::col(&CH05, rows, "cold_median_us")
}
const SVG: &str = "book/src/figures/ch09-rows.svg";
const TABLE: &str = "book/src/figures/ch09-table.md";
const LAYER_TABLE: &str = "book/src/figures/ch09-layer-table.md";
const TARGETS_TABLE: &str = "book/src/figures/ch09-targets.md";
const FACTS: &str = "book/src/figures/ch09-facts.md";

/// The routers `bench ch09` measures along the row axis, in the table's order.
pub const ROUTERS: [&str; 3] = ["one_launch", "gemm_stage", "pair_align"];

/// The targets (cold, same call, both shapes).
pub const ONE_LAUNCH_OVER_PROBE_MAX: f64 = 1.15;
pub const ONE_LAUNCH_OVER_PAIR_SMALL_MAX: f64 = 0.7;
pub const ONE_LAUNCH_OVER_PAIR_MAX: f64 = 1.0;
const TARGETS_SRC: &str = "tools/src/figures/ch09.rs (the issue's targets)";

#[rustfmt::skip]
const TARGETS: &[Target] = &[
    Target { key: "probe", what: "one launch over its floor probe at one row", imp: "one_launch", over: Over::Probe, up_to: 1, max: ONE_LAUNCH_OVER_PROBE_MAX, tokens: false },
    Target { key: "pair_small", what: "one launch over the pair + align, worst of 1 to 96 rows,", imp: "one_launch", over: Over::Imp("pair_align"), up_to: 96, max: ONE_LAUNCH_OVER_PAIR_SMALL_MAX, tokens: false },
    Target { key: "pair", what: "one launch over the pair + align, worst of every row count,", imp: "one_launch", over: Over::Imp("pair_align"), up_to: u64::MAX, max: ONE_LAUNCH_OVER_PAIR_MAX, tokens: false },
];
/// [`TARGETS`]' keys, the loop the facts and the targets table run over.
const TARGET_KEYS: [&str; 3] = ["probe", "pair_small", "pair"];

/// The routers the figure draws, each in its color and marker with its legend line.
#[rustfmt::skip]
const DRAWN: &[Style] = &[
    Style::new("one_launch", "#0072b2", Marker::Circle, "one_launch: GEMM, top-k and bookkeeping in one kernel"),
    Style::new("gemm_stage", "#009e73", Marker::Diamond, "gemm_stage: the logits GEMM + chapter 8's stage"),
    Style::new("pair_align", "#d55e00", Marker::Square, "pair_align: chapter 6's router + chapter 3's align"),
];

/// The figure: one launch beside the two-step routers, µs per call against rows.
const FIGURE: Chart = Chart {
    csv: &CH09,
    draw: DRAWN,
    floor_from: "one_launch",
    panel_w: 440.0,
    panel_h: 320.0,
    left: 62.0,
    title: "The one-launch router along the row axis: µs per call against rows",
    notes: &[
        "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
        "Warm: back-to-back copies in one graph, divided by their number. Both axes logarithmic.",
    ],
    panel_title: shape_title,
    x_label: "rows routed (tokens), log scale",
    floor_label: "floor: one launch + the router's bytes at copy bw (or FLOPs at bf16 rate)",
    probes: false,
};

/// The shapes (the empty launch's rows left out), named `glm`, `qwen3` in facts.
const SHAPES: Loop = Loop::csv("shape", &CH09, "rows>0", "shape").named(Name::Prefix);
/// The row counts of the routers at a shape, ascending.
const COUNTS: Loop = Loop::csv("n", &CH09, "shape={shape} impl=one_launch", "rows").numeric();
/// The token counts of the layer at a shape, ascending.
const TOKENS: Loop = Loop::csv("t", &CH09, "shape={shape} impl=layer_one_launch", "rows").numeric();
const IMPS: Loop = Loop::list("imp", &ROUTERS);
const TARGET_LOOP: Loop = Loop::list("target", &TARGET_KEYS);

const fn cold(rows: &'static str) -> Value {
    Value::col(&CH09, rows, "cold_median_us")
}
const fn warm(rows: &'static str) -> Value {
    Value::col(&CH09, rows, "warm_median_us")
}
const IMP_COLD: Value = cold("shape={shape} rows={n} impl={imp}");
const IMP_WARM: Value = warm("shape={shape} rows={n} impl={imp}");
const ONE_COLD: Value = cold("shape={shape} rows={n} impl=one_launch");
const PAIR_COLD: Value = cold("shape={shape} rows={n} impl=pair_align");
const FLOOR: Value = Value::col(&CH09, "shape={shape} rows={n} impl=one_launch", "floor_us");
const PROBE: Value = Value::named(&CH09, router_probe);
const OVER_PAIR: Value = Value::Ratio(&IMP_COLD, &PAIR_COLD);
const ONE_OVER_PROBE: Value = Value::Ratio(&ONE_COLD, &PROBE);
const LAYER_COLD: Value = cold("shape={shape} rows={t} impl=layer_one_launch");
const LAYER_WARM: Value = warm("shape={shape} rows={t} impl=layer_one_launch");
const LAYER_PROBE: Value = Value::named(&CH09, layer_probe);
const CH08_PAIR_COLD: Value = Value::col(
    &CH08,
    "shape={shape} rows={t} impl=layer_pair",
    "cold_median_us",
);
const CH08_PAIR_WARM: Value = Value::col(
    &CH08,
    "shape={shape} rows={t} impl=layer_pair",
    "warm_median_us",
);
const LAYER_OVER_CH08_PAIR: Value = Value::Ratio(&LAYER_COLD, &CH08_PAIR_COLD);
const LAUNCHES: Value = Value::distinct(&CH09, "shape={shape} impl={imp}", "launches");
const WORST: Value = Value::named(&CH09, worst);
const WORST_AT: Value = Value::named(&CH09, worst_at);
const WORST_WHERE: Value = Value::NamedText {
    csv: &CH09,
    f: worst_where,
};
const LIMIT: Value = Value::named(&CH09, limit);
const WHAT: Value = Value::NamedText {
    csv: &CH09,
    f: target_what,
};
const AHEAD: Value = Value::NamedText {
    csv: &CH09,
    f: one_launch_ahead_up_to,
};
const AHEAD_AT: Value = Value::NamedText {
    csv: &CH09,
    f: one_launch_ahead_at,
};
const MISSED: Value = Value::NamedText {
    csv: &CH09,
    f: missed,
};

/// The numbers the page may quote. Per shape `s` (`glm`, `qwen3`) and row count `n`:
/// `{s}_{n}_{imp}_cold` / `_warm` (imp: `one_launch`, `gemm_stage`, `pair_align`), `{s}_{n}_probe`
/// (the floor probe: one launch reading the gate weight and the hidden rows cold),
/// `{s}_{n}_floor` (the modelled floor of the CSV's `floor_us`), `{s}_{n}_one_launch_over_probe`,
/// `{s}_{n}_one_launch_over_floor`, `{s}_{n}_one_launch_over_pair_align`,
/// `{s}_{n}_gemm_stage_over_pair_align`; per token count `t`: `{s}_{t}_layer_one_launch_cold` /
/// `_warm`, `{s}_{t}_layer_probe`, and against chapter 8's run (another session)
/// `{s}_{t}_ch08_layer_pair_cold` and `{s}_{t}_layer_one_launch_over_ch08_layer_pair`; per target
/// (`probe`, `pair_small`, `pair`): `{s}_{target}_worst`, `{s}_{target}_worst_at`,
/// `{s}_{target}_verdict`; `{s}_one_launch_ahead_up_to` (the largest row count where one launch
/// is faster cold than the pair + align, or `none`), and for sentences `{s}_one_launch_ahead_at`
/// (every row count where it is) and `{s}_missed` (how many targets are missed);
/// `{s}_{imp}_launches`; `target_{target}`.
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
            fact!(? "{shape}_{n}_floor", FLOOR, Fmt::Us),
            fact!(? "{shape}_{n}_one_launch_over_probe", ONE_OVER_PROBE, Fmt::Fixed(2)),
            fact!(? "{shape}_{n}_one_launch_over_floor", Value::Ratio(&ONE_COLD, &FLOOR), Fmt::Fixed(2)),
            each!(Loop::list("imp", &["one_launch", "gemm_stage"]), [
                fact!(? "{shape}_{n}_{imp}_over_pair_align", OVER_PAIR, Fmt::Fixed(2)),
            ]),
        ]),
        each!(TOKENS, [
            fact!(? "{shape}_{t}_layer_one_launch_cold", LAYER_COLD, Fmt::Us),
            fact!(? "{shape}_{t}_layer_one_launch_warm", LAYER_WARM, Fmt::Us),
            fact!(? "{shape}_{t}_layer_probe", LAYER_PROBE, Fmt::Us),
            fact!(? "{shape}_{t}_ch08_layer_pair_cold", CH08_PAIR_COLD, Fmt::Us),
            fact!(? "{shape}_{t}_layer_one_launch_over_ch08_layer_pair", LAYER_OVER_CH08_PAIR, Fmt::Fixed(2)),
        ]),
        each!(TARGET_LOOP, [
            fact!(? "{shape}_{target}_worst", WORST, Fmt::Fixed(2)),
            fact!(? "{shape}_{target}_worst_at", WORST_AT, Fmt::Int),
            when!("target=probe", [fact!(? "{shape}_probe_verdict", WORST, Fmt::AtMost(ONE_LAUNCH_OVER_PROBE_MAX))]),
            when!("target=pair_small", [fact!(? "{shape}_pair_small_verdict", WORST, Fmt::AtMost(ONE_LAUNCH_OVER_PAIR_SMALL_MAX))]),
            when!("target=pair", [fact!(? "{shape}_pair_verdict", WORST, Fmt::AtMost(ONE_LAUNCH_OVER_PAIR_MAX))]),
        ]),
        fact!(? "{shape}_one_launch_ahead_up_to", AHEAD, Fmt::Raw),
        fact!(? "{shape}_one_launch_ahead_at", AHEAD_AT, Fmt::Raw),
        fact!(? "{shape}_missed", MISSED, Fmt::Raw),
        each!(IMPS, [
            fact!(? "{shape}_{imp}_launches", LAUNCHES, Fmt::Raw),
        ]),
    ]),
    fact!(? "ch05_glm_8192_tiny_fma_cold", ch05_glm("shape=glm_h4096_e288_k8 rows=8192 impl=tiny_gemm_fma"), Fmt::Us),
    fact!(? "ch05_glm_8192_tiny_tc_cold", ch05_glm("shape=glm_h4096_e288_k8 rows=8192 impl=tiny_gemm_tc"), Fmt::Us),
    fact!(? "ch05_glm_8192_blas_cold", ch05_glm("shape=glm_h4096_e288_k8 rows=8192 impl=blas_fused"), Fmt::Us),
    fact!(? "ch05_glm_1_tiny_cold", ch05_glm("shape=glm_h4096_e288_k8 rows=1 impl=tiny_gemm"), Fmt::Us),
    fact!(? "ch05_glm_1_fused_cold", ch05_glm("shape=glm_h4096_e288_k8 rows=1 impl=fused_router"), Fmt::Us),
    fact!("target_probe", Value::Const(ONE_LAUNCH_OVER_PROBE_MAX, TARGETS_SRC), Fmt::Plain),
    fact!("target_pair_small", Value::Const(ONE_LAUNCH_OVER_PAIR_SMALL_MAX, TARGETS_SRC), Fmt::Plain),
    fact!("target_pair", Value::Const(ONE_LAUNCH_OVER_PAIR_MAX, TARGETS_SRC), Fmt::Plain),
];

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
fn one_launch_ahead_up_to(c: &Ctx) -> Result<Option<String>, String> {
    ahead_up_to(c, "one_launch", "pair_align")
}
fn one_launch_ahead_at(c: &Ctx) -> Result<Option<String>, String> {
    ahead_at_text(c, "one_launch", "pair_align", "pair + align")
}
fn missed(c: &Ctx) -> Result<Option<String>, String> {
    missed_text(c, TARGETS)
}

/// The routers' table: per shape, a line per router and a column per row count; cells
/// `cold / warm` µs and, but for the pair + align, the cold time over the pair + align's; then
/// the floor probe and one launch over it.
const ROUTER_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(shape_title))),
    block_head: "**{shape}**: µs per call, cold / warm (× = cold time over pair_align's)\n\n",
    block_tail: "\n",
    rows: IMPS,
    row_if: Some((&CH09, "shape={shape} impl={imp}")),
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
        "floor probe: one launch reading the gate weight and the hidden rows, cold",
        Cell {
            text: "{probe}{one}",
            slots: &[
                Slot::new("probe", PROBE, Fmt::Us),
                Slot::optional(
                    "one",
                    ONE_OVER_PROBE,
                    Fmt::Fixed(2),
                    " (one_launch {}×)",
                    "",
                ),
            ],
        },
    )],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The layer's table: per shape, the layer with one launch at each token count (`cold / warm`
/// µs), its floor probe, and chapter 6's layer as `bench ch08` timed it in its own session.
const LAYERS_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(shape_title))),
    block_head: "**{shape}**: µs per layer call, cold / warm\n\n",
    block_tail: "\n",
    rows: Loop::list("imp", &["layer_one_launch"]),
    row_if: Some((&CH09, "shape={shape} impl={imp}")),
    cols: TOKENS.named(Name::Plural("token")),
    // The launches vary with T (the experts' path): the label names the layer alone.
    label: Cell::ROW,
    cell: Cell {
        text: "{cold} / {warm}",
        slots: &[
            Slot::new("cold", LAYER_COLD, Fmt::Us),
            Slot::new("warm", LAYER_WARM, Fmt::Us),
        ],
    },
    extra: &[
        Line::new(
            "floor probe: one launch reading the layer's bytes, cold",
            Cell {
                text: "{probe}",
                slots: &[Slot::new("probe", LAYER_PROBE, Fmt::Us)],
            },
        ),
        Line::new(
            "layer_pair: chapter 6's layer, timed by bench ch08 in its own session",
            Cell {
                text: "{cold} / {warm}",
                slots: &[
                    Slot::new("cold", CH08_PAIR_COLD, Fmt::Us),
                    Slot::new("warm", CH08_PAIR_WARM, Fmt::Us),
                ],
            },
        ),
    ],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The targets table: a line per target, a column per shape (the worst ratio, where, the
/// verdict); then where one launch is ahead of the pair + align.
#[rustfmt::skip]
const TARGETS_PAGE: Pivot = Pivot {
    line: line!(),
    head: "<!-- generated by tools/plot from bench/results/h100/ch09.csv; do not edit -->\n\n",
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
        text: "{worst}× at {at}: {v0}{v1}{v2}",
        slots: &[
            Slot::new("worst", WORST, Fmt::Fixed(2)),
            Slot::new("at", WORST_WHERE, Fmt::Raw),
            Slot::optional("v0", WORST, Fmt::AtMost(ONE_LAUNCH_OVER_PROBE_MAX), "{}", "target=probe"),
            Slot::optional("v1", WORST, Fmt::AtMost(ONE_LAUNCH_OVER_PAIR_SMALL_MAX), "{}", "target=pair_small"),
            Slot::optional("v2", WORST, Fmt::AtMost(ONE_LAUNCH_OVER_PAIR_MAX), "{}", "target=pair"),
        ],
    },
    extra: &[Line::new(
        "measured: one launch faster than the pair + align, up to (rows)",
        Cell {
            text: "{x}",
            slots: &[Slot::new("x", AHEAD, Fmt::Raw)],
        },
    )],
    missing: Some("–"),
    ..Pivot::PLAIN
};

/// Chapter 9's files.
const GROUP: spec::Group = spec::Group {
    name: "ch09",
    spec: HERE,
    first: Source {
        csv: &CH09,
        absent: Absent::GpuRun {
            stage: "bench",
            copy: "ch09.csv and ch09_ceilings.csv",
            left_out: "the figure, the tables and the facts are left out",
        },
        check: None,
    },
    reads: &[&CH08, &CH05],
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
    facts_title: "Chapter 9's numbers",
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

    fn line(chapter: &str, imp: &str, n: u64, launches: u32, cold: f64, bytes: f64) -> String {
        format!(
            "{chapter},{GLM},{imp},{n},{launches},{cold},{cold},{cold},{w},{w},{w},4.0,{bytes},0,0,0,200,H200",
            w = cold / 2.0
        )
    }

    /// One shape at 1, 96 and 8192 rows (one launch's cold time at 1 and 96 as given, behind at 8192), the
    /// layer at T = 1; and chapter 8's run with its `layer_pair` there.
    fn data(one_at_1: f64, one_at_96: f64) -> Data {
        let l = |imp: &str, n: u64, launches: u32, cold: f64, bytes: f64| {
            line("ch09", imp, n, launches, cold, bytes)
        };
        let mut rows = vec![
            header(),
            "ch09,none,empty_kernel,0,1,3.7,3.7,3.7,0.6,0.6,0.6,3.7,0,0,0,0,200,H200".to_string(),
        ];
        for (n, one, pair, probe) in [
            (1, one_at_1, 9.0, 5.0),
            (96, one_at_96, 10.0, 5.5),
            (8192, 60.0, 50.0, 20.0),
        ] {
            let b = 2e6 + n as f64 * 1e3;
            rows.extend([
                l("one_launch", n, 1, one, b),
                l("floor_probe", n, 1, probe, b),
                l("pair_align", n, 3, pair, b),
                l("floor_probe", n, 1, probe + 0.2, b),
                l("gemm_stage", n, 2, pair + 1.0, b),
                l("floor_probe", n, 1, probe + 0.1, b),
            ]);
        }
        rows.extend([
            l("layer_one_launch", 1, 4, 70.0, 2e8),
            l("floor_probe", 1, 1, 50.0, 2e8),
        ]);
        let mut d = Data::default();
        d.add(&CH09, &(rows.join("\n") + "\n")).unwrap();
        let ch08 = [header(), line("ch08", "layer_pair", 1, 5, 56.0, 2e8)].join("\n") + "\n";
        d.add(&CH08, &ch08).unwrap();
        // Chapter 5's kernels alone, at chapter 5's name of the GLM-like router shape.
        let ch05: Vec<String> = [
            ("tiny_gemm_fma", 8192, 1800.0),
            ("tiny_gemm_tc", 8192, 300.0),
            ("blas_fused", 8192, 41.0),
            ("tiny_gemm", 1, 6.25),
            ("fused_router", 1, 5.5),
        ]
        .iter()
        .map(|(imp, n, cold)| {
            line("ch05", imp, *n, 1, *cold, 1e6)
                .replace("glm_h4096_i1024_e288_k8", "glm_h4096_e288_k8")
        })
        .collect();
        d.add(
            &CH05,
            &([header()]
                .into_iter()
                .chain(ch05)
                .collect::<Vec<_>>()
                .join("\n")
                + "\n"),
        )
        .unwrap();
        d
    }

    fn gpu_facts(d: &Data) -> Facts {
        let mut f = Facts::default();
        spec::facts(d, HERE, GPU_FACTS, &mut f).unwrap();
        f
    }

    #[test]
    fn the_targets_list_is_the_loop_the_facts_run_over() {
        let keys: Vec<&str> = TARGETS.iter().map(|t| t.key).collect();
        assert_eq!(keys, TARGET_KEYS);
    }

    #[test]
    fn facts_targets_and_the_crossover_are_read_off_the_rows() {
        let f = gpu_facts(&data(6.0, 7.0));
        assert_eq!(f.get("glm_1_one_launch_cold"), Some("6.00"));
        assert_eq!(f.get("glm_1_probe"), Some("5.00"));
        assert_eq!(f.get("glm_1_floor"), Some("4.00"));
        assert_eq!(f.get("glm_1_one_launch_over_probe"), Some("1.20"));
        assert_eq!(f.get("glm_1_one_launch_over_floor"), Some("1.50"));
        assert_eq!(f.get("glm_96_one_launch_over_pair_align"), Some("0.70"));
        assert_eq!(f.get("glm_96_gemm_stage_over_pair_align"), Some("1.10"));
        // The floor target reads one row only: 6 / 5 > 1.15.
        assert_eq!(f.get("glm_probe_worst"), Some("1.20"));
        assert_eq!(f.get("glm_probe_worst_at"), Some("1"));
        assert_eq!(f.get("glm_probe_verdict"), Some("**missed**"));
        // Chapter 5's kernels, read off its CSV at its own shape name.
        assert_eq!(f.get("ch05_glm_8192_tiny_fma_cold"), Some("1800"));
        assert_eq!(f.get("ch05_glm_1_tiny_cold"), Some("6.25"));
        assert_eq!(f.get("ch05_glm_1_fused_cold"), Some("5.50"));
        // Up to 96 rows: 0.67 and 0.70, met; over every count 8192's 1.2 decides.
        assert_eq!(f.get("glm_pair_small_worst"), Some("0.70"));
        assert_eq!(f.get("glm_pair_small_verdict"), Some("met"));
        assert_eq!(f.get("glm_pair_worst_at"), Some("8192"));
        assert_eq!(f.get("glm_pair_verdict"), Some("**missed**"));
        assert_eq!(f.get("glm_one_launch_ahead_up_to"), Some("96"));
        // The layer, and chapter 8's layer with the pair from its own run.
        assert_eq!(f.get("glm_1_layer_probe"), Some("50.0"));
        assert_eq!(
            f.get("glm_1_layer_one_launch_over_ch08_layer_pair"),
            Some("1.25")
        );
        assert_eq!(f.get("glm_pair_align_launches"), Some("3"));
        // Behind from 96 rows: ahead up to 1, and the small-rows target missed.
        let f = gpu_facts(&data(6.0, 12.0));
        assert_eq!(f.get("glm_one_launch_ahead_up_to"), Some("1"));
        assert_eq!(f.get("glm_pair_small_verdict"), Some("**missed**"));
        // Behind everywhere: no crossover.
        let f = gpu_facts(&data(10.0, 12.0));
        assert_eq!(f.get("glm_one_launch_ahead_up_to"), Some("none"));
    }

    #[test]
    fn the_tables_and_the_figure_read_the_same_rows() {
        let d = data(6.0, 7.0);
        let t = spec::pivot(&d, HERE, &TARGETS_PAGE).unwrap();
        assert!(
            t.contains("| one launch over its floor probe at one row ≤ 1.15× | 1.20× at 1 row: **missed** |"),
            "{t}"
        );
        assert!(
            t.contains("≤ 1× | 1.20× at 8,192 rows: **missed** |"),
            "{t}"
        );
        assert!(t.contains("up to (rows) | 96 |"), "{t}");
        let r = spec::pivot(&d, HERE, &ROUTER_TABLE).unwrap();
        assert!(
            r.contains("| one_launch (1 launch) | 6.00 / 3.00 (0.67×) |"),
            "{r}"
        );
        assert!(r.contains("| 5.00 (one_launch 1.20×) |"), "{r}");
        let l = spec::pivot(&d, HERE, &LAYERS_TABLE).unwrap();
        assert!(l.contains("| layer_one_launch | 70.0 / 35.0 |"), "{l}");
        assert!(l.contains("in its own session | 56.0 / 28.0 |"), "{l}");
        let svg = spec::chart(&d, &FIGURE).unwrap();
        for imp in ROUTERS {
            assert!(svg.contains(&format!("data-impl=\"{imp}\"")), "{imp}");
        }
    }
}
