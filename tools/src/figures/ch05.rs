//! Chapter 5's generated files, from the GPU run of `bench ch05` (`tools/bench/src/ch05.rs`):
//! `bench/results/h200/ch05.csv` (the tiny GEMM `tiny_gemm` in the pair's form and in each form,
//! `tiny_gemm_fma` and `tiny_gemm_tc`, the fused kernel `fused_router` in
//! the pair's form and in each form, `fused_router_warp` and `fused_router_block`,
//! the pair `pair` (and with the tiny GEMM in each form, `pair_fma` and `pair_tc`), cuBLAS + the
//! fused kernel `blas_fused`, chapter 1's chain `chain`, the PyTorch
//! five lines `torch_5line`, a floor probe per case and one empty launch).
//!
//! Made from it: the row-axis figure (µs per call against rows, the routers beside the floor, as
//! the router article draws its figure of the pair), the table (one line per implementation, a
//! column per row count, cells `cold / warm` with the pair's ratio over the others) and the facts
//! file. Until `ch05.csv` is committed nothing of that is made and stderr says so; once a
//! generated file is committed, a missing CSV is an error.
//!
//! Two floors are read off the probes at each shape and row count (every case has its probe,
//! one launch reading the case's input bytes cold): the router's, the largest read (the bf16
//! gate weight, the hidden rows and the bias, what the pair, cuBLAS + fused, the chain and the
//! tiny GEMM are held to), and the logits', the smallest (the fused kernel alone reads only the
//! logits and the bias).

use super::equality;
use super::spec::{
    self, each, fact, when, Absent, Cell, Chart, Csv, Ctx, Fmt, Item, Line, Loop, Make, Name, Over,
    Part, Pivot, Slot, Source, Style, Value,
};
use super::svg::{describe_shape, Marker};
use super::Generated;
use crate::bench_row::BenchRow;
use std::path::Path;

/// This file, as the specs' errors name it.
const HERE: &str = "tools/src/figures/ch05.rs";
const CH05: Csv = Csv::at("bench/results/h200/ch05.csv");
const SVG: &str = "book/src/figures/ch05-router.svg";
const TABLE: &str = "book/src/figures/ch05-router-table.md";
const FACTS: &str = "book/src/figures/ch05-facts.md";
/// The GPU tests' equality table (`tests/fused.rs`, `EQUALITY`), copied from a run's
/// `equality/ch05_equality.csv`, and the page's tables made from it.
const EQUALITY: Csv = Csv::at("bench/results/h200/ch05_equality.csv");
const EQUALITY_TABLE: &str = "book/src/figures/ch05-equality.md";
/// The phase probe's latest run (`tools/gpu/probes/ch05_router_phases.cu`: the block form alone
/// on one row, caches warm; the cycle at which each phase ends, medians of 50 launches), one
/// line per shape and phase, and the page's table made from it.
const PHASES_DATA: Csv = Csv::at("bench/results/h200/ch05_router_phases.csv");
const PHASES_TABLE: &str = "book/src/figures/ch05-phases.md";
/// Where the experiments that lost were measured: the rows of `bench ch05` runs made with a
/// variant built in (or with the design kept, beside it), copied verbatim from each run's CSV
/// under `logs/` with the run's name (its file's stem) in a first column, `run`. Only the
/// cases the page quotes are kept.
const TRIED_RUNS: Csv = Csv::runs("bench/results/h200/ch05_tried.csv", "run");

/// The implementations, as the CSV names them, in the order the table lists them: `bench ch05`
/// measures these, in this order, but the PyTorch peer (`torch_5line`), whose samples it merges.
pub const IMPLS: [&str; 14] = [
    "pair",
    "pair_fma",
    "pair_tc",
    "blas_fused",
    "blas_gemm",
    "tiny_gemm",
    "tiny_gemm_fma",
    "tiny_gemm_tc",
    "fused_router",
    "fused_router_warp",
    "fused_router_block",
    "fused_router_screen",
    "chain",
    "torch_5line",
];
/// The lines of the book's table and facts: [`IMPLS`] (what `bench ch05` measures, and the
/// PyTorch peer), and the engines' pair (`engines_router`: cuBLAS's bf16 → fp32 gate GEMM and
/// SGLang's Triton router design, `tools/peers/engines_router.py`, merged from its own samples),
/// listed after cuBLAS + the fused router, the design it is set against.
pub const TABLE_IMPLS: [&str; 15] = [
    "pair",
    "pair_fma",
    "pair_tc",
    "blas_fused",
    "engines_router",
    "blas_gemm",
    "tiny_gemm",
    "tiny_gemm_fma",
    "tiny_gemm_tc",
    "fused_router",
    "fused_router_warp",
    "fused_router_block",
    "fused_router_screen",
    "chain",
    "torch_5line",
];
/// The facts' short names of the implementations (`{s}_{n}_tiny_cold`).
const SHORT: &[(&str, &str)] = &[
    ("blas_fused", "blas"),
    ("blas_gemm", "blas_gemm"),
    ("engines_router", "engines"),
    ("tiny_gemm", "tiny"),
    ("tiny_gemm_fma", "tiny_fma"),
    ("tiny_gemm_tc", "tiny_tc"),
    ("fused_router", "fused"),
    ("fused_router_warp", "fused_warp"),
    ("fused_router_block", "fused_block"),
    ("fused_router_screen", "fused_screen"),
    ("torch_5line", "torch"),
];

/// Chapter 5's targets, read the same way by the book (the verdict facts below) and by
/// `bench ch05`'s printed verdicts (`tools/bench/src/ch05.rs`, `targets`): the tiny GEMM and the
/// pair at one row over the router's floor probe, at most; the fused kernel alone at 8192 rows
/// over a cold read of its logits, at most; the chain over the pair up to 96 rows, at least.
pub const TINY_OVER_PROBE_MAX: f64 = 1.05;
pub const PAIR_OVER_PROBE_MAX: f64 = 1.4;
pub const FUSED_OVER_LOGITS_MAX: f64 = 2.0;
pub const CHAIN_OVER_PAIR_MIN: f64 = 3.0;
const TARGETS: &str = "tools/src/figures/ch05.rs (the targets bench ch05 checks)";

/// The routers the figure draws, each in its color and marker with its legend line.
#[rustfmt::skip]
const ROUTERS: &[Style] = &[
    Style::new("pair", "#0072b2", Marker::Circle, "pair: the tiny GEMM + the fused router, 2 launches"),
    Style::new("blas_fused", "#009e73", Marker::Triangle, "blas_fused: cuBLAS's fp32 logits + the fused router"),
    Style::new("engines_router", "#e69f00", Marker::Square, "engines_router: cuBLAS's fp32 logits + the engines' Triton router"),
    Style::new("chain", "#cc79a7", Marker::Diamond, "chain: chapter 1's plain kernels, fp32"),
    Style::new("torch_5line", "#d55e00", Marker::Square, "torch_5line: the PyTorch five lines, fp32"),
];

/// The figure: the routers (the kernels alone are in the table), µs per call against rows.
const FIGURE: Chart = Chart {
    csv: &CH05,
    draw: ROUTERS,
    floor_from: "pair",
    panel_w: 440.0,
    panel_h: 320.0,
    left: 62.0,
    title: "The fused router pair along the row axis: µs per call against rows",
    notes: &[
        "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
        "Warm: back-to-back copies in one graph, divided by their number. Both axes logarithmic.",
    ],
    panel_title: describe_shape,
    x_label: "rows routed (tokens), log scale",
    floor_label: "floor: one launch + the pair's bytes at copy bw (or FLOPs at bf16 rate)",
    probes: true,
};

/// The shapes (the empty launch's rows, at 0, left out), named `glm`, `qwen3` in facts.
const SHAPES: Loop = Loop::csv("shape", &CH05, "rows>0", "shape").named(Name::Prefix);
/// The row counts measured at a shape, ascending.
const COUNTS: Loop = Loop::csv("n", &CH05, "shape={shape} rows>0", "rows").numeric();
/// The row counts up to 96: decode and speculative decode, where the chain's ratio is a target.
const SMALL_COUNTS: Loop = Loop::csv("n", &CH05, "shape={shape} rows>0 rows<=96", "rows").numeric();

const fn cold(rows: &'static str) -> Value {
    Value::col(&CH05, rows, "cold_median_us")
}
const fn warm(rows: &'static str) -> Value {
    Value::col(&CH05, rows, "warm_median_us")
}
const IMP_COLD: Value = cold("shape={shape} rows={n} impl={imp}");
const IMP_WARM: Value = warm("shape={shape} rows={n} impl={imp}");
const PAIR_COLD: Value = cold("shape={shape} rows={n} impl=pair");
const TINY_COLD: Value = cold("shape={shape} rows={n} impl=tiny_gemm");
const FUSED_COLD: Value = cold("shape={shape} rows={n} impl=fused_router");
const ROUTER_PROBE: Value = Value::named(&CH05, router_probe);
const LOGITS_PROBE: Value = Value::named(&CH05, logits_probe);
const OVER_PAIR: Value = Value::Ratio(&IMP_COLD, &PAIR_COLD);
const PAIR_OVER_PROBE: Value = Value::Ratio(&PAIR_COLD, &ROUTER_PROBE);
const TINY_OVER_PROBE: Value = Value::Ratio(&TINY_COLD, &ROUTER_PROBE);
const FUSED_OVER_LOGITS: Value = Value::Ratio(&FUSED_COLD, &LOGITS_PROBE);
/// The launch counts of `{imp}` at a shape: `2`, or `8–9`.
const LAUNCHES: Value = Value::distinct(&CH05, "shape={shape} impl={imp}", "launches");
/// The implementations, each named as the facts name it (the launches' names keep `imp`'s).
const IMPS: Loop = Loop::list("imp", &TABLE_IMPLS).named(Name::Map(SHORT));

/// The numbers the page quotes. Per shape `s` (`glm`, `qwen3`) and row count `n`:
/// `{s}_{n}_{imp}_cold` / `_warm` (imp: [`SHORT`]), `{s}_{n}_probe` (the router's floor probe),
/// `{s}_{n}_pair_over_probe`, `{s}_{n}_pair_minus_tiny` (what the fused kernel adds to the pair:
/// the text compares forms by it); at 1 row `{s}_1_tiny_over_probe`; over the rows up to 96
/// `{s}_chain_over_pair_min/_max` and `{s}_torch_over_pair_min/_max`; `{s}_pair_launches`,
/// `{s}_chain_launches`; `{s}_blas_faster_from` and `{s}_warp_form_faster_from` (the row count
/// from which cuBLAS + fused beats the pair, and the warp-per-row form the block form, at every
/// count measured); at 8192 rows `{s}_8192_fused_over_logits_probe`. Each target gets its
/// verdict, `met` or `**missed**`, from the same unrounded ratio as `bench ch05` prints.
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
            fact!(? "{shape}_{n}_pair_minus_tiny", Value::Diff(&PAIR_COLD, &TINY_COLD), Fmt::Fixed(2)),
            fact!(? "{shape}_{n}_probe", ROUTER_PROBE, Fmt::Us),
            fact!(? "{shape}_{n}_pair_over_probe", PAIR_OVER_PROBE, Fmt::Fixed(2)),
            when!("n=1", [
                fact!(? "{shape}_1_pair_target", PAIR_OVER_PROBE, Fmt::AtMost(PAIR_OVER_PROBE_MAX)),
                fact!(? "{shape}_1_tiny_over_probe", TINY_OVER_PROBE, Fmt::Fixed(2)),
                fact!(? "{shape}_1_tiny_target", TINY_OVER_PROBE, Fmt::AtMost(TINY_OVER_PROBE_MAX)),
            ]),
            when!("n=8192", [
                fact!(? "{shape}_8192_fused_over_logits_probe", FUSED_OVER_LOGITS, Fmt::Fixed(2)),
                fact!(? "{shape}_8192_fused_target", FUSED_OVER_LOGITS, Fmt::AtMost(FUSED_OVER_LOGITS_MAX)),
            ]),
        ]),
        each!(Loop { over: Over::List(&["chain", "torch_5line"]), ..IMPS }, [
            fact!(? "{shape}_{imp}_over_pair_min", Value::Min(&SMALL_COUNTS, &OVER_PAIR), Fmt::Fixed(2)),
            fact!(? "{shape}_{imp}_over_pair_max", Value::Max(&SMALL_COUNTS, &OVER_PAIR), Fmt::Fixed(2)),
            when!("imp=chain", [
                fact!(? "{shape}_chain_target", Value::Min(&SMALL_COUNTS, &OVER_PAIR), Fmt::AtLeast(CHAIN_OVER_PAIR_MIN)),
            ]),
        ]),
        fact!(? "{shape}_blas_faster_from", Value::named(&CH05, blas_faster_from), Fmt::Int),
        fact!(? "{shape}_warp_form_faster_from", Value::named(&CH05, warp_form_faster_from), Fmt::Int),
        each!(Loop { over: Over::List(&["pair", "chain"]), ..IMPS }, [
            fact!(? "{shape}_{imp}_launches", LAUNCHES, Fmt::Raw),
        ]),
    ]),
];

/// The row count from which cuBLAS + fused is faster (cold) than the pair at every measured
/// count: where an engine would switch. A crossover is not a cell or a ratio: a named function.
fn blas_faster_from(c: &Ctx) -> Result<Option<f64>, String> {
    faster_from(c, "blas_fused", "pair")
}

/// The row count from which the fused kernel's warp-per-row form is faster (cold) than its
/// block-per-row form at every measured count: the crossover `BLOCK_FORM_MAX_ROWS` stands for.
fn warp_form_faster_from(c: &Ctx) -> Result<Option<f64>, String> {
    faster_from(c, "fused_router_warp", "fused_router_block")
}

/// The smallest measured row count from which `fast` is faster (cold) than `slow` at every
/// measured count of `{shape}` where both were timed; none when it is not faster at the last.
fn faster_from(c: &Ctx, fast: &str, slow: &str) -> Result<Option<f64>, String> {
    let mut counts: Vec<u64> = Vec::new();
    for r in c.rows("shape={shape} rows>0")? {
        let n = c.num(r, "rows")? as u64;
        if !counts.contains(&n) {
            counts.push(n);
        }
    }
    counts.sort();
    let mut faster = Vec::new();
    for &n in &counts {
        let at = |imp: &str| -> Result<Option<f64>, String> {
            let rows = c.rows(&format!("shape={{shape}} rows={n} impl={imp}"))?;
            rows.first().map(|r| c.num(r, "cold_median_us")).transpose()
        };
        if let (Some(f), Some(s)) = (at(fast)?, at(slow)?) {
            faster.push((n, f < s));
        }
    }
    Ok((0..faster.len())
        .find(|&i| faster[i..].iter().all(|&(_, f)| f))
        .map(|i| faster[i].0 as f64))
}

/// The floor probe of a read: the fastest cold median of the probe rows at this shape and row
/// count that read `bytes`. Several cases read the same bytes (the pair, cuBLAS + fused and the
/// chain), so a read has several probes, repeats of one measurement: the fastest counts.
pub fn fastest_probe(rows: &[BenchRow], shape: &str, n: u64, bytes: f64) -> Option<f64> {
    rows.iter()
        .filter(|r| r.shape == shape && r.rows == n && r.imp == "floor_probe" && r.bytes == bytes)
        .map(|r| r.cold_median_us)
        .reduce(f64::min)
}

/// The fastest probe of the largest read (`most`) or the smallest, at `{shape}` and `{n}`: the
/// router's floor (the bf16 gate weight, the hidden rows and the bias) or the logits'.
fn probe(c: &Ctx, most: bool) -> Result<Option<f64>, String> {
    let mut probes = Vec::new();
    for r in c.rows("shape={shape} rows={n} impl=floor_probe")? {
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
fn router_probe(c: &Ctx) -> Result<Option<f64>, String> {
    probe(c, true)
}
fn logits_probe(c: &Ctx) -> Result<Option<f64>, String> {
    probe(c, false)
}

/// The table: per shape, one line per implementation and a column per row count; cells
/// `cold / warm` µs, and for every implementation but the pair its cold time over the pair's;
/// then the router's floor probe and the pair over it.
const ROUTER_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(describe_shape))),
    block_head: "**{shape}**: µs per call, cold / warm (× = cold time over the pair's)\n\n",
    block_tail: "\n",
    rows: Loop::list("imp", &TABLE_IMPLS),
    row_if: Some((&CH05, "shape={shape} impl={imp}")),
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
            Slot::optional("ratio", OVER_PAIR, Fmt::Fixed(2), " ({}×)", "imp!=pair"),
        ],
    },
    extra: &[Line::new(
        "floor probe: one launch reading the gate weight, hidden rows and bias, cold",
        Cell {
            text: "{probe}{pair}",
            slots: &[
                Slot::new("probe", ROUTER_PROBE, Fmt::Us),
                Slot::optional("pair", PAIR_OVER_PROBE, Fmt::Fixed(2), " (pair {}×)", ""),
            ],
        },
    )],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The page's table of what did not pay: for each experiment that lost, the variant's
/// measurement (`tried_{name}`) and the kept design's (`tried_{name}_kept`), the same quantity
/// from the run the experiment was compared with: `runs!` is a case of the runs in
/// [`TRIED_RUNS`] (several runs of one build give a range, `lo–hi`), `chapter!` of the chapter's
/// own run; then the chapter's targets as the bench checks them.
macro_rules! runs {
    ($runs:expr, $rows:literal, $col:literal) => {
        Value::Range(
            &Loop::list("run", $runs),
            &Value::col(&TRIED_RUNS, concat!("run={run} ", $rows), $col),
        )
    };
}
macro_rules! chapter {
    ($rows:literal, $col:literal) => {
        Value::col(&CH05, $rows, $col)
    };
}
/// The block form as kept (one pass), in the two runs of the session that tried a second pass.
const ONE_PASS: &[&str] = &[
    "ch05_block_warm_pass_experiment_1_nowarm",
    "ch05_block_warm_pass_experiment_3_nowarm",
];
#[rustfmt::skip]
const TRIED: &[Item] = &[
    // The first one-warp kernel: a packed 64-bit key reduced by xor shuffles.
    fact!("tried_packed_key", runs!(&["ch05_ca0b032"], "shape=glm_h4096_e288_k8 rows=1 impl=fused_router", "warm_median_us"), Fmt::Us),
    fact!("tried_packed_key_kept", chapter!("shape=glm_h4096_e288_k8 rows=1 impl=fused_router_warp", "warm_median_us"), Fmt::Us),
    // b2 by a tree over the lane's slots in every round.
    fact!("tried_tree_per_round", runs!(&["ch05_3080345"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router", "warm_median_us"), Fmt::Us),
    fact!("tried_tree_per_round_kept", runs!(&["ch05_125fc89"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router", "warm_median_us"), Fmt::Us),
    // One kernel per scoring, so that a sigmoid row does not jump over the softplus code.
    fact!("tried_kernel_per_scoring", runs!(&["ch05_58ec19f"], "shape=glm_h4096_e288_k8 rows=1 impl=fused_router", "warm_median_us"), Fmt::Us),
    fact!("tried_kernel_per_scoring_kept", runs!(&["ch05_57452a9"], "shape=glm_h4096_e288_k8 rows=1 impl=fused_router", "warm_median_us"), Fmt::Us),
    // The holder's update as selects, and a launch bound of 10 blocks per SM.
    fact!("tried_branch_free", runs!(&["ch05_top2_branchfree_bounds"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router_warp", "warm_median_us"), Fmt::Us),
    fact!("tried_branch_free_kept", runs!(&["ch05_top2_run1"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router_warp", "warm_median_us"), Fmt::Us),
    // The tiny GEMM with one expert a block instead of two.
    fact!("tried_one_expert_glm", runs!(&["ch05_epb_experiment_epb1"], "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_one_expert_glm_kept", runs!(&["ch05_epb_experiment_base"], "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_one_expert_qwen3", runs!(&["ch05_epb_experiment_epb1"], "shape=qwen3_h2048_e128_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_one_expert_qwen3_kept", runs!(&["ch05_epb_experiment_base"], "shape=qwen3_h2048_e128_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    // The block form run twice, the first pass to fetch its code while the tiny GEMM runs.
    fact!("tried_warm_pass", runs!(&["ch05_block_warm_pass_experiment_2_warm", "ch05_block_warm_pass_experiment_4_warm"], "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_warm_pass_kept", runs!(ONE_PASS, "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    // The block form's second count split over four lanes a candidate.
    fact!("tried_count_split_glm", runs!(&["ch05_block_count_split_experiment"], "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_count_split_glm_kept", runs!(ONE_PASS, "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_count_split_qwen3", runs!(&["ch05_block_count_split_experiment"], "shape=qwen3_h2048_e128_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_count_split_qwen3_kept", runs!(ONE_PASS, "shape=qwen3_h2048_e128_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    // The block form's candidates merged as sorted runs instead of counted.
    fact!("tried_merge_runs", runs!(&["ch05_block_merge_runs_experiment"], "shape=qwen3_h2048_e128_k8 rows=1 impl=fused_router_block", "warm_median_us"), Fmt::Us),
    fact!("tried_merge_runs_kept", runs!(&["ch05_9850e0f"], "shape=qwen3_h2048_e128_k8 rows=1 impl=fused_router_block", "warm_median_us"), Fmt::Us),
    // The block form's candidates counted by their keys alone, the ids only for equal keys.
    fact!("tried_key_first", runs!(&["ch05_key_first_count_experiment"], "shape=qwen3_h2048_e128_k8 rows=1 impl=fused_router_block", "warm_median_us"), Fmt::Us),
    fact!("tried_key_first_kept", chapter!("shape=qwen3_h2048_e128_k8 rows=1 impl=fused_router_block", "warm_median_us"), Fmt::Us),
    // The second screen in the many-row screened kernels too, inlined.
    fact!("tried_second_screen_inline", runs!(&["ch05_screened_second_inline_experiment"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router_screen", "warm_median_us"), Fmt::Us),
    fact!("tried_second_screen_inline_kept", runs!(&["ch05_12b8a93"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router_screen", "warm_median_us"), Fmt::Us),
    // The same out of line, two builds alternated three times in one session.
    fact!("tried_second_screen_many", runs!(&["ch05_screen_second_ab_experiment_A1", "ch05_screen_second_ab_experiment_A2", "ch05_screen_second_ab_experiment_A3"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router_screen", "warm_median_us"), Fmt::Us),
    fact!("tried_second_screen_many_kept", runs!(&["ch05_screen_second_ab_experiment_B1", "ch05_screen_second_ab_experiment_B2", "ch05_screen_second_ab_experiment_B3"], "shape=glm_h4096_e288_k8 rows=8192 impl=fused_router_screen", "warm_median_us"), Fmt::Us),
    // The pair as one launch: the GEMM's last block to finish routes every row.
    fact!("tried_one_launch_1", runs!(&["ch05_one_launch_experiment"], "shape=glm_h4096_e288_k8 rows=1 impl=one", "cold_median_us"), Fmt::Us),
    fact!("tried_one_launch_1_kept", runs!(&["ch05_one_launch_experiment"], "shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"), Fmt::Us),
    fact!("tried_one_launch_96", runs!(&["ch05_one_launch_experiment"], "shape=glm_h4096_e288_k8 rows=96 impl=one", "cold_median_us"), Fmt::Us),
    fact!("tried_one_launch_96_kept", runs!(&["ch05_one_launch_experiment"], "shape=glm_h4096_e288_k8 rows=96 impl=pair", "cold_median_us"), Fmt::Us),
    // The chapter's targets, so that the page quotes them rather than types them.
    fact!("target_tiny", Value::Const(TINY_OVER_PROBE_MAX, TARGETS), Fmt::Plain),
    fact!("target_pair", Value::Const(PAIR_OVER_PROBE_MAX, TARGETS), Fmt::Plain),
    fact!("target_fused", Value::Const(FUSED_OVER_LOGITS_MAX, TARGETS), Fmt::Plain),
    fact!("target_chain", Value::Const(CHAIN_OVER_PAIR_MIN, TARGETS), Fmt::Plain),
];

/// The GPU tests' equality table ([`equality::parse`] checks it first): one table per part,
/// each cell `differing / compared` (a difference in bold, `–` where a case has no such
/// comparison), the columns whichever of cases and comparisons has fewer values.
const EQUALITY_PAGE: Pivot = Pivot {
    line: line!(),
    head:
        "<!-- generated by tools/plot from bench/results/h200/ch05_equality.csv; do not edit -->\n",
    blocks: Some(PARTS),
    block_head: "\n**{part}** (differing / compared)\n\n",
    corner: "{part}",
    rows: Loop::csv("case", &EQUALITY, "part={part}", "case"),
    cols: Loop::csv("comparison", &EQUALITY, "part={part}", "comparison"),
    cell: Cell {
        text: "{d} / {e}",
        slots: &[
            Slot::new(
                "d",
                Value::col(&EQUALITY, COMPARISON, "differing"),
                Fmt::ThousandsBold,
            ),
            Slot::new(
                "e",
                Value::col(&EQUALITY, COMPARISON, "elements"),
                Fmt::Thousands,
            ),
        ],
    },
    missing: Some("–"),
    transpose_as: Some("comparison"),
    ..Pivot::PLAIN
};
const COMPARISON: &str = "part={part} case={case} comparison={comparison}";
const PARTS: Loop = Loop::csv("part", &EQUALITY, "", "part");
/// How many elements were compared in all and how many differed, the lines with a difference,
/// and the same per part (`equality_random_rows_compared`).
#[rustfmt::skip]
const EQUALITY_FACTS: &[Item] = &[
    fact!("equality_compared", Value::sum(&EQUALITY, "", "elements"), Fmt::Thousands),
    fact!("equality_differing", Value::sum(&EQUALITY, "", "differing"), Fmt::Thousands),
    fact!("equality_lines_with_differences", Value::Count { csv: &EQUALITY, rows: "differing>0" }, Fmt::Thousands),
    each!(PARTS.named(Name::Slug), [
        fact!("equality_{part}_compared", Value::sum(&EQUALITY, "part={part}", "elements"), Fmt::Thousands),
        fact!("equality_{part}_differing", Value::sum(&EQUALITY, "part={part}", "differing"), Fmt::Thousands),
    ]),
];

/// The block form's phases, in the order the probe marks them, with the page's words for each.
const PHASES: &[(&str, &str)] = &[
    ("wait", "the wait (launched alone: nothing to wait for)"),
    ("logit", "the row's logit loaded (from the L2)"),
    ("score", "score and rank key"),
    ("warp_rank", "1. rank in the warp (32 shuffles)"),
    ("barrier_1", "barrier"),
    ("candidate_rank", "2. rank among the candidates"),
    (
        "barrier_2",
        "barrier (warp 0 alone where the candidates fit one warp)",
    ),
    ("weights", "the weights, stored (warp 0)"),
];

/// The phase probe's table: a line per phase, a column per shape, each cell the cycle the phase
/// ends at and, in parentheses, the cycles it took; a missing phase is an error.
const PHASES_PAGE: Pivot = Pivot {
    line: line!(),
    head: "<!-- generated by tools/plot from bench/results/h200/ch05_router_phases.csv; do not \
           edit -->\n\n",
    corner: "phase ends (cycle, and the phase's own cycles)",
    rows: Loop {
        var: "phase",
        over: Over::Keys(PHASES),
        name: Name::Map(PHASES),
    },
    cols: Loop::csv("shape", &PHASES_DATA, "", "shape").named(Name::Fn(describe_shape)),
    cell: Cell {
        text: "{end} (+{took})",
        slots: &[
            Slot::new(
                "end",
                Value::col(&PHASES_DATA, "shape={shape} phase={phase}", "end_cycles"),
                Fmt::Thousands,
            ),
            Slot::new(
                "took",
                Value::named(&PHASES_DATA, phase_took),
                Fmt::Thousands,
            ),
        ],
    },
    ..Pivot::PLAIN
};

/// The cycles a phase took: its end less the end of the phase ahead of it in [`PHASES`]
/// (the first from 0). One ending before the one ahead of it is a broken run, not a negative
/// time: an error. The phase ahead is the list's, not the CSV's: a named function.
fn phase_took(c: &Ctx) -> Result<Option<f64>, String> {
    let (shape, phase) = (c.var("shape")?, c.var("phase")?);
    let end = |p: &str| -> Result<Option<f64>, String> {
        let rows = c.rows(&format!("shape={{shape}} phase={p}"))?;
        rows.first().map(|r| c.num(r, "end_cycles")).transpose()
    };
    let i = PHASES.iter().position(|(k, _)| *k == phase);
    let before = match i {
        Some(0) | None => Some(0.0),
        Some(i) => end(PHASES[i - 1].0)?,
    };
    let (Some(now), Some(before)) = (end(phase)?, before) else {
        return Ok(None);
    };
    if now < before {
        return Err(format!(
            "{}: `{phase}` of {shape} ends before the phase ahead of it",
            PHASES_DATA.path
        ));
    }
    Ok(Some(now - before))
}

/// Chapter 5's files: the GPU run's figure, table and facts, then what the other CSVs add.
const GROUP: spec::Group = spec::Group {
    name: "ch05",
    spec: HERE,
    first: Source {
        csv: &CH05,
        absent: Absent::GpuRun {
            stage: "bench",
            copy: "ch05.csv, ch05_steps.csv and ch05_ceilings.csv",
            left_out: "the figure, the table and the facts are left out",
        },
        check: None,
    },
    reads: &[&TRIED_RUNS],
    parts: &[
        Part {
            needs: &[],
            files: &[Make::Chart(SVG, &FIGURE), Make::Table(TABLE, &ROUTER_TABLE)],
            facts: GPU_FACTS,
        },
        Part {
            needs: &[Source {
                csv: &EQUALITY,
                absent: Absent::GpuRun {
                    stage: "tests",
                    copy: "equality/ch05_equality.csv",
                    left_out: "the equality table is left out",
                },
                check: Some(equality::check),
            }],
            files: &[Make::Table(EQUALITY_TABLE, &EQUALITY_PAGE)],
            facts: EQUALITY_FACTS,
        },
        Part {
            needs: &[],
            files: &[],
            facts: TRIED,
        },
        Part {
            needs: &[Source {
                csv: &PHASES_DATA,
                absent: Absent::Quiet,
                check: None,
            }],
            files: &[Make::Table(PHASES_TABLE, &PHASES_PAGE)],
            facts: &[],
        },
    ],
    facts: FACTS,
    facts_title: "Chapter 5's numbers",
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

    const GLM: &str = "glm_h4096_e288_k8";
    const TRIED_CSV: &str = TRIED_RUNS.path;
    const GPU_CSV: &str = CH05.path;

    /// A small CSV as the bench writes it: one shape, two row counts, and `more` lines.
    fn csv(more: &[String]) -> String {
        let line = |imp: &str, n: u64, launches: u32, cold: f64, bytes: f64| {
            format!(
                "ch05,{GLM},{imp},{n},{launches},{cold},{cold},{cold},{w},{w},{w},3.0,{bytes},0,0,0,200,H200",
                w = cold / 2.0
            )
        };
        let mut lines = vec![
            header(),
            "ch05,none,empty_kernel,0,1,2.0,2.0,2.0,1.0,1.0,1.0,2.0,0,0,0,0,200,H200".to_string(),
            line("pair", 1, 2, 4.0, 2.4e6),
            line("floor_probe", 1, 1, 3.2, 2.4e6),
            line("floor_probe", 1, 1, 2.1, 2.3e3),
            // A repeat of the router's probe (another case reads the same bytes): the faster counts.
            line("floor_probe", 1, 1, 3.0, 2.4e6),
            line("tiny_gemm", 1, 1, 3.3, 2.4e6),
            line("chain", 1, 7, 16.0, 2.4e6),
            line("pair", 8192, 2, 40.0, 7e7),
            line("fused_router", 8192, 1, 12.0, 9.5e6),
            line("floor_probe", 8192, 1, 30.0, 7e7),
            line("floor_probe", 8192, 1, 8.0, 9.4e6),
            line("chain", 8192, 7, 90.0, 7e7),
        ];
        lines.extend(more.iter().cloned());
        lines.join("\n") + "\n"
    }

    fn data(more: &[String]) -> Data {
        let mut d = Data::default();
        d.add(&CH05, &csv(more)).unwrap();
        d
    }

    fn gpu_facts(d: &Data) -> Facts {
        let mut f = Facts::default();
        spec::facts(d, HERE, GPU_FACTS, &mut f).unwrap();
        f
    }

    #[test]
    fn facts_are_ratios_of_the_rows() {
        let f = gpu_facts(&data(&[]));
        assert_eq!(f.get("empty_cold"), Some("2.00"));
        assert_eq!(f.get("glm_1_pair_cold"), Some("4.00"));
        assert_eq!(f.get("glm_1_pair_warm"), Some("2.00"));
        assert_eq!(f.get("glm_1_tiny_cold"), Some("3.30"));
        assert_eq!(f.get("glm_1_probe"), Some("3.00"));
        assert_eq!(f.get("glm_1_pair_over_probe"), Some("1.33"));
        assert_eq!(f.get("glm_1_tiny_over_probe"), Some("1.10"));
        assert_eq!(f.get("glm_1_pair_minus_tiny"), Some("0.70"));
        // The fused kernel alone against the smaller probe (its logits).
        assert_eq!(f.get("glm_8192_fused_over_logits_probe"), Some("1.50"));
        // Only rows up to 96 count for the chain's ratio.
        assert_eq!(f.get("glm_chain_over_pair_min"), Some("4.00"));
        assert_eq!(f.get("glm_chain_over_pair_max"), Some("4.00"));
        // The verdicts: 3.3 / 3.0 > 1.05, 4 / 3 ≤ 1.4, 12 / 8 ≤ 2, 16 / 4 ≥ 3.
        assert_eq!(f.get("glm_1_tiny_target"), Some("**missed**"));
        assert_eq!(f.get("glm_1_pair_target"), Some("met"));
        assert_eq!(f.get("glm_8192_fused_target"), Some("met"));
        assert_eq!(f.get("glm_chain_target"), Some("met"));
        // No cuBLAS + fused rows in this CSV: no crossover; no torch rows: no torch ratio.
        assert_eq!(f.get("glm_blas_faster_from"), None);
        assert_eq!(f.get("glm_torch_over_pair_min"), None);
        assert_eq!(f.get("glm_chain_launches"), Some("7"));
        // Slower at 1 row, faster at 8192: the crossover is 8192.
        let blas = |n: u64, cold: f64| {
            format!("ch05,{GLM},blas_fused,{n},2,{cold},{cold},{cold},1,1,1,3.0,1,0,0,0,200,H200")
        };
        let f = gpu_facts(&data(&[blas(1, 5.0), blas(8192, 30.0)]));
        assert_eq!(f.get("glm_blas_faster_from"), Some("8192"));
        // Faster at both: from the first count.
        let f = gpu_facts(&data(&[blas(1, 3.0), blas(8192, 30.0)]));
        assert_eq!(f.get("glm_blas_faster_from"), Some("1"));
        // The warp form against the block form: ahead at 1, behind at 512, ahead from 1024 on:
        // the crossover is the first count of the run that lasts to the end, 1024.
        let form = |imp: &str, n: u64, cold: f64| {
            format!("ch05,{GLM},{imp},{n},1,{cold},{cold},{cold},1,1,1,3.0,1,0,0,0,200,H200")
        };
        let rows = [
            form("fused_router_block", 1, 6.0),
            form("fused_router_warp", 1, 5.0),
            form("fused_router_block", 512, 8.0),
            form("fused_router_warp", 512, 8.5),
            form("fused_router_block", 1024, 10.0),
            form("fused_router_warp", 1024, 9.0),
            form("fused_router_block", 8192, 40.0),
            form("fused_router_warp", 8192, 20.0),
        ];
        let f = gpu_facts(&data(&rows));
        assert_eq!(f.get("glm_warp_form_faster_from"), Some("1024"));
        // Never ahead at the last count: no crossover.
        let f = gpu_facts(&data(&rows[..4]));
        assert_eq!(f.get("glm_warp_form_faster_from"), None);
    }

    #[test]
    fn the_table_and_the_figure_name_every_router() {
        let d = data(&[]);
        let t = spec::pivot(&d, HERE, &ROUTER_TABLE).unwrap();
        assert!(
            t.starts_with("**GLM: hidden 4096, 288 experts, k = 8, sigmoid + bias**: µs per call"),
            "{t}"
        );
        assert!(
            t.contains("| | 1 row | 8192 rows |\n|---|---:|---:|\n"),
            "{t}"
        );
        assert!(
            t.contains("| pair (2 launches) | 4.00 / 2.00 | 40.0 / 20.0 |"),
            "{t}"
        );
        assert!(
            t.contains("| chain (7 launches) | 16.0 / 8.00 (4.00×) | 90.0 / 45.0 (2.25×) |"),
            "{t}"
        );
        // A kernel measured at one row count only: the other cell is empty, not an error.
        assert!(
            t.contains("| tiny_gemm (1 launch) | 3.30 / 1.65 (0.82×) |  |"),
            "{t}"
        );
        assert!(t.contains("3.00 (pair 1.33×)"), "{t}");
        let svg = spec::chart(&d, &FIGURE).unwrap();
        for imp in ["pair", "chain"] {
            assert!(svg.contains(&format!("data-impl=\"{imp}\"")), "{imp}");
        }
        assert!(!svg.contains("data-impl=\"tiny_gemm\""));
    }

    #[test]
    fn the_engines_pair_is_a_line_of_the_table_the_figure_and_the_facts() {
        // Every measured line of the bench is a line of the table, in its order, and the
        // engines' pair comes right after cuBLAS + the fused router.
        let measured: Vec<&str> = TABLE_IMPLS
            .iter()
            .copied()
            .filter(|i| *i != "engines_router")
            .collect();
        assert_eq!(measured, IMPLS);
        let at = |i: &str| TABLE_IMPLS.iter().position(|x| *x == i).unwrap();
        assert_eq!(at("engines_router"), at("blas_fused") + 1);
        let engines = format!(
            "ch05,{GLM},engines_router,1,2,6.0,6.0,6.0,3.0,3.0,3.0,3.0,2.4e6,0,0,0,200,H200"
        );
        let d = data(&[engines]);
        let t = spec::pivot(&d, HERE, &ROUTER_TABLE).unwrap();
        assert!(
            t.contains("| engines_router (2 launches) | 6.00 / 3.00 (1.50×) |  |"),
            "{t}"
        );
        assert!(spec::chart(&d, &FIGURE)
            .unwrap()
            .contains("data-impl=\"engines_router\""));
        assert_eq!(gpu_facts(&d).get("glm_1_engines_cold"), Some("6.00"));
        // Without its rows, no line and no fact.
        assert!(!spec::pivot(&data(&[]), HERE, &ROUTER_TABLE)
            .unwrap()
            .contains("engines_router"));
        assert_eq!(gpu_facts(&data(&[])).get("glm_1_engines_cold"), None);
    }

    #[test]
    fn a_tried_cell_over_several_runs_is_their_range() {
        let row = |run: &str, cold: f64| {
            format!("{run},ch05,{GLM},pair,1,2,{cold},{cold},{cold},1.0,1.0,1.0,3.0,2.4e6,0,0,0,200,H200")
        };
        let mut d = data(&[]);
        let text = format!("run,{}\n{}\n{}\n", header(), row("a", 7.94), row("b", 7.97));
        d.add(&TRIED_RUNS, &text).unwrap();
        const T: &[Item] = &[
            fact!(
                "two",
                runs!(
                    &["a", "b"],
                    "shape=glm_h4096_e288_k8 rows=1 impl=pair",
                    "cold_median_us"
                ),
                Fmt::Us
            ),
            fact!(
                "one",
                runs!(
                    &["a"],
                    "shape=glm_h4096_e288_k8 rows=1 impl=pair",
                    "cold_median_us"
                ),
                Fmt::Us
            ),
            // The chapter's own run is read from its CSV, not from the table of experiments.
            fact!(
                "mine",
                chapter!("shape=glm_h4096_e288_k8 rows=1 impl=pair", "cold_median_us"),
                Fmt::Us
            ),
        ];
        let mut f = Facts::default();
        spec::facts(&d, HERE, T, &mut f).unwrap();
        assert_eq!(f.get("two"), Some("7.94–7.97"));
        assert_eq!(f.get("one"), Some("7.94"));
        assert_eq!(f.get("mine"), Some("4.00"));
        let r = f.render("t");
        assert!(
            r.contains(&format!(
                "<!-- from {TRIED_CSV}, run a; {TRIED_CSV}, run b -->"
            )),
            "{r}"
        );
        assert!(r.contains(&format!("<!-- from {GPU_CSV} -->")), "{r}");
        // A case the run did not measure is an error naming the spec line, not a missing number.
        const MISSING: &[Item] = &[fact!(
            "gone",
            runs!(
                &["a"],
                "shape=glm_h4096_e288_k8 rows=96 impl=pair",
                "cold_median_us"
            ),
            Fmt::Us
        )];
        let e = spec::facts(&d, HERE, MISSING, &mut f).unwrap_err();
        assert!(e.starts_with("tools/src/figures/ch05.rs:"), "{e}");
        assert!(
            e.contains(&format!(
                "{TRIED_CSV} has no row with run=a shape={GLM} rows=96"
            )),
            "{e}"
        );
        // Every experiment of the page's table names a run the committed CSV has.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let d = Data::read(&root, &[&CH05, &TRIED_RUNS]).unwrap();
        spec::facts(&d, HERE, TRIED, &mut Facts::default()).unwrap();
    }

    #[test]
    fn the_phase_table_gives_each_phase_its_cycles() {
        let mut text = String::from("shape,phase,end_cycles\n");
        for (i, (key, _)) in PHASES.iter().enumerate() {
            text += &format!("{GLM},{key},{}\n", 100 * (i + 1));
        }
        let table = |text: &str| {
            let mut d = Data::default();
            d.add(&PHASES_DATA, text).unwrap();
            spec::pivot(&d, HERE, &PHASES_PAGE)
        };
        let t = table(&text).unwrap();
        assert!(
            t.contains("| the wait (launched alone: nothing to wait for) | 100 (+100) |"),
            "{t}"
        );
        assert!(
            t.contains("| the weights, stored (warp 0) | 800 (+100) |"),
            "{t}"
        );
        // A phase that ends before the one ahead of it is a broken run, not a negative time.
        let bad = text.replace(&format!("{GLM},score,300"), &format!("{GLM},score,150"));
        assert!(table(&bad).unwrap_err().contains("ends before"));
        // A missing phase is an error, not an empty cell.
        let short = text.replace(&format!("{GLM},weights,800\n"), "");
        let e = table(&short).unwrap_err();
        assert!(e.contains("no cell at the weights, stored (warp 0)"), "{e}");
    }

    #[test]
    fn the_equality_page_puts_the_shorter_dimension_along_the_columns() {
        const CSV: &str = "part,case,comparison,elements,differing\n\
            regimes,a,ids,8,0\nregimes,a,weights,8,0\nregimes,a,logits,100,0\n\
            regimes,b,ids,16,0\nregimes,b,weights,16,2\nregimes,b,logits,200,0\n\
            regimes,c,ids,4,0\nregimes,c,weights,4,0\n\
            random rows,x,ids,1000,0\nrandom rows,x,weights,1000,0\nrandom rows,x,logits,50,0\n\
            random rows,y,ids,2000,0\n";
        equality::parse(CSV, "t.csv").unwrap();
        let mut d = Data::default();
        d.add(&EQUALITY, CSV).unwrap();
        let p = spec::pivot(&d, HERE, &EQUALITY_PAGE).unwrap();
        assert!(
            p.contains("**regimes** (differing / compared)\n\n| regimes | ids | weights | logits |\n|---|---:|---:|---:|\n"),
            "{p}"
        );
        assert!(p.contains("| b | 0 / 16 | **2** / 16 | 0 / 200 |"), "{p}");
        assert!(p.contains("| c | 0 / 4 | 0 / 4 | – |"), "{p}");
        assert!(p.contains("| comparison | x | y |"), "{p}");
        assert!(p.contains("| ids | 0 / 1,000 | 0 / 2,000 |"), "{p}");
        assert!(p.contains("| logits | 0 / 50 | – |"), "{p}");
        assert!(p.find("**regimes**").unwrap() < p.find("**random rows**").unwrap());
        let mut f = Facts::default();
        spec::facts(&d, HERE, EQUALITY_FACTS, &mut f).unwrap();
        assert_eq!(f.get("equality_compared"), Some("4,406"));
        assert_eq!(f.get("equality_differing"), Some("2"));
        assert_eq!(f.get("equality_lines_with_differences"), Some("1"));
        assert_eq!(f.get("equality_random_rows_compared"), Some("4,050"));
        assert_eq!(f.get("equality_regimes_differing"), Some("2"));
    }

    #[test]
    fn no_csv_no_files() {
        let dir = std::env::temp_dir().join(format!("ch05-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(generate(&dir).unwrap(), Vec::new());
        let fig = dir.join("book/src/figures");
        std::fs::create_dir_all(&fig).unwrap();
        std::fs::write(dir.join(TABLE), "stale").unwrap();
        let e = generate(&dir).unwrap_err();
        assert!(e.contains("cannot be regenerated"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
