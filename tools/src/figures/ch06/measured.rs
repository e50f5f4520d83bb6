//! Chapter 6's measured section, from the H100 runs (`bench/results/h100/`, whose README says
//! which call made each) that timed the assembled layer and, each in the call that timed the part
//! of ours it faces, the engines' designs: `ch06.csv` (the layer, its router and its experts at
//! T = 1, 8, 64, 512, 4096, each with its floor), `ch06_steps.csv` (the layer launch by launch),
//! `ch04.csv` (chapter 4's experts from bf16 hidden states, `fused_bf16x`, beside the engines'
//! Triton kernel `engines_triton`; `fused`, from f32, beside its own variants,
//! and the portable path `fused_portable` beside version 1's rule `fused_tiled_v1`),
//! `ch05.csv` (the router pairs beside `engines_router` at every row count), `ch04_steps.csv`
//! (chapter 4's experts kernel by kernel) and `profile_engines.txt` (the engines' kernels by
//! PyTorch's profiler at 4096 tokens).
//!
//! Made from them: the side-by-side table against the issue's targets (`ch06-targets.md`), the
//! router against its target at every measured row count (`ch06-router-targets.md`), what that
//! target leaves the top-k after the logits GEMM where it is missed (`ch06-router-budget.md`),
//! the time of each part beside its floor (`ch06-parts.md`), and the facts the page quotes.

use super::super::facts::Facts;
use super::super::tables::{fmt_us, parse_steps};
use super::super::{read, short, title, Generated};
use super::crossover;
use crate::bench_row::{parse_csv, BenchRow, StepRow};
use std::path::Path;

const CH04: &str = "bench/results/h100/ch04.csv";
const CH04_STEPS: &str = "bench/results/h100/ch04_steps.csv";
const CH05: &str = "bench/results/h100/ch05.csv";
const CH06: &str = "bench/results/h100/ch06.csv";
const CH06_STEPS: &str = "bench/results/h100/ch06_steps.csv";
/// Where the layer's side-by-side numbers come from: our router and experts, and theirs.
const CH04_AND_CH05: &str = "bench/results/h100/ch04.csv and ch05.csv";
/// The router's budget: the engines' pair from one, our launches from the other.
const CH06_AND_CH05: &str = "bench/results/h100/ch06_steps.csv and ch05.csv";
const PROFILE: &str = "bench/results/h100/profile_engines.txt";
const TARGETS_MD: &str = "book/src/figures/ch06-targets.md";
const ROUTER_MD: &str = "book/src/figures/ch06-router-targets.md";
const PARTS_MD: &str = "book/src/figures/ch06-parts.md";
const BUDGET_MD: &str = "book/src/figures/ch06-router-budget.md";
/// Where the targets below are written, as the facts file names their source.
const HERE: &str = "tools/src/figures/ch06/measured.rs (the step's targets)";

/// The batch sizes the layer was measured at, and the targets of issue 36 (Step 7) at each:
/// our experts (align included) over the engines' Triton kernel (align given free).
pub const EXPERTS_TARGET: [(u64, f64); 5] =
    [(1, 0.95), (8, 1.0), (64, 1.0), (512, 0.95), (4096, 0.95)];
/// The whole layer (router included) over the engines' pipeline (cuBLAS gate GEMM + their router
/// kernel + their Triton experts), at each batch size.
pub const LAYER_TARGET: [(u64, f64); 5] =
    [(1, 0.9), (8, 1.0), (64, 1.0), (512, 0.95), (4096, 0.95)];
/// The router alone over the engines' pair (cuBLAS + their router kernel), at every row count.
pub const ROUTER_TARGET: f64 = 0.8;
/// The router article's decode step (section 3.4): GLM-5.3-Flash, one request, two B300s, this
/// many ms from one token to the next, over this many MoE layers.
pub const ARTICLE_STEP_MS: f64 = 5.0;
pub const ARTICLE_MOE_LAYERS: f64 = 42.0;
/// The decode and prefill sizes of the parts table.
const PART_SIZES: [u64; 2] = [1, 4096];
/// The prefill size where the engines' kernels were profiled.
const PROFILED: u64 = 4096;

/// Our implementations, as the CSVs name them: chapter 4's experts as they ship (f32 hidden
/// states in), and the same layer given them in bf16 (no `fused_to_bf16`; the same bits), as
/// chapter 6's layer hands them over and as the engines' kernels take them: the one set beside
/// the engines'.
const OURS_EXPERTS: &str = "fused";
const OURS_VS_ENGINES: &str = "fused_bf16x";
const ENGINES_EXPERTS: &str = "engines_triton";
const ENGINES_ROUTER: &str = "engines_router";
const PORTABLE: &str = "fused_portable";
const V1: &str = "fused_tiled_v1";

/// The bench row of `imp` at `n` rows of the shape whose short name is `s`.
fn at<'a>(rows: &'a [BenchRow], s: &str, n: u64, imp: &str) -> Option<&'a BenchRow> {
    rows.iter()
        .find(|r| short(&r.shape) == s && r.rows == n && r.imp == imp)
}

/// The cold median of `imp` at `n` rows of `s`, or an error naming the CSV.
fn cold(rows: &[BenchRow], csv: &str, s: &str, n: u64, imp: &str) -> Result<f64, String> {
    at(rows, s, n, imp)
        .map(|r| r.cold_median_us)
        .ok_or_else(|| format!("{csv}: no {imp} row at {n} rows of {s}"))
}

/// A ratio to two places, or to four where two would print the limit itself: the number beside
/// a verdict must show which side of the line it is on.
pub fn ratio(over: f64, limit: f64) -> String {
    if format!("{over:.2}") == format!("{limit:.2}") && over != limit {
        format!("{over:.4}")
    } else {
        format!("{over:.2}")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

/// The shapes of the layer's rows (`qwen3`, `glm`), in the CSV's order.
fn shapes(ch06: &[BenchRow]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in ch06.iter().filter(|r| r.imp == "layer") {
        let s = short(&r.shape).to_string();
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v
}

/// One part compared at one batch size: ours, theirs, the limit.
struct Compared {
    ours: f64,
    theirs: f64,
    limit: f64,
}

impl Compared {
    fn over(&self) -> f64 {
        self.ours / self.theirs
    }
    fn met(&self) -> bool {
        self.over() <= self.limit
    }
    fn cell(&self) -> String {
        format!(
            "{} (≤ {}): {}",
            ratio(self.over(), self.limit),
            self.limit,
            verdict(self.met())
        )
    }
}

/// The three parts at one shape and batch size, each side on the same inputs: experts
/// (chapter 4's `fused_bf16x` over `engines_triton`, on chapter 4's routings), router (the layer's
/// switch's choice in chapter 5's run over `engines_router`, on chapter 5's inputs) and the
/// layer (those two of ours over those two of theirs). Chapter 6's assembled layer routes its
/// own hidden states with its family's router, so its experts see another routing than the
/// peers' (the GLM-like router's bias makes it uneven): it is shown beside its own parts
/// (`assembled`: chapter 6's `layer` over its `router` + `experts`), not over the peers.
struct Side {
    experts: Compared,
    router: Compared,
    layer: Compared,
    /// Chapter 6's `layer`, and its `router` + `experts` measured alone.
    assembled: (f64, f64),
}

struct Runs {
    ch04: Vec<BenchRow>,
    ch05: Vec<BenchRow>,
    ch06: Vec<BenchRow>,
    /// The rows the layer's switch points were read off (`super::CH05`, the H200's chapter 5,
    /// which `chapters/ch06-layer/src/switch.rs` holds its constants to): which of our two
    /// routers the layer runs at a row count comes from them, its time from `ch05`.
    switch: Vec<BenchRow>,
}

impl Runs {
    fn side(&self, s: &str, n: u64, experts_limit: f64, layer_limit: f64) -> Result<Side, String> {
        let their_experts = cold(&self.ch04, CH04, s, n, ENGINES_EXPERTS)?;
        let their_router = cold(&self.ch05, CH05, s, n, ENGINES_ROUTER)?;
        Ok(Side {
            experts: Compared {
                ours: cold(&self.ch04, CH04, s, n, OURS_VS_ENGINES)?,
                theirs: their_experts,
                limit: experts_limit,
            },
            router: Compared {
                ours: self.switched_router(s, n)?.0,
                theirs: their_router,
                limit: ROUTER_TARGET,
            },
            layer: Compared {
                ours: self.switched_router(s, n)?.0
                    + cold(&self.ch04, CH04, s, n, OURS_VS_ENGINES)?,
                theirs: their_router + their_experts,
                limit: layer_limit,
            },
            assembled: (
                cold(&self.ch06, CH06, s, n, "layer")?,
                cold(&self.ch06, CH06, s, n, "router")? + cold(&self.ch06, CH06, s, n, "experts")?,
            ),
        })
    }

    /// The router as the layer's switch chooses it at `n` rows (the pair up to the switch point,
    /// cuBLAS + the fused router above), from chapter 5's run; and which it is.
    fn switched_router(&self, s: &str, n: u64) -> Result<(f64, &'static str), String> {
        let shape = self
            .ch05
            .iter()
            .find(|r| short(&r.shape) == s && r.imp == "pair")
            .map(|r| r.shape.clone())
            .ok_or_else(|| format!("{CH05}: no pair rows of {s}"))?;
        let (switch, _) = crossover(&self.switch, &shape);
        let imp = if n <= switch { "pair" } else { "blas_fused" };
        Ok((cold(&self.ch05, CH05, s, n, imp)?, imp))
    }
}

/// One kernel's row of PyTorch's profiler table: its total CUDA time (µs) and its number of
/// calls.
#[derive(Debug, PartialEq)]
pub struct Profiled {
    pub total_us: f64,
    pub calls: u64,
}

/// A profiler time (`13.177ms`, `744.765us`) in µs.
fn profiler_us(t: &str) -> Option<f64> {
    if let Some(ms) = t.strip_suffix("ms") {
        ms.parse::<f64>().ok().map(|v| v * 1e3)
    } else if let Some(us) = t.strip_suffix("us") {
        us.parse().ok()
    } else {
        t.strip_suffix('s')
            .and_then(|s| s.parse::<f64>().ok())
            .map(|v| v * 1e6)
    }
}

/// Reads `profile_engines.txt`: per section (`== SHAPE, T = N, …, C cold calls`), the shape, T,
/// the number of layer calls and the kernel named `kernel` (its `CUDA total` and `# of Calls`,
/// the last ten columns read from the right because a name may hold spaces).
pub fn parse_profile(
    text: &str,
    kernel: &str,
) -> Result<Vec<(String, u64, u64, Profiled)>, String> {
    let mut out = Vec::new();
    let mut head: Option<(String, u64, u64)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            let bad = || format!("{PROFILE}: cannot read the section line `{line}`");
            let (shape, rest) = rest.split_once(", T = ").ok_or_else(bad)?;
            let t: u64 = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)?;
            let calls: u64 = rest
                .strip_suffix(" cold calls")
                .and_then(|r| r.rsplit(", ").next())
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)?;
            head = Some((shape.to_string(), t, calls));
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() != Some(&kernel) || fields.len() != 11 {
            continue;
        }
        let (shape, t, calls) = head
            .clone()
            .ok_or_else(|| format!("{PROFILE}: a {kernel} row before any section line"))?;
        let bad = || format!("{PROFILE}: cannot read the {kernel} row of {shape}");
        let p = Profiled {
            total_us: profiler_us(fields[8]).ok_or_else(bad)?,
            calls: fields[10].parse().map_err(|_| bad())?,
        };
        out.push((shape, t, calls, p));
    }
    if out.is_empty() {
        return Err(format!("{PROFILE}: no {kernel} row"));
    }
    Ok(out)
}

/// The engines' kernel `kernel` at shape `s` and `PROFILED` tokens: µs per layer call (its
/// total over the section's cold calls; `fused_moe_kernel`'s row holds both GEMMs).
fn per_call(text: &str, s: &str, kernel: &str) -> Result<f64, String> {
    parse_profile(text, kernel)?
        .into_iter()
        .find(|(shape, t, _, _)| short(shape) == s && *t == PROFILED)
        .map(|(_, _, calls, p)| p.total_us / calls as f64)
        .ok_or_else(|| format!("{PROFILE}: no {kernel} row at {PROFILED} tokens of {s}"))
}

/// The side-by-side table: per shape, one column per batch size; each part's time, ours and the
/// engines', and the ratio beside its target.
fn targets_table(runs: &Runs, f: &mut Facts) -> Result<String, String> {
    let mut out = String::new();
    let (mut met, mut cases) = ([0u32; 3], 0u32);
    for s in shapes(&runs.ch06) {
        let head: Vec<String> = EXPERTS_TARGET
            .iter()
            .map(|(n, _)| format!("T = {n}"))
            .collect();
        out += &format!(
            "| {} | {} |\n|---|{}\n",
            title(&s),
            head.join(" | "),
            "---|".repeat(head.len())
        );
        let mut lines: [Vec<String>; 11] = Default::default();
        for (&(n, e), &(_, l)) in EXPERTS_TARGET.iter().zip(LAYER_TARGET.iter()) {
            let side = runs.side(&s, n, e, l)?;
            cases += 1;
            for (k, (name, c, from)) in [
                ("experts", &side.experts, CH04),
                ("router", &side.router, CH05),
                ("layer", &side.layer, CH04_AND_CH05),
            ]
            .into_iter()
            .enumerate()
            {
                lines[3 * k].push(fmt_us(c.ours));
                lines[3 * k + 1].push(fmt_us(c.theirs));
                lines[3 * k + 2].push(c.cell());
                met[k] += c.met() as u32;
                let base = format!("{s}_t{n}_{name}");
                f.add(format!("{base}_cold"), fmt_us(c.ours), from);
                f.add(format!("{base}_engines_cold"), fmt_us(c.theirs), from);
                f.add(format!("{base}_ratio"), ratio(c.over(), c.limit), from);
            }
            let (whole, parts) = side.assembled;
            lines[9].push(fmt_us(whole));
            lines[10].push(format!("{:.2}", whole / parts));
            f.add(format!("{s}_t{n}_assembled_cold"), fmt_us(whole), CH06);
            f.add(
                format!("{s}_t{n}_assembled_over_parts"),
                format!("{:.2}", whole / parts),
                CH06,
            );
        }
        let names = [
            "experts: chapter 4's from bf16, align included, µs",
            "experts: the engines' Triton kernel, align free, µs",
            "experts: ours ÷ theirs (target)",
            "router: chapter 5's pair as the switch chooses, µs",
            "router: cuBLAS + the engines' router kernel, µs",
            "router: ours ÷ theirs (target)",
            "layer: our router + experts, µs",
            "layer: the engines' router + Triton kernel, µs",
            "layer: ours ÷ theirs (target)",
            "assembled: chapter 6's one enqueue, on its own routing, µs",
            "assembled ÷ its router and experts timed alone",
        ];
        for (name, cells) in names.iter().zip(lines.iter()) {
            out += &format!("| {name} | {} |\n", cells.join(" | "));
        }
        out += "\n";
    }
    for (k, name) in ["experts", "router", "layer"].iter().enumerate() {
        f.add(format!("{name}_met"), met[k].to_string(), CH04_AND_CH05);
    }
    f.add("cases", cases.to_string(), CH06);
    Ok(out)
}

/// The router against its target at every row count chapter 5 measured: the layer's switch's
/// choice (the pair or cuBLAS + the fused router) over the engines' pair.
fn router_table(runs: &Runs, f: &mut Facts) -> Result<String, String> {
    let all = shapes(&runs.ch06);
    let mut out = String::from("| rows |");
    let mut align = String::from("|---:|");
    for s in &all {
        out += &format!(" {}: ours, µs | theirs, µs | ours ÷ theirs | |", title(s));
        align += "---|---:|---:|---|";
    }
    out += &format!("\n{align}\n");
    let mut counts: Vec<u64> = runs
        .ch05
        .iter()
        .filter(|r| r.imp == ENGINES_ROUTER)
        .map(|r| r.rows)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let mut stats: Vec<(u32, f64, u64, f64, u64)> = vec![(0, f64::MAX, 0, 0.0, 0); all.len()];
    let mut first_missed: Vec<Option<u64>> = vec![None; all.len()];
    for &n in &counts {
        out += &format!("| {n} |");
        for (i, s) in all.iter().enumerate() {
            let (ours, imp) = runs.switched_router(s, n)?;
            let theirs = cold(&runs.ch05, CH05, s, n, ENGINES_ROUTER)?;
            let over = ours / theirs;
            let which = if imp == "pair" {
                "pair"
            } else {
                "cuBLAS + ours"
            };
            out += &format!(
                " {} ({which}) | {} | {} | {} |",
                fmt_us(ours),
                fmt_us(theirs),
                ratio(over, ROUTER_TARGET),
                verdict(over <= ROUTER_TARGET)
            );
            if over > ROUTER_TARGET && first_missed[i].is_none() {
                first_missed[i] = Some(n);
            }
            let st = &mut stats[i];
            st.0 += (over <= ROUTER_TARGET) as u32;
            if over < st.1 {
                (st.1, st.2) = (over, n);
            }
            if over > st.3 {
                (st.3, st.4) = (over, n);
            }
        }
        out += "\n";
    }
    f.add("router_counts", counts.len().to_string(), CH05);
    for ((s, (met, lo, lo_n, hi, hi_n)), missed) in all.iter().zip(stats).zip(first_missed) {
        f.add(format!("{s}_router_met"), met.to_string(), CH05);
        if let Some(n) = missed {
            f.add(format!("{s}_router_first_missed_rows"), n.to_string(), CH05);
        }
        f.add(format!("{s}_router_ratio_min"), format!("{lo:.2}"), CH05);
        f.add(format!("{s}_router_ratio_min_rows"), lo_n.to_string(), CH05);
        f.add(format!("{s}_router_ratio_max"), format!("{hi:.2}"), CH05);
        f.add(format!("{s}_router_ratio_max_rows"), hi_n.to_string(), CH05);
    }
    Ok(out)
}

/// Where the router misses its target at the layer's batch sizes, what the target leaves the
/// top-k kernel: 0.8 × the engines' pair (`ch05.csv`) less the layer's logits GEMM, its first
/// launch (`ch06_steps.csv`: chapter 5's tiny GEMM up to the switch point, cuBLAS's above),
/// beside what the layer's top-k launch adds after it (the next step's cold difference). Facts:
/// `{s}_budget_left_max` (the most the target leaves, µs) and `{s}_budget_adds_min` (the least
/// ours adds), each with its `_rows`, over the missed sizes of shape `s`; where cuBLAS computes
/// the logits, `{s}_budget_blas_adds_over_left_min` (what ours adds over what is left, the least).
fn router_budget(runs: &Runs, steps: &[StepRow], f: &mut Facts) -> Result<String, String> {
    let mut out = format!(
        "| gate | T | the logits GEMM alone, cold µs | {ROUTER_TARGET} × the engines' pair, µs | left for the top-k, µs | our top-k adds, µs | adds ÷ left |\n\
         |---|---:|---|---:|---:|---|---:|\n",
    );
    for s in shapes(&runs.ch06) {
        // (left, rows) at its largest, (adds, rows) at its smallest; where cuBLAS computes the
        // logits, adds over left at its smallest (`None`: no such size, or nothing left).
        let (mut left_max, mut adds_min) = ((f64::MIN, 0), (f64::MAX, 0));
        let mut blas_over: Option<(f64, u64)> = None;
        for (n, _) in EXPERTS_TARGET {
            let (ours, imp) = runs.switched_router(&s, n)?;
            let theirs = cold(&runs.ch05, CH05, &s, n, ENGINES_ROUTER)?;
            if ours / theirs <= ROUTER_TARGET {
                continue;
            }
            let step = |k: u32| {
                steps
                    .iter()
                    .find(|r| short(&r.shape) == s && r.rows == n && r.step == k)
                    .ok_or_else(|| format!("{CH06_STEPS}: no step {k} at {n} rows of {s}"))
            };
            let (gemm, topk) = (step(1)?, step(2)?);
            if !topk.kernel.starts_with("fused_router") {
                return Err(format!(
                    "{CH06_STEPS}: step 2 at {n} rows of {s} is `{}`, not the top-k",
                    topk.kernel
                ));
            }
            // The layer's GEMM must be the one the router table's row times: cuBLAS above the
            // switch point, the tiny GEMM up to it.
            let blas = imp == "blas_fused";
            if blas != (gemm.kernel == "linear") || (!blas && !gemm.kernel.starts_with("tiny_gemm"))
            {
                return Err(format!(
                    "{CH06_STEPS}: step 1 at {n} rows of {s} is `{}`, but the switch runs {imp}",
                    gemm.kernel
                ));
            }
            let budget = ROUTER_TARGET * theirs;
            let left = budget - gemm.cold_us;
            let over = topk.cold_us / left;
            out += &format!(
                "| {} | {n} | `{}` {} | {} | {left:.1} | `{}` {} | {} |\n",
                title(&s),
                gemm.kernel,
                fmt_us(gemm.cold_us),
                fmt_us(budget),
                topk.kernel,
                step_cell(topk.cold_us),
                if left > 0.0 {
                    format!("{over:.1}")
                } else {
                    "—".into()
                }
            );
            if blas && left > 0.0 && blas_over.is_none_or(|(o, _)| over < o) {
                blas_over = Some((over, n));
            }
            if left > left_max.0 {
                left_max = (left, n);
            }
            if topk.cold_us < adds_min.0 {
                adds_min = (topk.cold_us, n);
            }
        }
        if left_max.1 > 0 {
            f.add(
                format!("{s}_budget_left_max"),
                format!("{:.1}", left_max.0),
                CH06_AND_CH05,
            );
            f.add(
                format!("{s}_budget_left_max_rows"),
                left_max.1.to_string(),
                CH06_AND_CH05,
            );
            f.add(
                format!("{s}_budget_adds_min"),
                format!("{:.1}", adds_min.0),
                CH06_STEPS,
            );
            f.add(
                format!("{s}_budget_adds_min_rows"),
                adds_min.1.to_string(),
                CH06_STEPS,
            );
        }
        if let Some((over, n)) = blas_over {
            f.add(
                format!("{s}_budget_blas_adds_over_left_min"),
                format!("{over:.1}"),
                CH06_AND_CH05,
            );
            f.add(
                format!("{s}_budget_blas_adds_over_left_min_rows"),
                n.to_string(),
                CH06_AND_CH05,
            );
        }
    }
    Ok(out)
}

/// A step's cold time as the table shows it: a difference of two noisy prefixes, so one below
/// zero is `≈0`.
fn step_cell(v: f64) -> String {
    if v < 0.05 {
        "≈0".into()
    } else {
        fmt_us(v)
    }
}

/// Each part beside its floor, per shape, at one decode and one prefill size: the router (the
/// layer's launches up to its top-k), the experts (the rest) and the layer, each with its
/// launches' cold times (`ch06_steps.csv`), its cold median and its floor (`ch06.csv`).
fn parts_table(runs: &Runs, steps: &[StepRow], f: &mut Facts) -> Result<String, String> {
    let mut out = String::from(
        "| shape | T | part | launches, cold µs each | cold, µs | floor, µs | ÷ floor |\n\
         |---|---:|---|---|---:|---:|---:|\n",
    );
    for s in shapes(&runs.ch06) {
        for n in PART_SIZES {
            let mine: Vec<&StepRow> = steps
                .iter()
                .filter(|r| short(&r.shape) == s && r.rows == n)
                .collect();
            let split = mine
                .iter()
                .position(|r| r.kernel.starts_with("fused_router"))
                .map(|k| k + 1)
                .ok_or_else(|| format!("{CH06_STEPS}: no router step at {n} rows of {s}"))?;
            let list = |rs: &[&StepRow]| {
                rs.iter()
                    .map(|r| format!("`{}` {}", r.kernel, step_cell(r.cold_us)))
                    .collect::<Vec<_>>()
                    .join(" · ")
            };
            for (part, kernels) in [
                ("router", list(&mine[..split])),
                ("experts", list(&mine[split..])),
                ("layer", format!("{} launches", mine.len())),
            ] {
                let r = at(&runs.ch06, &s, n, part)
                    .ok_or_else(|| format!("{CH06}: no {part} row at {n} rows of {s}"))?;
                let over = r.cold_median_us / r.floor_us;
                out += &format!(
                    "| {} | {n} | {part} | {kernels} | {} | {} | {over:.2} |\n",
                    title(&s),
                    fmt_us(r.cold_median_us),
                    fmt_us(r.floor_us)
                );
                let base = format!("{s}_t{n}_{part}");
                f.add(format!("{base}_floor"), fmt_us(r.floor_us), CH06);
                f.add(format!("{base}_over_floor"), format!("{over:.2}"), CH06);
            }
            f.add(
                format!("{s}_t{n}_launches"),
                mine.len().to_string(),
                CH06_STEPS,
            );
        }
    }
    Ok(out)
}

/// Where the layer sits in a decode step: our GLM-like layer at one token as a share of the
/// router article's time per MoE layer of a decode step.
fn decode_step(runs: &Runs, f: &mut Facts) -> Result<(), String> {
    let per_layer = ARTICLE_STEP_MS * 1e3 / ARTICLE_MOE_LAYERS;
    let ours = cold(&runs.ch06, CH06, "glm", 1, "layer")?;
    f.add("article_layer_us", format!("{per_layer:.0}"), HERE);
    f.add(
        "glm_t1_share_of_article_layer_pct",
        format!("{:.0}", 100.0 * ours / per_layer),
        CH06,
    );
    f.add(
        "glm_t1_layers_ms",
        format!("{:.1}", ours * ARTICLE_MOE_LAYERS / 1e3),
        CH06,
    );
    Ok(())
}

/// Why the engines' kernel is ahead at the prefill size: our two GEMMs (chapter 4's steps) beside
/// their `fused_moe_kernel` per layer call (the profiler), and the other steps of both.
fn prefill_gap(
    runs: &Runs,
    steps4: &[StepRow],
    profile: &str,
    f: &mut Facts,
) -> Result<(), String> {
    for s in shapes(&runs.ch06) {
        let mine: Vec<&StepRow> = steps4
            .iter()
            .filter(|r| short(&r.shape) == s && r.rows == PROFILED)
            .collect();
        let sum = |pre: &str| -> f64 {
            mine.iter()
                .filter(|r| r.kernel.starts_with(pre))
                .map(|r| r.cold_us)
                .sum()
        };
        let (g1, g2) = (sum("fused_gemm1"), sum("fused_gemm2"));
        if g1 == 0.0 || g2 == 0.0 {
            return Err(format!(
                "{CH04_STEPS}: no GEMM steps at {PROFILED} tokens of {s}"
            ));
        }
        let theirs = per_call(profile, &s, "fused_moe_kernel")?;
        let t = PROFILED;
        f.add(format!("{s}_t{t}_our_gemm1"), fmt_us(g1), CH04_STEPS);
        f.add(format!("{s}_t{t}_our_gemm2"), fmt_us(g2), CH04_STEPS);
        f.add(format!("{s}_t{t}_our_gemms"), fmt_us(g1 + g2), CH04_STEPS);
        f.add(
            format!("{s}_t{t}_our_align"),
            step_cell(sum("align")),
            CH04_STEPS,
        );
        f.add(
            format!("{s}_t{t}_our_to_bf16"),
            step_cell(sum("fused_to_bf16")),
            CH04_STEPS,
        );
        f.add(
            format!("{s}_t{t}_our_combine"),
            step_cell(sum("fused_combine")),
            CH04_STEPS,
        );
        // The steps around the GEMMs in the side-by-side's layer (`OURS_VS_ENGINES`, bf16 in):
        // chapter 4's conversion launch is not among them.
        let others = sum("align") + sum("fused_combine");
        f.add(
            format!("{s}_t{t}_our_others"),
            step_cell(others),
            CH04_STEPS,
        );
        f.add(format!("{s}_t{t}_engines_gemms"), fmt_us(theirs), PROFILE);
        f.add(
            format!("{s}_t{t}_gemms_ratio"),
            format!("{:.2}", (g1 + g2) / theirs),
            PROFILE,
        );
        f.add(
            format!("{s}_t{t}_gemms_gap"),
            fmt_us(g1 + g2 - theirs),
            PROFILE,
        );
        let silu = per_call(profile, &s, "silu_and_mul_kernel")?;
        let moe_sum = per_call(profile, &s, "moe_sum_kernel")?;
        f.add(format!("{s}_t{t}_engines_silu"), fmt_us(silu), PROFILE);
        f.add(format!("{s}_t{t}_engines_sum"), fmt_us(moe_sum), PROFILE);
        f.add(
            format!("{s}_t{t}_engines_others"),
            fmt_us(silu + moe_sum),
            PROFILE,
        );
        let gap = cold(&runs.ch04, CH04, &s, t, OURS_VS_ENGINES)?
            - cold(&runs.ch04, CH04, &s, t, ENGINES_EXPERTS)?;
        f.add(format!("{s}_t{t}_experts_gap"), fmt_us(gap), CH04);
    }
    Ok(())
}

/// The portable path (what a GPU without sm_90a runs) over the fused layer and over version 1's
/// rule, at the prefill sizes.
fn portable(runs: &Runs, f: &mut Facts) -> Result<(), String> {
    for s in shapes(&runs.ch06) {
        for n in [512, 4096] {
            let p = cold(&runs.ch04, CH04, &s, n, PORTABLE)?;
            let ours = cold(&runs.ch04, CH04, &s, n, OURS_EXPERTS)?;
            let v1 = cold(&runs.ch04, CH04, &s, n, V1)?;
            f.add(format!("{s}_t{n}_portable_cold"), fmt_us(p), CH04);
            f.add(format!("{s}_t{n}_v1_cold"), fmt_us(v1), CH04);
            f.add(
                format!("{s}_t{n}_portable_over_fused"),
                format!("{:.2}", p / ours),
                CH04,
            );
            f.add(
                format!("{s}_t{n}_portable_over_v1"),
                format!("{:.2}", p / v1),
                CH04,
            );
            f.add(
                format!("{s}_t{n}_v1_over_portable"),
                format!("{:.1}", v1 / p),
                CH04,
            );
        }
    }
    Ok(())
}

/// Chapter 4's grouped order (versions 4 to 8 on a grid that takes the tiles WG_GROUP_M at a
/// time, the engines' GROUP_SIZE_M; the default) against the plain grid of tiles × column blocks
/// (`fused_ungrouped`) at 4096 tokens: where the tuned tile there is persistent (versions 10 and
/// 11 order their own items), the same kernel twice, so the ratio is the run's spread.
fn grouped(runs: &Runs, f: &mut Facts) -> Result<(), String> {
    for s in shapes(&runs.ch06) {
        let n = 4096;
        let plain = cold(&runs.ch04, CH04, &s, n, "fused_ungrouped")?;
        let ours = cold(&runs.ch04, CH04, &s, n, OURS_EXPERTS)?;
        f.add(
            format!("{s}_t{n}_grouped_over_ungrouped"),
            format!("{:.3}", ours / plain),
            CH04,
        );
    }
    Ok(())
}

/// The targets as facts, from the constants above.
fn target_facts(f: &mut Facts) {
    for ((n, e), (_, l)) in EXPERTS_TARGET.iter().zip(LAYER_TARGET.iter()) {
        f.add(format!("target_experts_t{n}"), e.to_string(), HERE);
        f.add(format!("target_layer_t{n}"), l.to_string(), HERE);
    }
    f.add("target_router", ROUTER_TARGET.to_string(), HERE);
}

/// The measured section's files, and its facts appended to `f`; `None` until `ch06.csv` is
/// committed. `switch`: the rows the layer's switch points were read off (the caller's parse of
/// `super::CH05`).
pub fn generate(
    root: &Path,
    switch: &[BenchRow],
    f: &mut Facts,
) -> Result<Option<Vec<Generated>>, String> {
    if !root.join(CH06).exists() {
        return Ok(None);
    }
    let runs = Runs {
        ch04: parse_csv(&read(root, CH04)?, CH04)?,
        ch05: parse_csv(&read(root, CH05)?, CH05)?,
        ch06: parse_csv(&read(root, CH06)?, CH06)?,
        switch: switch.to_vec(),
    };
    let steps6 = parse_steps(&read(root, CH06_STEPS)?, CH06_STEPS)?;
    let steps4 = parse_steps(&read(root, CH04_STEPS)?, CH04_STEPS)?;
    let profile = read(root, PROFILE)?;
    // One GPU for the whole section: its tables set these three CSVs side by side.
    let gpu = super::super::one_gpu(
        runs.ch04
            .iter()
            .chain(&runs.ch05)
            .chain(&runs.ch06)
            .map(|r| r.device.as_str()),
        &format!("{CH04}, {CH05}, {CH06}"),
    )?;
    f.add("gpu", gpu, CH06);
    target_facts(f);
    let targets = targets_table(&runs, f)?;
    let router = router_table(&runs, f)?;
    let budget = router_budget(&runs, &steps6, f)?;
    let parts = parts_table(&runs, &steps6, f)?;
    decode_step(&runs, f)?;
    prefill_gap(&runs, &steps4, &profile, f)?;
    portable(&runs, f)?;
    grouped(&runs, f)?;
    Ok(Some(vec![
        Generated {
            path: TARGETS_MD.into(),
            content: targets,
        },
        Generated {
            path: ROUTER_MD.into(),
            content: router,
        },
        Generated {
            path: PARTS_MD.into(),
            content: parts,
        },
        Generated {
            path: BUDGET_MD.into(),
            content: budget,
        },
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_is_read_per_section() {
        let text = "warning\n== qwen3_h2048_i768_e128_k8, T = 4096, configuration {'A': 1, 'B': 2}, 20 cold calls\n\
            ----\n Name  Self CPU %\n\
            fused_moe_kernel 0.00% 0.000us 0.00% 0.000us 0.000us 13.177ms 81.88% 13.177ms 329.437us 40\n\
            void at::native::x<4, at... 0.00% 0.000us 0.00% 0.000us 0.000us 1.499ms 9.31% 1.499ms 74.936us 20\n\
            moe_sum_kernel 0.00% 0.000us 0.00% 0.000us 0.000us 744.765us 4.63% 744.765us 37.238us 20\n";
        let p = parse_profile(text, "fused_moe_kernel").unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].1, p[0].2, p[0].3.calls), (4096, 20, 40));
        assert!((p[0].3.total_us - 13177.0).abs() < 1e-6);
        assert!((per_call(text, "qwen3", "fused_moe_kernel").unwrap() - 658.85).abs() < 1e-6);
        assert!((per_call(text, "qwen3", "moe_sum_kernel").unwrap() - 37.23825).abs() < 1e-6);
        assert!(per_call(text, "glm", "fused_moe_kernel").is_err());
        assert!(parse_profile("nothing", "fused_moe_kernel").is_err());
        assert!(parse_profile("== x, T = 1, 20 calls\n", "fused_moe_kernel").is_err());
    }

    #[test]
    fn a_ratio_on_its_limit_shows_its_side() {
        assert_eq!(ratio(0.87, 0.95), "0.87");
        assert_eq!(ratio(0.9503, 0.95), "0.9503");
        assert_eq!(ratio(0.95, 0.95), "0.95");
        let c = Compared {
            ours: 2.0,
            theirs: 2.0,
            limit: 1.0,
        };
        assert_eq!(c.cell(), "1.00 (≤ 1): met");
        let c = Compared {
            ours: 2.1,
            theirs: 2.0,
            limit: 1.0,
        };
        assert_eq!(c.cell(), "1.05 (≤ 1): **missed**");
    }

    /// Runs with ours and the engines' at every batch size of one shape (`qwen3`): the experts
    /// from bf16 `e` (from f32, `e` + 100) and the engines' `te`, the router `r` and `tr`, the
    /// layer `l`; the pair at every row count faster than cuBLAS up to 8 rows.
    fn runs(e: f64, te: f64, r: f64, tr: f64, l: f64) -> Runs {
        let (s4, s5) = ("qwen3_h2048_i768_e128_k8", "qwen3_h2048_e128_k8");
        let mut runs = Runs {
            ch04: vec![],
            ch05: vec![],
            ch06: vec![],
            switch: vec![],
        };
        for (n, _) in EXPERTS_TARGET {
            runs.ch04
                .push(BenchRow::flat("ch04", s4, OURS_VS_ENGINES, n, e));
            // Chapter 4's layer from f32, with its conversion: not the one beside the engines.
            runs.ch04
                .push(BenchRow::flat("ch04", s4, OURS_EXPERTS, n, e + 100.0));
            runs.ch04
                .push(BenchRow::flat("ch04", s4, ENGINES_EXPERTS, n, te));
            runs.ch05
                .push(BenchRow::flat("ch05", s5, ENGINES_ROUTER, n, tr));
            runs.ch05.push(BenchRow::flat(
                "ch05",
                s5,
                "pair",
                n,
                if n <= 8 { 1.0 } else { 9.0 },
            ));
            runs.ch05
                .push(BenchRow::flat("ch05", s5, "blas_fused", n, 5.0));
            for (imp, us) in [("router", r), ("layer", l), ("experts", e)] {
                runs.ch06.push(BenchRow {
                    floor_us: us / 2.0,
                    ..BenchRow::flat("ch06", s4, imp, n, us)
                });
            }
        }
        // The switch read off the same rows here (the pair up to 8 rows).
        runs.switch = runs.ch05.clone();
        runs
    }

    #[test]
    fn the_budget_sets_what_the_target_leaves_the_top_k_beside_what_ours_adds() {
        // The engines' pair 2.0 µs: the target leaves 1.6 µs less the GEMM alone. Up to 8 rows
        // the pair (1.0 µs, met) is not in the table; above, cuBLAS + ours 5.0 (missed), the
        // layer's GEMM 3.0 µs (at 4096 rows 4.0) and its top-k 2.0 (at 4096, 1.0).
        let runs = runs(9.0, 10.0, 1.0, 2.0, 10.0);
        let s6 = "qwen3_h2048_i768_e128_k8";
        let mut steps = Vec::new();
        for (n, _) in EXPERTS_TARGET {
            let (gemm, topk) = match n {
                4096 => (4.0, 1.0),
                512 => (1.0, 2.0),
                _ => (3.0, 2.0),
            };
            for (step, kernel, us) in [(1, "linear", gemm), (2, "fused_router_block", topk)] {
                steps.push(StepRow {
                    chapter: "ch06".into(),
                    shape: s6.into(),
                    rows: n,
                    step,
                    kernel: kernel.into(),
                    prefix_cold_us: 0.0,
                    prefix_warm_us: 0.0,
                    cold_us: us,
                    warm_us: us,
                });
            }
        }
        let mut f = Facts::default();
        let t = router_budget(&runs, &steps, &mut f).unwrap();
        assert_eq!(t.lines().count(), 2 + 3, "{t}");
        assert!(
            t.contains(
                "| Qwen3-30B-A3B | 64 | `linear` 3.00 | 1.60 | -1.4 | `fused_router_block` 2.00 |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| 4096 | `linear` 4.00 | 1.60 | -2.4 | `fused_router_block` 1.00 |"),
            "{t}"
        );
        assert!(
            t.contains("| 512 | `linear` 1.00 | 1.60 | 0.6 | `fused_router_block` 2.00 | 3.3 |"),
            "{t}"
        );
        assert_eq!(f.get("qwen3_budget_left_max"), Some("0.6"));
        assert_eq!(f.get("qwen3_budget_left_max_rows"), Some("512"));
        assert_eq!(f.get("qwen3_budget_blas_adds_over_left_min"), Some("3.3"));
        assert_eq!(
            f.get("qwen3_budget_blas_adds_over_left_min_rows"),
            Some("512")
        );
        assert_eq!(f.get("qwen3_budget_adds_min"), Some("1.0"));
        assert_eq!(f.get("qwen3_budget_adds_min_rows"), Some("4096"));
        // A step 2 that is not the top-k, or a missing step, is an error naming the CSV.
        let mut wrong = steps.clone();
        wrong.retain(|r| !(r.rows == 512 && r.step == 2));
        let e = router_budget(&runs, &wrong, &mut Facts::default()).unwrap_err();
        assert!(e.contains("no step 2 at 512 rows"), "{e}");
        wrong = steps.clone();
        wrong[7].kernel = "align_count".into(); // 512 rows, step 2
        let e = router_budget(&runs, &wrong, &mut Facts::default()).unwrap_err();
        assert!(e.contains("not the top-k"), "{e}");
        // Step 1 must be the GEMM the switch runs there (cuBLAS's above 8 rows here).
        wrong = steps;
        wrong[6].kernel = "tiny_gemm_tc".into(); // 512 rows, step 1
        let e = router_budget(&runs, &wrong, &mut Facts::default()).unwrap_err();
        assert!(e.contains("but the switch runs blas_fused"), "{e}");
    }

    #[test]
    fn the_side_by_side_table_judges_each_part_by_its_target() {
        // Experts 0.9 of theirs: met where the target is 0.95 and 1.0. Router 0.5: met. Layer
        // 10 against 2 + 10: 0.83, met everywhere.
        let mut f = Facts::default();
        let t = targets_table(&runs(9.0, 10.0, 1.0, 2.0, 10.0), &mut f).unwrap();
        assert!(t.starts_with("| Qwen3-30B-A3B | T = 1 | T = 8 |"), "{t}");
        assert!(
            t.contains(
                "| experts: ours ÷ theirs (target) | 0.90 (≤ 0.95): met | 0.90 (≤ 1): met |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| layer: the engines' router + Triton kernel, µs | 12.0 |"),
            "{t}"
        );
        assert_eq!(f.get("qwen3_t1_layer_ratio"), Some("0.83"));
        assert_eq!(f.get("experts_met"), Some("5"));
        // Experts 0.97 of theirs: missed at 1, 512 and 4096 only.
        let mut f = Facts::default();
        let t = targets_table(&runs(9.7, 10.0, 1.0, 2.0, 10.0), &mut f).unwrap();
        assert!(
            t.contains("| 0.97 (≤ 0.95): **missed** | 0.97 (≤ 1): met |"),
            "{t}"
        );
        assert_eq!(f.get("experts_met"), Some("2"));
        // A missing engines' row is an error naming the CSV.
        let mut r = runs(9.0, 10.0, 1.0, 2.0, 10.0);
        r.ch05.retain(|x| x.imp != ENGINES_ROUTER);
        let e = targets_table(&r, &mut Facts::default()).unwrap_err();
        assert!(e.contains(CH05) && e.contains(ENGINES_ROUTER), "{e}");
    }

    #[test]
    fn the_router_table_follows_the_switch() {
        // The pair (1 µs) up to 8 rows, cuBLAS + the fused router (5 µs) above; theirs 5 µs.
        let mut f = Facts::default();
        let t = router_table(&runs(1.0, 1.0, 1.0, 5.0, 1.0), &mut f).unwrap();
        assert!(t.contains("| 8 | 1.00 (pair) | 5.00 | 0.20 | met |"), "{t}");
        assert!(
            t.contains("| 64 | 5.00 (cuBLAS + ours) | 5.00 | 1.00 | **missed** |"),
            "{t}"
        );
        assert_eq!(f.get("qwen3_router_met"), Some("2"));
        assert_eq!(f.get("qwen3_router_first_missed_rows"), Some("64"));
        assert_eq!(f.get("qwen3_router_ratio_max_rows"), Some("64"));
    }

    #[test]
    fn the_parts_split_at_the_router() {
        let step = |n: u64, st: u32, k: &str, us: f64| StepRow {
            chapter: "ch06".into(),
            shape: "qwen3_h2048_i768_e128_k8".into(),
            rows: n,
            step: st,
            kernel: k.into(),
            prefix_cold_us: 0.0,
            prefix_warm_us: 0.0,
            cold_us: us,
            warm_us: us,
        };
        let mut steps = Vec::new();
        for n in PART_SIZES {
            steps.push(step(n, 1, "tiny_gemm_r1", 5.0));
            steps.push(step(n, 2, "fused_router_block", 1.5));
            steps.push(step(n, 3, "decode_gemm1", 14.0));
            steps.push(step(n, 4, "fused_combine", -0.5));
        }
        let mut f = Facts::default();
        let t = parts_table(&runs(20.0, 1.0, 6.0, 1.0, 24.0), &steps, &mut f).unwrap();
        assert!(t.contains("| Qwen3-30B-A3B | 1 | router | `tiny_gemm_r1` 5.00 · `fused_router_block` 1.50 | 6.00 | 3.00 | 2.00 |"), "{t}");
        assert!(
            t.contains("| experts | `decode_gemm1` 14.0 · `fused_combine` ≈0 |"),
            "{t}"
        );
        assert!(
            t.contains("| layer | 4 launches | 24.0 | 12.0 | 2.00 |"),
            "{t}"
        );
        assert_eq!(f.get("qwen3_t1_launches"), Some("4"));
        // No router step: an error naming the steps file.
        steps.retain(|r| !r.kernel.starts_with("fused_router"));
        let e = parts_table(
            &runs(20.0, 1.0, 6.0, 1.0, 24.0),
            &steps,
            &mut Facts::default(),
        )
        .unwrap_err();
        assert!(e.contains(CH06_STEPS), "{e}");
    }

    #[test]
    fn the_targets_are_the_issues() {
        let at = |t: &[(u64, f64)], n: u64| t.iter().find(|(m, _)| *m == n).unwrap().1;
        assert_eq!(at(&EXPERTS_TARGET, 1), 0.95);
        assert_eq!(at(&EXPERTS_TARGET, 64), 1.0);
        assert_eq!(at(&LAYER_TARGET, 1), 0.9);
        assert_eq!(at(&LAYER_TARGET, 4096), 0.95);
        assert_eq!(ROUTER_TARGET, 0.8);
    }
}
