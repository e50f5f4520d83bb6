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
use super::facts::Facts;
use super::svg::{describe_shape, shapes, Figure, Marker, Series};
use super::tables::fmt_us;
use super::{find, read, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

const GPU_CSV: &str = "bench/results/h200/ch05.csv";
const SVG: &str = "book/src/figures/ch05-router.svg";
const TABLE: &str = "book/src/figures/ch05-router-table.md";
const FACTS: &str = "book/src/figures/ch05-facts.md";
/// The GPU tests' equality table (`tests/fused.rs`, `EQUALITY`), copied from a run's
/// `equality/ch05_equality.csv`, and the page's tables made from it.
const EQUALITY_CSV: &str = "bench/results/h200/ch05_equality.csv";
const EQUALITY_TABLE: &str = "book/src/figures/ch05-equality.md";
/// The phase probe's latest run (`tools/gpu/probes/ch05_router_phases.cu`: the block form alone
/// on one row, caches warm; the cycle at which each phase ends, medians of 50 launches), one
/// line per shape and phase, and the page's table made from it.
const PHASES_CSV: &str = "bench/results/h200/ch05_router_phases.csv";
const PHASES_TABLE: &str = "book/src/figures/ch05-phases.md";

const PAIR: &str = "pair";
/// The implementations, as the CSV names them, in the order the table lists them: `bench ch05`
/// measures these, in this order, but the PyTorch peer (`torch_5line`), whose samples it merges.
pub const IMPLS: [&str; 13] = [
    "pair",
    "pair_fma",
    "pair_tc",
    "blas_fused",
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
/// The ones the figure draws: the routers (the two kernels alone are in the table).
const DRAWN: [&str; 4] = ["pair", "blas_fused", "chain", "torch_5line"];

/// The group's files, generated from the repository at `root` (the page's example and tree
/// join them in `figures::generate`).
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    if !root.join(GPU_CSV).exists() {
        super::no_gpu_csv_yet(
            root,
            "ch05",
            GPU_CSV,
            &[SVG, TABLE, FACTS],
            "bench",
            "ch05.csv, ch05_steps.csv and ch05_ceilings.csv",
            "the figure, the table and the facts are left out",
        )?;
        return Ok(Vec::new());
    }
    let rows = parse_csv(&read(root, GPU_CSV)?, GPU_CSV)?;
    let mut f = facts(&rows);
    let mut files = vec![
        Generated {
            path: SVG.into(),
            content: render_svg(&rows),
        },
        Generated {
            path: TABLE.into(),
            content: table(&rows),
        },
    ];
    if root.join(EQUALITY_CSV).exists() {
        let lines = equality::parse(&read(root, EQUALITY_CSV)?, EQUALITY_CSV)?;
        equality::facts(&lines, "equality", EQUALITY_CSV, &mut f);
        files.push(Generated {
            path: EQUALITY_TABLE.into(),
            content: equality::page(&lines, EQUALITY_CSV),
        });
    } else {
        super::no_gpu_csv_yet(
            root,
            "ch05",
            EQUALITY_CSV,
            &[EQUALITY_TABLE],
            "tests",
            "equality/ch05_equality.csv",
            "the equality table is left out",
        )?;
    }
    tried_facts(root, &rows, &mut f)?;
    if root.join(PHASES_CSV).exists() {
        files.push(Generated {
            path: PHASES_TABLE.into(),
            content: phases_table(&read(root, PHASES_CSV)?, PHASES_CSV)?,
        });
    }
    files.push(Generated {
        path: FACTS.into(),
        content: f.render("Chapter 5's numbers"),
    });
    Ok(files)
}

fn style(imp: &str) -> Series {
    let (color, marker, label) = match imp {
        "pair" => (
            "#0072b2",
            Marker::Circle,
            "pair: the tiny GEMM + the fused router, 2 launches",
        ),
        "blas_fused" => (
            "#009e73",
            Marker::Triangle,
            "blas_fused: cuBLAS's fp32 logits + the fused router",
        ),
        "chain" => (
            "#cc79a7",
            Marker::Diamond,
            "chain: chapter 1's plain kernels, fp32",
        ),
        _ => (
            "#d55e00",
            Marker::Square,
            "torch_5line: the PyTorch five lines, fp32",
        ),
    };
    Series {
        imp: imp.to_string(),
        color,
        marker,
        label: label.to_string(),
    }
}

/// The row-axis figure: one panel per shape, the routers' cold (and warm) time against rows,
/// with the pair's floor.
pub fn render_svg(rows: &[BenchRow]) -> String {
    let drawn: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.rows > 0 && (DRAWN.contains(&r.imp.as_str()) || r.imp == "floor_probe"))
        .collect();
    Figure {
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
        series: DRAWN
            .into_iter()
            .filter(|i| rows.iter().any(|r| r.imp == *i))
            .map(style)
            .collect(),
        floor_label: "floor: one launch + the pair's bytes at copy bw (or FLOPs at bf16 rate)",
        floor_from: PAIR,
    }
    .render(&drawn)
}

/// Chapter 5's targets, read the same way by the book (the verdict facts below) and by
/// `bench ch05`'s printed verdicts (`tools/bench/src/ch05.rs`, `targets`): the tiny GEMM and the
/// pair at one row over the router's floor probe, at most; the fused kernel alone at 8192 rows
/// over a cold read of its logits, at most; the chain over the pair up to 96 rows, at least.
pub const TINY_OVER_PROBE_MAX: f64 = 1.05;
pub const PAIR_OVER_PROBE_MAX: f64 = 1.4;
pub const FUSED_OVER_LOGITS_MAX: f64 = 2.0;
pub const CHAIN_OVER_PAIR_MIN: f64 = 3.0;

/// The floor probe of a read: the fastest cold median of the probe rows at this shape and row
/// count that read `bytes`. Several cases read the same bytes (the pair, cuBLAS + fused and the
/// chain), so a read has several probes, repeats of one measurement: the fastest counts.
pub fn fastest_probe(rows: &[BenchRow], shape: &str, n: u64, bytes: f64) -> Option<f64> {
    rows.iter()
        .filter(|r| r.shape == shape && r.rows == n && r.imp == "floor_probe" && r.bytes == bytes)
        .map(|r| r.cold_median_us)
        .reduce(f64::min)
}

/// The router's floor probe (the largest read at this shape and row count) and the logits'
/// (the smallest), each by [`fastest_probe`].
fn probes(rows: &[BenchRow], shape: &str, n: u64) -> Option<(f64, f64)> {
    let reads = rows
        .iter()
        .filter(|r| r.shape == shape && r.rows == n && r.imp == "floor_probe")
        .map(|r| r.bytes);
    let most = reads.clone().reduce(f64::max)?;
    let least = reads.reduce(f64::min)?;
    Some((
        fastest_probe(rows, shape, n, most)?,
        fastest_probe(rows, shape, n, least)?,
    ))
}

fn row_counts(rows: &[BenchRow], shape: &str) -> Vec<u64> {
    rows.iter()
        .filter(|r| r.shape == shape && r.rows > 0)
        .map(|r| r.rows)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The table: per shape, one line per implementation and a column per row count; cells
/// `cold / warm` µs, and for every implementation but the pair its cold time over the pair's;
/// then the router's floor probe and the pair over it.
pub fn table(rows: &[BenchRow]) -> String {
    let mut s = String::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        let counts = row_counts(rows, &shape);
        let _ = writeln!(
            s,
            "**{}**: µs per call, cold / warm (× = cold time over the pair's)\n",
            describe_shape(&shape)
        );
        s += &super::tables::count_header(&counts, "row");
        for imp in IMPLS {
            let mine: Vec<&BenchRow> = rows
                .iter()
                .filter(|r| r.shape == shape && r.imp == imp)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let launches: BTreeSet<u32> = mine.iter().map(|r| r.launches).collect();
            let launches: Vec<String> = launches.iter().map(|l| l.to_string()).collect();
            let cells: Vec<String> = counts
                .iter()
                .map(|&n| {
                    let Some(r) = mine.iter().find(|r| r.rows == n) else {
                        return String::new();
                    };
                    let mut c = format!(
                        "{} / {}",
                        fmt_us(r.cold_median_us),
                        fmt_us(r.warm_median_us)
                    );
                    if imp != PAIR {
                        if let Some(p) = find(rows, &shape, n, PAIR) {
                            let _ = write!(c, " ({:.2}×)", r.cold_median_us / p.cold_median_us);
                        }
                    }
                    c
                })
                .collect();
            let _ = writeln!(
                s,
                "| {imp} ({} launch{}) | {} |",
                launches.join("–"),
                if launches == ["1"] { "" } else { "es" },
                cells.join(" | ")
            );
        }
        let probe_cells: Vec<String> = counts
            .iter()
            .map(
                |&n| match (probes(rows, &shape, n), find(rows, &shape, n, PAIR)) {
                    (Some((router, _)), Some(p)) => format!(
                        "{} (pair {:.2}×)",
                        fmt_us(router),
                        p.cold_median_us / router
                    ),
                    (Some((router, _)), None) => fmt_us(router),
                    _ => String::new(),
                },
            )
            .collect();
        let _ = writeln!(
            s,
            "| floor probe: one launch reading the gate weight, hidden rows and bias, cold | {} |\n",
            probe_cells.join(" | ")
        );
    }
    s
}

/// The numbers the page quotes. Per shape `s` (`glm`, `qwen3`) and row count `n`:
/// `{s}_{n}_{imp}_cold` / `_warm` (imp: pair, blas, tiny, fused, chain, torch), `{s}_{n}_probe`
/// (the router's floor probe), `{s}_{n}_pair_over_probe`, `{s}_{n}_pair_minus_tiny` (the pair's
/// cold time less the tiny GEMM's); at 1 row `{s}_1_tiny_over_probe`; over
/// the rows up to 96 `{s}_chain_over_pair_min/_max` and `{s}_torch_over_pair_min/_max`;
/// `{s}_pair_launches`, `{s}_chain_launches`; at 8192 rows `{s}_8192_fused_over_logits_probe`.
/// Each target of the chapter gets its verdict, `met` or `**missed**`, from the same unrounded
/// ratio as `bench ch05` prints: `{s}_1_tiny_target` (≤ 1.05), `{s}_1_pair_target` (≤ 1.4),
/// `{s}_8192_fused_target` (≤ 2), `{s}_chain_target` (the chain ≥ 3× the pair up to 96 rows).
/// `{s}_blas_faster_from`: the row count from which cuBLAS + fused beats the pair at every count.
pub fn facts(rows: &[BenchRow]) -> Facts {
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let mut f = Facts::default();
    let src = GPU_CSV;
    if let Some(e) = rows.iter().find(|r| r.imp == "empty_kernel") {
        f.add("empty_cold", fmt_us(e.cold_median_us), src);
        f.add("empty_warm", fmt_us(e.warm_median_us), src);
    }
    fn short(imp: &str) -> &str {
        match imp {
            "blas_fused" => "blas",
            "tiny_gemm" => "tiny",
            "tiny_gemm_fma" => "tiny_fma",
            "tiny_gemm_tc" => "tiny_tc",
            "fused_router" => "fused",
            "fused_router_warp" => "fused_warp",
            "fused_router_block" => "fused_block",
            "fused_router_screen" => "fused_screen",
            "torch_5line" => "torch",
            other => other,
        }
    }
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        let s = shape.split('_').next().unwrap_or(&shape).to_string();
        let counts = row_counts(rows, &shape);
        for &n in &counts {
            for imp in IMPLS {
                if let Some(r) = find(rows, &shape, n, imp) {
                    let k = format!("{s}_{n}_{}", short(imp));
                    f.add(format!("{k}_cold"), fmt_us(r.cold_median_us), src);
                    f.add(format!("{k}_warm"), fmt_us(r.warm_median_us), src);
                }
            }
            let (pair, tiny) = (
                find(rows, &shape, n, PAIR),
                find(rows, &shape, n, "tiny_gemm"),
            );
            if let (Some(p), Some(t)) = (pair, tiny) {
                // What the fused kernel adds to the pair (the text compares forms by it).
                let d = p.cold_median_us - t.cold_median_us;
                f.add(format!("{s}_{n}_pair_minus_tiny"), format!("{d:.2}"), src);
            }
            if let Some((router, logits)) = probes(rows, &shape, n) {
                f.add(format!("{s}_{n}_probe"), fmt_us(router), src);
                if let Some(p) = pair {
                    f.add(
                        format!("{s}_{n}_pair_over_probe"),
                        format!("{:.2}", p.cold_median_us / router),
                        src,
                    );
                    if n == 1 {
                        f.add(
                            format!("{s}_1_pair_target"),
                            verdict(p.cold_median_us / router <= PAIR_OVER_PROBE_MAX),
                            src,
                        );
                    }
                }
                if n == 1 {
                    if let Some(t) = tiny {
                        f.add(
                            format!("{s}_1_tiny_over_probe"),
                            format!("{:.2}", t.cold_median_us / router),
                            src,
                        );
                        f.add(
                            format!("{s}_1_tiny_target"),
                            verdict(t.cold_median_us / router <= TINY_OVER_PROBE_MAX),
                            src,
                        );
                    }
                }
                if n == 8192 {
                    if let Some(t) = find(rows, &shape, n, "fused_router") {
                        f.add(
                            format!("{s}_8192_fused_over_logits_probe"),
                            format!("{:.2}", t.cold_median_us / logits),
                            src,
                        );
                        f.add(
                            format!("{s}_8192_fused_target"),
                            verdict(t.cold_median_us / logits <= FUSED_OVER_LOGITS_MAX),
                            src,
                        );
                    }
                }
            }
        }
        for (other, name) in [("chain", "chain"), ("torch_5line", "torch")] {
            let ratios: Vec<f64> = counts
                .iter()
                .filter(|&&n| n <= 96)
                .filter_map(|&n| {
                    Some(
                        find(rows, &shape, n, other)?.cold_median_us
                            / find(rows, &shape, n, PAIR)?.cold_median_us,
                    )
                })
                .collect();
            if !ratios.is_empty() {
                let lo = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = ratios.iter().cloned().fold(0.0, f64::max);
                f.add(format!("{s}_{name}_over_pair_min"), format!("{lo:.2}"), src);
                f.add(format!("{s}_{name}_over_pair_max"), format!("{hi:.2}"), src);
                if name == "chain" {
                    f.add(
                        format!("{s}_chain_target"),
                        verdict(lo >= CHAIN_OVER_PAIR_MIN),
                        src,
                    );
                }
            }
        }
        // The row count from which cuBLAS + fused is faster (cold) than the pair at every
        // measured count: where an engine would switch.
        let blas_faster = |n: u64| {
            matches!(
                (find(rows, &shape, n, "blas_fused"), find(rows, &shape, n, PAIR)),
                (Some(b), Some(p)) if b.cold_median_us < p.cold_median_us
            )
        };
        if let Some(i) = (0..counts.len()).find(|&i| counts[i..].iter().all(|&n| blas_faster(n))) {
            f.add(format!("{s}_blas_faster_from"), counts[i].to_string(), src);
        }
        for imp in ["pair", "chain"] {
            let l: BTreeSet<u32> = rows
                .iter()
                .filter(|r| r.shape == shape && r.imp == imp)
                .map(|r| r.launches)
                .collect();
            let l: Vec<String> = l.iter().map(|x| x.to_string()).collect();
            if !l.is_empty() {
                f.add(format!("{s}_{imp}_launches"), l.join("–"), src);
            }
        }
    }
    f
}

/// Where the experiments that lost were measured: the rows of `bench ch05` runs made with a
/// variant built in (or with the design kept, beside it), copied verbatim from each run's CSV
/// under `logs/` with the run's name (its file's stem) in a first column, `run`. Only the
/// cases the page quotes are kept.
const TRIED_CSV: &str = "bench/results/h200/ch05_tried.csv";
/// The run name that means the chapter's own run, `ch05.csv`.
const CHAPTER_RUN: &str = "ch05";

/// One measurement for the page's table of what did not pay: a case of one or more runs
/// (several runs of one build give a range, `lo–hi`).
struct Cell {
    runs: &'static [&'static str],
    shape: &'static str,
    rows: u64,
    imp: &'static str,
    warm: bool,
}

/// An experiment that lost: the variant's measurement (`tried_{name}`) and the kept design's
/// (`tried_{name}_kept`), the same quantity, from the run the experiment was compared with.
struct Tried {
    name: &'static str,
    tried: Cell,
    kept: Cell,
}

const GLM: &str = "glm_h4096_e288_k8";
const QWEN3: &str = "qwen3_h2048_e128_k8";

/// The block form as kept (one pass), in the two runs of the session that tried a second pass.
const ONE_PASS: &[&str] = &[
    "ch05_block_warm_pass_experiment_1_nowarm",
    "ch05_block_warm_pass_experiment_3_nowarm",
];

const fn cell(
    runs: &'static [&'static str],
    shape: &'static str,
    rows: u64,
    imp: &'static str,
    warm: bool,
) -> Cell {
    Cell {
        runs,
        shape,
        rows,
        imp,
        warm,
    }
}

/// The experiments of the page's "what did not pay", as data: which run measured the variant,
/// which the design that was kept, and which number of each the table quotes. [`CHAPTER_RUN`]
/// is the chapter's own run; the others are in [`TRIED_CSV`].
const TRIED: [Tried; 15] = [
    // The first one-warp kernel: a packed 64-bit key reduced by xor shuffles.
    Tried {
        name: "packed_key",
        tried: cell(&["ch05_ca0b032"], GLM, 1, "fused_router", true),
        kept: cell(&["ch05"], GLM, 1, "fused_router_warp", true),
    },
    // b2 by a tree over the lane's slots in every round.
    Tried {
        name: "tree_per_round",
        tried: cell(&["ch05_3080345"], GLM, 8192, "fused_router", true),
        kept: cell(&["ch05_125fc89"], GLM, 8192, "fused_router", true),
    },
    // One kernel per scoring, so that a sigmoid row does not jump over the softplus code.
    Tried {
        name: "kernel_per_scoring",
        tried: cell(&["ch05_58ec19f"], GLM, 1, "fused_router", true),
        kept: cell(&["ch05_57452a9"], GLM, 1, "fused_router", true),
    },
    // The holder's update as selects, and a launch bound of 10 blocks per SM.
    Tried {
        name: "branch_free",
        tried: cell(
            &["ch05_top2_branchfree_bounds"],
            GLM,
            8192,
            "fused_router_warp",
            true,
        ),
        kept: cell(&["ch05_top2_run1"], GLM, 8192, "fused_router_warp", true),
    },
    // The tiny GEMM with one expert a block instead of two.
    Tried {
        name: "one_expert_glm",
        tried: cell(&["ch05_epb_experiment_epb1"], GLM, 1, "pair", false),
        kept: cell(&["ch05_epb_experiment_base"], GLM, 1, "pair", false),
    },
    Tried {
        name: "one_expert_qwen3",
        tried: cell(&["ch05_epb_experiment_epb1"], QWEN3, 1, "pair", false),
        kept: cell(&["ch05_epb_experiment_base"], QWEN3, 1, "pair", false),
    },
    // The block form run twice, the first pass to fetch its code while the tiny GEMM runs.
    Tried {
        name: "warm_pass",
        tried: cell(
            &[
                "ch05_block_warm_pass_experiment_2_warm",
                "ch05_block_warm_pass_experiment_4_warm",
            ],
            GLM,
            1,
            "pair",
            false,
        ),
        kept: cell(ONE_PASS, GLM, 1, "pair", false),
    },
    // The block form's second count split over four lanes a candidate.
    Tried {
        name: "count_split_glm",
        tried: cell(
            &["ch05_block_count_split_experiment"],
            GLM,
            1,
            "pair",
            false,
        ),
        kept: cell(ONE_PASS, GLM, 1, "pair", false),
    },
    Tried {
        name: "count_split_qwen3",
        tried: cell(
            &["ch05_block_count_split_experiment"],
            QWEN3,
            1,
            "pair",
            false,
        ),
        kept: cell(ONE_PASS, QWEN3, 1, "pair", false),
    },
    // The block form's candidates merged as sorted runs instead of counted.
    Tried {
        name: "merge_runs",
        tried: cell(
            &["ch05_block_merge_runs_experiment"],
            QWEN3,
            1,
            "fused_router_block",
            true,
        ),
        kept: cell(&["ch05_9850e0f"], QWEN3, 1, "fused_router_block", true),
    },
    // The block form's candidates counted by their keys alone, the ids only for equal keys.
    Tried {
        name: "key_first",
        tried: cell(
            &["ch05_key_first_count_experiment"],
            QWEN3,
            1,
            "fused_router_block",
            true,
        ),
        kept: cell(&["ch05"], QWEN3, 1, "fused_router_block", true),
    },
    // The second screen in the many-row screened kernels too, inlined.
    Tried {
        name: "second_screen_inline",
        tried: cell(
            &["ch05_screened_second_inline_experiment"],
            GLM,
            8192,
            "fused_router_screen",
            true,
        ),
        kept: cell(&["ch05_12b8a93"], GLM, 8192, "fused_router_screen", true),
    },
    // The same out of line, two builds alternated three times in one session.
    Tried {
        name: "second_screen_many",
        tried: cell(
            &[
                "ch05_screen_second_ab_experiment_A1",
                "ch05_screen_second_ab_experiment_A2",
                "ch05_screen_second_ab_experiment_A3",
            ],
            GLM,
            8192,
            "fused_router_screen",
            true,
        ),
        kept: cell(
            &[
                "ch05_screen_second_ab_experiment_B1",
                "ch05_screen_second_ab_experiment_B2",
                "ch05_screen_second_ab_experiment_B3",
            ],
            GLM,
            8192,
            "fused_router_screen",
            true,
        ),
    },
    // The pair as one launch: the GEMM's last block to finish routes every row.
    Tried {
        name: "one_launch_1",
        tried: cell(&["ch05_one_launch_experiment"], GLM, 1, "one", false),
        kept: cell(&["ch05_one_launch_experiment"], GLM, 1, "pair", false),
    },
    Tried {
        name: "one_launch_96",
        tried: cell(&["ch05_one_launch_experiment"], GLM, 96, "one", false),
        kept: cell(&["ch05_one_launch_experiment"], GLM, 96, "pair", false),
    },
];

/// The rows of [`TRIED_CSV`], each with its run's name.
fn tried_rows(text: &str, name: &str) -> Result<Vec<(String, BenchRow)>, String> {
    let table = crate::csv::Table::parse(text, name)?;
    let run = table.col("run")?;
    let runs = table.rows().iter().map(|r| r.fields[run].clone());
    Ok(runs.zip(parse_csv(text, name)?).collect())
}

/// A cell's value: the median (cold or warm) of its case in each of its runs, one number or the
/// range `lo–hi` over the runs; and the runs it came from, for the facts file.
fn cell_value(
    chapter: &[BenchRow],
    tried: &[(String, BenchRow)],
    c: &Cell,
) -> Result<(String, String), String> {
    let mut values = Vec::new();
    for &run in c.runs {
        let r = if run == CHAPTER_RUN {
            find(chapter, c.shape, c.rows, c.imp)
        } else {
            tried
                .iter()
                .find(|(n, r)| n == run && r.shape == c.shape && r.rows == c.rows && r.imp == c.imp)
                .map(|(_, r)| r)
        };
        let r = r.ok_or_else(|| {
            format!(
                "run {run}: no row for {} at {} rows of {}",
                c.imp, c.rows, c.shape
            )
        })?;
        values.push(if c.warm {
            r.warm_median_us
        } else {
            r.cold_median_us
        });
    }
    let lo = fmt_us(values.iter().cloned().fold(f64::INFINITY, f64::min));
    let hi = fmt_us(values.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
    let v = if lo == hi { lo } else { format!("{lo}–{hi}") };
    let from = |run: &str| {
        if run == CHAPTER_RUN {
            GPU_CSV.to_string()
        } else {
            format!("{TRIED_CSV}, run {run}")
        }
    };
    let src: Vec<String> = c.runs.iter().map(|r| from(r)).collect();
    Ok((v, src.join("; ")))
}

/// The facts of the page's table of experiments that lost ([`TRIED`]), and the chapter's
/// targets as the bench checks them (`target_tiny`, `target_pair`, `target_fused`,
/// `target_chain`), so the page quotes them rather than types them.
fn tried_facts(root: &Path, chapter: &[BenchRow], f: &mut Facts) -> Result<(), String> {
    let tried = tried_rows(&read(root, TRIED_CSV)?, TRIED_CSV)?;
    for t in &TRIED {
        let (v, src) = cell_value(chapter, &tried, &t.tried)?;
        f.add(format!("tried_{}", t.name), v, &src);
        let (v, src) = cell_value(chapter, &tried, &t.kept)?;
        f.add(format!("tried_{}_kept", t.name), v, &src);
    }
    let src = "tools/src/figures/ch05.rs (the targets bench ch05 checks)";
    for (name, v) in [
        ("target_tiny", TINY_OVER_PROBE_MAX),
        ("target_pair", PAIR_OVER_PROBE_MAX),
        ("target_fused", FUSED_OVER_LOGITS_MAX),
        ("target_chain", CHAIN_OVER_PAIR_MIN),
    ] {
        f.add(name, format!("{v}"), src);
    }
    Ok(())
}

/// The block form's phases, in the order the probe marks them, with the page's words for each.
const PHASES: [(&str, &str); 8] = [
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
/// ends at and, in parentheses, the cycles it took.
fn phases_table(text: &str, name: &str) -> Result<String, String> {
    let t = crate::csv::Table::parse(text, name)?;
    let (shape, phase, end) = (t.col("shape")?, t.col("phase")?, t.col("end_cycles")?);
    let mut shapes: Vec<String> = Vec::new();
    for r in t.rows() {
        if !shapes.contains(&r.fields[shape]) {
            shapes.push(r.fields[shape].clone());
        }
    }
    let cycle = |s: &str, p: &str| -> Result<u64, String> {
        let r = t
            .rows()
            .iter()
            .find(|r| r.fields[shape] == s && r.fields[phase] == p)
            .ok_or_else(|| format!("{name}: no phase `{p}` for {s}"))?;
        r.fields[end].parse().map_err(|_| {
            format!(
                "{name}:{}: `{}` is not a cycle count",
                r.line, r.fields[end]
            )
        })
    };
    let mut s = format!(
        "<!-- generated by tools/plot from {name}; do not edit -->\n\n| phase ends (cycle, and the phase's own cycles) |"
    );
    for sh in &shapes {
        let _ = write!(s, " {} |", describe_shape(sh));
    }
    s += "\n|---|";
    s += &"---:|".repeat(shapes.len());
    s += "\n";
    for (i, (key, words)) in PHASES.iter().enumerate() {
        let _ = write!(s, "| {words} |");
        for sh in &shapes {
            let now = cycle(sh, key)?;
            let before = if i == 0 {
                0
            } else {
                cycle(sh, PHASES[i - 1].0)?
            };
            let took = now.checked_sub(before).ok_or_else(|| {
                format!("{name}: `{key}` of {sh} ends before the phase ahead of it")
            })?;
            let _ = write!(
                s,
                " {} (+{}) |",
                super::facts::thousands(now),
                super::facts::thousands(took)
            );
        }
        s += "\n";
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::header;

    /// A small CSV as the bench writes it: one shape, two row counts.
    fn rows() -> Vec<BenchRow> {
        let line = |imp: &str, n: u64, launches: u32, cold: f64, bytes: f64| {
            format!(
                "ch05,glm_h4096_e288_k8,{imp},{n},{launches},{cold},{cold},{cold},{w},{w},{w},3.0,{bytes},0,0,0,200,H200",
                w = cold / 2.0
            )
        };
        let text = [
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
        ]
        .join("\n");
        parse_csv(&format!("{text}\n"), "test.csv").unwrap()
    }

    #[test]
    fn facts_are_ratios_of_the_rows() {
        let f = facts(&rows());
        assert_eq!(f.get("glm_1_pair_cold"), Some("4.00"));
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
        // No cuBLAS + fused rows in this CSV: no crossover.
        assert_eq!(f.get("glm_blas_faster_from"), None);
        let mut more = rows();
        let b = |n: u64, cold: f64| {
            let mut r = find(&more, "glm_h4096_e288_k8", n, PAIR).unwrap().clone();
            (r.imp, r.cold_median_us) = ("blas_fused".into(), cold);
            r
        };
        let (slower, faster) = (b(1, 5.0), b(8192, 30.0));
        more.extend([slower, faster]);
        assert_eq!(facts(&more).get("glm_blas_faster_from"), Some("8192"));
        assert_eq!(f.get("glm_chain_launches"), Some("7"));
        assert_eq!(f.get("glm_torch_over_pair_min"), None);
    }

    #[test]
    fn the_table_and_the_figure_name_every_router() {
        let rows = rows();
        let t = table(&rows);
        assert!(
            t.contains("| pair (2 launches) | 4.00 / 2.00 | 40.0 / 20.0 |"),
            "{t}"
        );
        assert!(
            t.contains("| chain (7 launches) | 16.0 / 8.00 (4.00×) | 90.0 / 45.0 (2.25×) |"),
            "{t}"
        );
        assert!(t.contains("3.00 (pair 1.33×)"), "{t}");
        let svg = render_svg(&rows);
        for imp in ["pair", "chain"] {
            assert!(svg.contains(&format!("data-impl=\"{imp}\"")), "{imp}");
        }
        assert!(!svg.contains("data-impl=\"tiny_gemm\""));
    }

    #[test]
    fn a_cell_over_several_runs_is_their_range() {
        let row = |run: &str, cold: f64| {
            format!(
                "{run},ch05,{GLM},pair,1,2,{cold},{cold},{cold},1.0,1.0,1.0,3.0,2.4e6,0,0,0,200,H200"
            )
        };
        let text = format!("run,{}\n{}\n{}\n", header(), row("a", 7.94), row("b", 7.97));
        let tried = tried_rows(&text, "tried.csv").unwrap();
        let chapter = rows();
        let c = |runs| cell(runs, GLM, 1, "pair", false);
        let (v, src) = cell_value(&chapter, &tried, &c(&["a", "b"])).unwrap();
        assert_eq!(v, "7.94–7.97");
        assert_eq!(src, format!("{TRIED_CSV}, run a; {TRIED_CSV}, run b"));
        assert_eq!(cell_value(&chapter, &tried, &c(&["a"])).unwrap().0, "7.94");
        // The chapter's own run is read from its rows, not from the table of experiments.
        assert_eq!(
            cell_value(&chapter, &tried, &c(&[CHAPTER_RUN])).unwrap().0,
            "4.00"
        );
        // A case the run did not measure is an error, not a missing number.
        let e = cell_value(&chapter, &tried, &cell(&["a"], GLM, 96, "pair", false)).unwrap_err();
        assert!(e.contains("run a: no row for pair at 96 rows"), "{e}");
    }

    #[test]
    fn the_phase_table_gives_each_phase_its_cycles() {
        let mut text = String::from("shape,phase,end_cycles\n");
        for (i, (key, _)) in PHASES.iter().enumerate() {
            text += &format!("{GLM},{key},{}\n", 100 * (i + 1));
        }
        let t = phases_table(&text, "p.csv").unwrap();
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
        assert!(phases_table(&bad, "p.csv")
            .unwrap_err()
            .contains("ends before"));
        let short = text.replace(&format!("{GLM},weights,800\n"), "");
        assert!(phases_table(&short, "p.csv")
            .unwrap_err()
            .contains("no phase `weights`"));
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
