//! Chapter 4's generated files, from the GPU run of `bench ch04` (`tools/bench/src/ch04.rs`):
//! `bench/results/h100/ch04.csv` (the fused layer `fused`, its variants `fused_*`, chapter 2's
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

use super::facts::Facts;
use super::spec::{
    self, each, fact, if_rows, when, Absent, Cell, Chart, Csv, Ctx, Data, Fmt, Item, Line, Loop,
    Make, Name, Part, Pivot, Slot, Source, Style, Value,
};
use super::svg::{shapes, Marker, Series};
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

/// `FILE` in the folder of the GPU that chapter 4's page reads (one place to name it: the tuning
/// files, the bench's CSVs and the compiler's report all come from that GPU's runs).
macro_rules! gpu_file {
    ($file:literal) => {
        concat!("bench/results/h100/", $file)
    };
}
use gpu_file;

const GPU_CSV: &str = gpu_file!("ch04.csv");
const LAYOUT_CSV: &str = gpu_file!("ch04_layout.csv");
const STEPS_CSV: &str = gpu_file!("ch04_steps.csv");
const CHECK_CSV: &str = gpu_file!("ch04_check.csv");
const CEILINGS_CSV: &str = gpu_file!("ch04_ceilings.csv");
const SVG: &str = "book/src/figures/ch04-fused.svg";
const FUSION_SVG: &str = "book/src/figures/ch04-fusion.svg";
const RATES_SVG: &str = "book/src/figures/ch04-rates.svg";
const FLOOR_SVG: &str = "book/src/figures/ch04-floor.svg";
const PTXAS_LOG: &str = gpu_file!("logs/ptxas_ch04.log");
/// What says which run made each of that folder's files.
const RESULTS_README: &str = gpu_file!("README.md");
const PTXAS_TABLE: &str = "book/src/figures/ch04-ptxas.md";
const TARGETS_TABLE: &str = "book/src/figures/ch04-targets.md";
const TABLE: &str = "book/src/figures/ch04-fused-table.md";
const FACTS: &str = "book/src/figures/ch04-facts.md";

/// The implementations, as the CSV names them.
const OURS: &str = "fused";
const GROUPED: &str = "ch02_grouped";
const TORCH_GMM: &str = "torch_grouped_mm";
const TORCH_LOOP: &str = "torch_loop";
/// The engines' fused MoE kernel, written in Triton (`tools/peers/engines_moe.py`), its align given
/// free.
const ENGINES: &str = "engines_triton";
/// Ours forced onto the tile a GPU without sm_90a gets (`choose::portable_tile`).
const PORTABLE: &str = "fused_portable";
/// The implementations compared with ours, in the order they are listed.
const OTHERS: [&str; 4] = [ENGINES, GROUPED, TORCH_GMM, TORCH_LOOP];

/// The group's files, generated from the repository at `root`: the tuning run's, the
/// compiler's report, then the GPU run's (`GROUP`).
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
    out.extend(spec::generate(root, &GROUP)?);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The GPU run's files as a spec. The timing figure is a chart and the numbers are facts specs;
// the fusion, rates and floor figures (line charts on a linear axis), the table and the targets
// table stay named functions (figs.rs, `table`, targets.rs), drawn from the same CSVs.

/// This file, as the specs' errors name it.
const HERE: &str = "tools/src/figures/ch04/mod.rs";
const GPU: Csv = Csv::at(GPU_CSV);
const LAYOUT: Csv = Csv::at(LAYOUT_CSV);
const STEPS: Csv = Csv::at(STEPS_CSV);
const CHECK: Csv = Csv::at(CHECK_CSV);
const CEILINGS: Csv = Csv::at(CEILINGS_CSV);

/// Where an implementation is listed: ours, its variants (in the CSV's order), then
/// [`OTHERS`]; anything else (the probe, the empty launch) is not.
fn rank(imp: &str) -> Option<usize> {
    match imp {
        OURS => Some(0),
        _ if is_variant(imp) => Some(1),
        _ => OTHERS.iter().position(|o| *o == imp).map(|k| k + 2),
    }
}

/// An implementation in a fact's name: ours bare (`qwen3_t1_cold`), the others as a suffix
/// (`qwen3_t1_ch02_grouped_cold`).
fn suffix(imp: &str) -> String {
    match imp {
        OURS => String::new(),
        other => format!("_{other}"),
    }
}

/// The timing figure: one panel per shape, µs per call against tokens, log-log; ours and the
/// others (cold: solid, markers, p10–p90 whiskers; warm: dashed), the floor dotted.
#[rustfmt::skip]
const DRAWN: &[Style] = &[
    Style::new(OURS, "#0072b2", Marker::Circle, "ours: path, fusion and tiles by the rules and the tuned table"),
    Style::new(PORTABLE, "#56b4e9", Marker::Diamond, "ours on the portable tile (w2x2_k64_n4_s3: a GPU without sm_90a)"),
    Style::new(ENGINES, "#009e73", Marker::Diamond, "the engines' Triton fused MoE (tuned configurations; align not timed)"),
    Style::new(GROUPED, "#e69f00", Marker::Triangle, "chapter 2: one cuBLAS GEMM per active expert and projection"),
    Style::new(TORCH_GMM, "#d55e00", Marker::Square, "PyTorch: sort + torch._grouped_mm ×2"),
    Style::new(TORCH_LOOP, "#000000", Marker::Square, "PyTorch: per-expert loop (Hugging Face eager)"),
];
const FIGURE: Chart = Chart {
    csv: &GPU,
    draw: DRAWN,
    floor_from: OURS,
    panel_w: 460.0,
    panel_h: 340.0,
    left: 62.0,
    title: "The MoE experts for a routing given, bf16: µs per call against tokens",
    notes: &[
        "The same routings, weights and hidden states for all; the router is not timed (nor the engines' align); both axes logarithmic.",
        "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
        "Warm: back-to-back copies in one graph, divided by their number.",
    ],
    panel_title,
    x_label: "tokens T (k pairs each), log scale",
    floor_label: "floor: a launch + touched weights at copy bw, or FLOPs at bf16 rate",
    probes: false,
};

/// The measured shapes (the empty launch's row, at 0 tokens, left out), `qwen3` in facts.
const SHAPES: Loop = Loop::csv("shape", &GPU, "rows>0", "shape").named(Name::Prefix);
/// The token counts measured at a shape, ascending.
const COUNTS: Loop = Loop::csv("n", &GPU, "shape={shape} rows>0", "rows").numeric();
/// The implementations at a shape, as listed ([`rank`]), named as facts name them ([`suffix`]).
const IMPS: Loop =
    Loop::ranked("imp", &GPU, "shape={shape} rows>0", "impl", rank).named(Name::Fn(suffix));

/// Column `col` of the run's first row matching `rows`.
const fn at(rows: &'static str, col: &'static str) -> Value {
    Value::col(&GPU, rows, col)
}
const ME: &str = "shape={shape} rows={n} impl=fused";
const IMP: &str = "shape={shape} rows={n} impl={imp}";
const COLD: Value = at(ME, "cold_median_us");
const FLOOR: Value = at(ME, "floor_us");
const OVER_FLOOR: Value = Value::Ratio(&COLD, &FLOOR);
const OVER_OURS: Value = Value::Ratio(&at(IMP, "cold_median_us"), &COLD);
const OVER_OURS_WARM: Value = Value::Ratio(&at(IMP, "warm_median_us"), &at(ME, "warm_median_us"));
const TBS: Value = Value::Per(&at(ME, "cold_gbs"), 1e3);
const TFLOPS: Value = at(ME, "cold_tflops");
/// A measured case's layout.
const fn layout(rows: &'static str, col: &'static str) -> Value {
    Value::col(&LAYOUT, rows, col)
}
const CASE: &str = "shape={shape} tokens={n}";
const TARGETS: &str = "tools/src/figures/ch04/targets.rs (the step's targets)";

/// The numbers chapter 4's prose quotes from the GPU run: the ceilings; the targets, from the
/// constants the targets table judges by; then per shape (`qwen3`, `glm`) and token count
/// (`qwen3_t1_…`): each implementation's times (`_cold`, `_warm`; ours bare, the others
/// `_ch02_grouped_cold`, `_torch_grouped_mm_cold`, …) and launches, the spread of ours
/// (`_cold_p10`, `_cold_p90`: where a step's time is within it), the others over ours
/// (`_over_ours_torch_grouped_mm`, cold; `…_warm`), the floor and ours over it (`_floor`,
/// `_over_floor`; `_over_floor_4`, to four places, for a case that sits on its target;
/// `_beyond_1_1_floor_us`: how much faster the layer must get to come within the 8-to-512-token
/// target, negative where it is within), our TB/s on touched weights and TFLOP/s (`_tbs`,
/// `_tflops`), the MB touched, the probe, and the layout (active experts, BLOCK_M, path; with
/// tiles, the share of their rows used, the padding and the paired tiles); then per shape the
/// extremes of each other implementation over ours (`qwen3_over_ours_torch_grouped_mm_min`,
/// `_max`) and our best rates (`qwen3_tbs_max`, `qwen3_tflops_max`).
#[rustfmt::skip]
const GPU_FACTS: &[Item] = &[
    fact!("copy_gbs", Value::col(&CEILINGS, "", "copy_gbs"), Fmt::Fixed(0)),
    fact!("bf16_tflops", Value::col(&CEILINGS, "", "bf16_tflops"), Fmt::Fixed(0)),
    fact!("target_t1_over_floor", Value::Const(WITHIN_FLOOR_1, TARGETS), Fmt::Plain),
    fact!("target_t8_t512_over_floor", Value::Const(WITHIN_FLOOR_8_TO_512, TARGETS), Fmt::Plain),
    fact!("target_t4096_share_pct", Value::Times(100.0, &Value::Const(SHARE_OF_BF16_4096, TARGETS)), Fmt::Fixed(0)),
    fact!(? "empty_cold", at("impl=empty_kernel", "cold_median_us"), Fmt::Us),
    fact!(? "empty_warm", at("impl=empty_kernel", "warm_median_us"), Fmt::Us),
    each!(SHAPES, [
        each!(COUNTS, [
            each!(IMPS, [
                fact!(? "{shape}_t{n}{imp}_cold", at(IMP, "cold_median_us"), Fmt::Us),
                fact!(? "{shape}_t{n}{imp}_warm", at(IMP, "warm_median_us"), Fmt::Us),
                fact!(? "{shape}_t{n}{imp}_launches", at(IMP, "launches"), Fmt::Raw),
                when!("imp=fused", [
                    fact!(? "{shape}_t{n}_cold_p10", at(ME, "cold_p10_us"), Fmt::Us),
                    fact!(? "{shape}_t{n}_cold_p90", at(ME, "cold_p90_us"), Fmt::Us),
                ]),
                when!("imp!=fused", [
                    fact!(? "{shape}_t{n}_over_ours{imp}", OVER_OURS, Fmt::Fixed(2)),
                    fact!(? "{shape}_t{n}_over_ours{imp}_warm", OVER_OURS_WARM, Fmt::Fixed(2)),
                ]),
            ]),
            fact!(? "{shape}_t{n}_floor", FLOOR, Fmt::Us),
            fact!(? "{shape}_t{n}_over_floor", OVER_FLOOR, Fmt::Fixed(2)),
            fact!(? "{shape}_t{n}_over_floor_4", OVER_FLOOR, Fmt::Fixed(4)),
            fact!(? "{shape}_t{n}_beyond_1_1_floor_us", Value::Diff(&COLD, &Value::Times(WITHIN_FLOOR_8_TO_512, &FLOOR)), Fmt::Us),
            fact!(? "{shape}_t{n}_tbs", TBS, Fmt::Fixed(2)),
            fact!(? "{shape}_t{n}_tflops", TFLOPS, Fmt::Fixed(1)),
            fact!(? "{shape}_t{n}_touched_mb", Value::Per(&at(ME, "bytes"), 1e6), Fmt::Thousands),
            fact!(? "{shape}_t{n}_probe_cold", at("shape={shape} rows={n} impl=floor_probe", "cold_median_us"), Fmt::Us),
            fact!(? "{shape}_t{n}_active", layout(CASE, "active_experts"), Fmt::Raw),
            fact!(? "{shape}_t{n}_block_m", layout(CASE, "block_m"), Fmt::Raw),
            fact!(? "{shape}_t{n}_path", layout(CASE, "path"), Fmt::Raw),
            // With tiles (the tiled path): how their rows are used.
            fact!(? "{shape}_t{n}_tiles", layout("shape={shape} tokens={n} tiles>0", "tiles"), Fmt::Raw),
            fact!(? "{shape}_t{n}_rows_used_pct", ROWS_USED, Fmt::Fixed(1)),
            fact!(? "{shape}_t{n}_padding_pct", Value::named(&LAYOUT, padding_pct), Fmt::Fixed(1)),
            fact!(? "{shape}_t{n}_paired_tiles_pct", Value::named(&LAYOUT, paired_tiles_pct), Fmt::Fixed(0)),
        ]),
        each!(IMPS, [when!("imp!=fused", [
            fact!(? "{shape}_over_ours{imp}_min", Value::Min(&COUNTS, &OVER_OURS), Fmt::Fixed(2)),
            fact!(? "{shape}_over_ours{imp}_max", Value::Max(&COUNTS, &OVER_OURS), Fmt::Fixed(2)),
        ])]),
        fact!(? "{shape}_tbs_max", Value::Max(&COUNTS, &TBS), Fmt::Fixed(2)),
        fact!(? "{shape}_tflops_max", Value::Max(&COUNTS, &TFLOPS), Fmt::Fixed(1)),
    ]),
];
const ROWS_USED: Value = Value::named(&LAYOUT, rows_used_pct);

/// The case's layout, where it has tiles: (pairs, BLOCK_M, tiles, paired tiles).
fn tiled(c: &Ctx) -> Result<Option<[f64; 4]>, String> {
    let Some(r) = c
        .rows("shape={shape} tokens={n} tiles>0")?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let mut v = [0.0; 4];
    for (x, col) in v
        .iter_mut()
        .zip(["pairs", "block_m", "tiles", "paired_tiles"])
    {
        *x = c.num(r, col)?;
    }
    Ok(Some(v))
}
/// The share of the tiles' rows that hold a pair, in percent.
fn rows_used_pct(c: &Ctx) -> Result<Option<f64>, String> {
    Ok(tiled(c)?.map(|[pairs, bm, tiles, _]| 100.0 * pairs / (tiles * bm)))
}
/// The rest of the tiles' rows: padding, in percent.
fn padding_pct(c: &Ctx) -> Result<Option<f64>, String> {
    Ok(rows_used_pct(c)?.map(|p| 100.0 - p))
}
/// The tiles whose cluster neighbour (tile 2j with 2j + 1) is of the same expert, in percent.
fn paired_tiles_pct(c: &Ctx) -> Result<Option<f64>, String> {
    Ok(tiled(c)?.map(|[_, _, tiles, paired]| 100.0 * paired / tiles))
}

/// The fused layer kernel by kernel (`ch04_steps.csv`): `qwen3_t1_step1_gemm1_swiglu_na_cold`
/// (the kernel's name less its namespace and `fused_`). As measured: a step is the difference of
/// two prefixes timed apart, and one that comes out negative says those runs differed by more
/// than the step, which the page must see rather than a zero.
#[rustfmt::skip]
const STEP_FACTS: &[Item] = &[
    each!(Loop::csv("shape", &STEPS, "", "shape").named(Name::Prefix), [
        each!(Loop::csv("n", &STEPS, "shape={shape}", "rows"), [
            each!(Loop::csv("st", &STEPS, "shape={shape} rows={n}", "step"), [
                each!(Loop::csv("k", &STEPS, STEP, "kernel").named(Name::Fn(kernel)), [
                    fact!("{shape}_t{n}_step{st}_{k}_cold", Value::col(&STEPS, STEP, "cold_us"), Fmt::Us),
                    fact!("{shape}_t{n}_step{st}_{k}_warm", Value::col(&STEPS, STEP, "warm_us"), Fmt::Us),
                ]),
            ]),
        ]),
    ]),
];
const STEP: &str = "shape={shape} rows={n} step={st}";
fn kernel(k: &str) -> String {
    k.rsplit("::")
        .next()
        .unwrap_or(k)
        .trim_start_matches("fused_")
        .to_string()
}
fn check_steps(text: &str, name: &str) -> Result<(), String> {
    parse_steps(text, name).map(|_| ())
}

/// From `ch04_check.csv`: per shape and checked implementation, the largest relative error over
/// the token counts (`qwen3_check_fused_vs_ch02_grouped`, `qwen3_check_torch_grouped_mm_vs_fused`),
/// and whether every check passed (`checks_ok`: `yes` or `no`).
#[rustfmt::skip]
const CHECK_FACTS: &[Item] = &[
    each!(Loop::csv("shape", &CHECK, "", "shape").named(Name::Prefix), [
        each!(Loop::csv("imp", &CHECK, "shape={shape}", "impl"), [
            each!(Loop::csv("ag", &CHECK, "shape={shape} impl={imp}", "against"), [
                fact!("{shape}_check_{imp}_vs_{ag}", Value::Max(&CHECKED, &Value::col(&CHECK, "shape={shape} impl={imp} against={ag} tokens={t}", "relative")), Fmt::Sci(1)),
            ]),
        ]),
    ]),
    fact!("checks_ok", Value::NamedText { csv: &CHECK, f: checks_ok }, Fmt::Raw),
];
const CHECKED: Loop = Loop::csv(
    "t",
    &CHECK,
    "shape={shape} impl={imp} against={ag}",
    "tokens",
);
fn checks_ok(c: &Ctx) -> Result<Option<String>, String> {
    let failed = c.rows("ok!=1")?.len();
    Ok(Some((if failed == 0 { "yes" } else { "no" }).to_string()))
}

/// A line of ours over something: `{r}×`, `r` to `d` places.
macro_rules! times {
    ($value:expr, $d:expr) => {
        Cell {
            text: "{r}×",
            slots: &[Slot::new("r", $value, Fmt::Fixed($d))],
        }
    };
}
/// A line of another implementation's times over ours, where it was measured at the shape.
macro_rules! over_ours {
    ($imp:literal) => {
        Line::new(
            concat!($imp, " ÷ ours"),
            Cell {
                text: "{c}× / {w}×",
                slots: &[
                    Slot::new(
                        "c",
                        Value::Ratio(
                            &at(
                                concat!("shape={shape} rows={n} impl=", $imp),
                                "cold_median_us",
                            ),
                            &COLD,
                        ),
                        Fmt::Fixed(2),
                    ),
                    Slot::new(
                        "w",
                        Value::Ratio(
                            &at(
                                concat!("shape={shape} rows={n} impl=", $imp),
                                "warm_median_us",
                            ),
                            &at(ME, "warm_median_us"),
                        ),
                        Fmt::Fixed(2),
                    ),
                ],
            },
        )
        .only_if(&GPU, concat!("shape={shape} rows>0 impl=", $imp))
    };
}
const PROBE_ROWS: &str = "shape={shape} rows={n} impl=floor_probe";

/// The table the chapter quotes: one block per shape, one column per token count; the active
/// experts, the path and BLOCK_M, each implementation (`cold / warm` µs), the floor and ours over
/// it, our achieved TB/s on touched weights and TFLOP/s, each other implementation over ours
/// (the variants over ours are the fusion figure's), and the launches.
#[rustfmt::skip]
const FUSED_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(describe))),
    block_head: "**{shape}**, bf16: µs per call, cold / warm{ec}{ew}\n\n",
    block_slots: &[
        Slot::optional("ec", at("impl=empty_kernel", "cold_median_us"), Fmt::Us, "; one empty launch: {}", ""),
        Slot::optional("ew", at("impl=empty_kernel", "warm_median_us"), Fmt::Us, " / {}", ""),
    ],
    block_tail: "\n",
    lead: &[Line::new("active experts · path, BLOCK_M", Cell {
        text: "{a} · {p}{b}",
        slots: &[
            Slot::new("a", layout(CASE, "active_experts"), Fmt::Raw),
            Slot::new("p", layout(CASE, "path"), Fmt::Raw),
            // The decode path has no tiles: its BLOCK_M (0) is not written.
            Slot::optional("b", layout("shape={shape} tokens={n} block_m>0", "block_m"), Fmt::Raw, ", {}", ""),
        ],
    })],
    rows: IMPS.named(Name::Fn(label)),
    cols: COUNTS.named(Name::Plural("token")),
    cell: Cell {
        text: "{c} / {w}",
        slots: &[Slot::new("c", at(IMP, "cold_median_us"), Fmt::Us), Slot::new("w", at(IMP, "warm_median_us"), Fmt::Us)],
    },
    extra: &[
        Line::new("floor: one launch + touched weights at copy bw (or FLOPs at the bf16 rate)", Cell {
            text: "{f}",
            slots: &[Slot::new("f", FLOOR, Fmt::Us)],
        }),
        Line::new("one launch reading the touched weights, measured", Cell {
            text: "{c} / {w}",
            slots: &[Slot::new("c", at(PROBE_ROWS, "cold_median_us"), Fmt::Us), Slot::new("w", at(PROBE_ROWS, "warm_median_us"), Fmt::Us)],
        })
        .only_if(&GPU, "shape={shape} rows>0 impl=floor_probe"),
        Line::new("ours ÷ floor (cold)", times!(OVER_FLOOR, 1)),
        Line::new("ours: TB/s on touched weights · TFLOP/s (cold)", Cell {
            text: "{t} · {f}",
            slots: &[Slot::new("t", TBS, Fmt::Fixed(2)), Slot::new("f", TFLOPS, Fmt::Fixed(1))],
        }),
        over_ours!("engines_triton"),
        over_ours!("fused_portable"),
        over_ours!("ch02_grouped"),
        over_ours!("torch_grouped_mm"),
        over_ours!("torch_loop"),
        Line::new("launches: {imps}", Cell {
            text: "{l}",
            slots: &[Slot::new("l", Value::Join { each: &IMPS, value: &at(IMP, "launches"), fmt: Fmt::Raw, sep: " · ", or: "–" }, Fmt::Raw)],
        })
        .labelled(&[Slot::new("imps", Value::Join { each: &IMPS, value: &Value::Var("imp"), fmt: Fmt::Raw, sep: " · ", or: "" }, Fmt::Raw)]),
    ],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The run's CSV, parsed, for the drawings.
fn bench_rows(d: &Data) -> Result<Vec<BenchRow>, String> {
    parse_csv(d.text(&GPU)?, GPU_CSV)
}
/// The ceilings: (copy GB/s, bf16 TFLOP/s).
fn ceilings(d: &Data) -> Result<(f64, f64), String> {
    let t = Table::parse(d.text(&CEILINGS)?, CEILINGS_CSV)?;
    Ok((t.num(&[], "copy_gbs")?, t.num(&[], "bf16_tflops")?))
}
fn draw_fusion(d: &Data) -> Result<Option<String>, String> {
    let rows = bench_rows(d)?;
    if rows.iter().any(|r| is_variant(&r.imp)) {
        return Ok(Some(fusion_svg(&rows)));
    }
    eprintln!("plot: ch04: no fused_* variant in {GPU_CSV}: the fusion figure is left out");
    Ok(None)
}
fn draw_rates(d: &Data) -> Result<Option<String>, String> {
    let (copy_gbs, bf16_tflops) = ceilings(d)?;
    Ok(Some(rates_svg(&bench_rows(d)?, copy_gbs, bf16_tflops)))
}
fn draw_floor(d: &Data) -> Result<Option<String>, String> {
    Ok(Some(floor_svg(&bench_rows(d)?)))
}
fn draw_targets(d: &Data) -> Result<Option<String>, String> {
    Ok(Some(targets_table(&bench_rows(d)?, ceilings(d)?.1)))
}

/// The GPU run's files: nothing until `ch04.csv` is committed; the steps' and the checks'
/// numbers with their CSVs.
const GROUP: spec::Group = spec::Group {
    name: "ch04",
    spec: HERE,
    first: Source {
        csv: &GPU,
        absent: Absent::GpuRun {
            stage: "bench",
            copy: "ch04.csv, ch04_layout.csv, ch04_steps.csv, ch04_check.csv and ch04_ceilings.csv",
            left_out: "the figures, the table and the facts are left out",
        },
        check: None,
    },
    reads: &[&CEILINGS],
    parts: &[
        Part {
            needs: &[Source {
                csv: &LAYOUT,
                absent: Absent::Never,
                check: Some(check_layout),
            }],
            files: &[
                Make::Chart(SVG, &FIGURE),
                Make::Drawn(FUSION_SVG, draw_fusion),
                Make::Drawn(RATES_SVG, draw_rates),
                Make::Drawn(FLOOR_SVG, draw_floor),
                Make::Table(TABLE, &FUSED_TABLE),
                Make::Drawn(TARGETS_TABLE, draw_targets),
            ],
            facts: GPU_FACTS,
        },
        Part {
            needs: &[Source {
                csv: &STEPS,
                absent: Absent::Quiet,
                check: Some(check_steps),
            }],
            files: &[],
            facts: STEP_FACTS,
        },
        Part {
            needs: &[Source {
                csv: &CHECK,
                absent: Absent::Quiet,
                check: None,
            }],
            files: &[],
            facts: CHECK_FACTS,
        },
    ],
    facts: FACTS,
    facts_title: "Chapter 4's numbers",
};

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

/// `ch04_layout.csv`'s own rule, checked before it is read: its counts are numbers.
fn check_layout(text: &str, name: &str) -> Result<(), String> {
    let t = Table::parse(text, name)?;
    for r in t.records() {
        for c in [
            "tokens",
            "pairs",
            "active_experts",
            "block_m",
            "tiles",
            "paired_tiles",
            "touched_bytes",
        ] {
            r(c).parse::<f64>()
                .map_err(|_| format!("{name}: `{}` in column {c} is not a number", r(c)))?;
        }
    }
    Ok(())
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

/// An implementation's line in the table and the legends: the timing figure's, or a variant's.
fn label(imp: &str) -> String {
    if let Some(s) = DRAWN.iter().find(|s| s.imp == imp) {
        return s.label.to_string();
    }
    match imp {
        "fused_tiled" => "ours, tiled path forced (SwiGLU fused into GEMM 1)".into(),
        "fused_tiled_unfused" => "ours, tiled path, unfused (gate|up, then a SwiGLU kernel)".into(),
        "fused_tiled_v1" => {
            "ours, tiled path, main loop v1 (w4_k64_n1: stage, wait, multiply)".into()
        }
        "fused_tiled_v5" => {
            "ours, tiled path, version 5 at every T (g2_k64_n16_s4_x: warpgroup MMA, sm_90a)".into()
        }
        "fused_decode" => "ours, decode path forced (SwiGLU and the sum over k fused)".into(),
        "fused_decode_swiglu" => "ours, decode path, the sum over k in its own kernel".into(),
        "fused_decode_unfused" => "ours, decode path, unfused".into(),
        other => format!(
            "ours, {}",
            other.trim_start_matches("fused_").replace('_', " ")
        ),
    }
}
