//! `bench ch04-tune`: chapter 4's configurations by shape. For each layer shape and batch bucket
//! (T = 1, 2, 4, … 4096 tokens) it times every candidate that can run the batch, the tiled path
//! in each tile configuration (`ch04_fused_moe::choose::TILE_CONFIGS`) and the decode and grouped
//! decode paths in a few launch geometries, on the GPU with the harness of `moe_kernels::measure` (CUDA graphs,
//! cold = L2 flushed by reading before each replay), and writes the fastest per bucket, beside
//! what the rule alone would run, as the table the layer compiles in
//! (`bench/results/h100/ch04_tuned.csv`, [`TunedTable`]); every candidate's timing goes to a
//! second file.
//!
//! ```text
//! bench ch04-tune [--shapes qwen3,glm] [--tokens 1,2,4,…] [--out-dir bench/results/h200] [--quick]
//!                 [--configs NAME,NAME…]   only these candidates (and the rule's, to compare)
//! bench ch04-tune --quick          without a GPU: every candidate once on the emulator at a
//!                                  tiny shape (checks and plumbing, no timing worth a
//!                                  number); writes nothing
//! ```
//!
//! Then commit the table and rebuild: `FusedDevice` reads it at build time (`include_str!`).
//!
//! What is timed is [`FusedDevice::enqueue_experts`] on a routing already on the device (the
//! router is not in the graph): each candidate's whole layer, conversion, alignment, GEMMs and
//! combine included. The winner is the lowest cold median: a decode step reads each layer's
//! weights from memory, not from the L2. The decode candidates run only up to 16 pairs per
//! expert on average ([`DECODE_MAX_PAIRS_PER_EXPERT`]): beyond that they read an expert's
//! weights once per pair, far slower than a tile.
//!
//! Before timing, every candidate runs once and is checked: all tiled candidates must give the
//! same bits, all decode and grouped decode candidates the same bits, and the tiled and decode
//! paths must agree within `ch04_fused_moe::ACROSS_SUM_ORDERS`; the run stops at the first
//! difference. A grouped decode candidate that wins a bucket goes into the table like any other
//! (the layer runs what the table names); the committed table predates it.
//!
//! The weights are made on the device (`FusedDevice::patterned_on_device`): no host copy, so a
//! GLM-sized layer (3.6 G weights) is ready in a moment.

use crate::cases::BenchError;
use crate::ch02::Shape;
use crate::common::bar;
use ch02_grouped::compare::check_output;
use ch03_align::layout::choose_block_m;
use ch03_align::regimes::routed_ids;
use ch04_fused_moe::choose::{
    Choice, DecodeGeometry, Fusion, Path, TileConfig, TunedRow, TunedTable, HOPPER_CONFIGS,
    TILE_CONFIGS,
};
use ch04_fused_moe::FusedDevice;
use moe_kernels::measure::{Harness, Plan};
use moe_kernels::{Device, DeviceBuffer};
use std::path::PathBuf;
use std::time::Instant;

/// `bench ch04-tune`'s arguments.
#[derive(clap::Args)]
pub struct TuneArgs {
    /// Shapes to tune: qwen3 (H 2048, I 768, E 128, k 8), glm (4096, 1024, 288, 8), deepseek_v3
    /// (7168, 2048, 256, 8), mixtral (4096, 14336, 8, 2).
    #[arg(long, value_delimiter = ',', default_value = "qwen3,glm")]
    shapes: Vec<String>,
    /// Batch buckets, in tokens.
    #[arg(long, value_delimiter = ',', default_values_t = TOKENS)]
    tokens: Vec<usize>,
    /// Where the table (`ch04_tuned.csv`) and every candidate's timing (`ch04_tune_all.csv`) go.
    #[arg(long, default_value = "bench/results/h200")]
    out_dir: PathBuf,
    /// GPU: fewer samples (a smoke test of the pipeline, not a table to commit). Without a GPU:
    /// every candidate once on the emulator at a tiny shape, writing nothing. Also
    /// `MOE_BENCH_QUICK=1`.
    #[arg(long)]
    quick: bool,
    /// Only these candidates, by the names of the `config` column of `ch04_tune_all.csv` (e.g.
    /// `g1_k64_n8_s4_x_tma_ws_ps,w4_c1_na_swiglu`), and the rule's choice beside them: a quick
    /// comparison of a few, not a table to commit (its comment line says so).
    #[arg(long, value_delimiter = ',')]
    configs: Vec<String>,
}

/// The batch buckets: every power of two from one token to a prefill chunk.
pub const TOKENS: [usize; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// The shapes it knows: (name on the command line, shape).
pub const SHAPES: [(&str, Shape); 4] = [
    (
        "qwen3",
        Shape {
            name: "qwen3_30b_a3b",
            hidden: 2048,
            intermediate: 768,
            experts: 128,
            k: 8,
        },
    ),
    (
        "glm",
        Shape {
            name: "glm_h4096_i1024_e288_k8",
            hidden: 4096,
            intermediate: 1024,
            experts: 288,
            k: 8,
        },
    ),
    (
        "deepseek_v3",
        Shape {
            name: "deepseek_v3",
            hidden: 7168,
            intermediate: 2048,
            experts: 256,
            k: 8,
        },
    ),
    (
        "mixtral",
        Shape {
            name: "mixtral_8x7b",
            hidden: 4096,
            intermediate: 14336,
            experts: 8,
            k: 2,
        },
    ),
];

/// The emulator's smoke test: one small layer, three batches on both sides of the crossover.
const TINY: Shape = Shape {
    name: "tiny",
    hidden: 64,
    intermediate: 40,
    experts: 16,
    k: 4,
};
const TINY_TOKENS: [usize; 3] = [1, 4, 16];

/// The decode geometries tried: the default, more warps per block, more columns per warp.
pub const DECODE_GEOMETRIES: [DecodeGeometry; 4] = [
    DecodeGeometry::DEFAULT,
    DecodeGeometry {
        warps: 8,
        cols_per_warp: 1,
        stream: false,
    },
    DecodeGeometry {
        warps: 2,
        cols_per_warp: 1,
        stream: false,
    },
    DecodeGeometry {
        warps: 4,
        cols_per_warp: 2,
        stream: false,
    },
];

/// The geometries tried again with the weights streamed (`_na`), on the decode path: the
/// default and `w4_c2`.
pub const DECODE_STREAMED_GEOMETRIES: [DecodeGeometry; 2] =
    [DECODE_GEOMETRIES[0], DECODE_GEOMETRIES[3]];

/// The decode candidates run while T·k is at most this many times E: four times the rule's
/// crossover ([`ch04_fused_moe::choose::DECODE_MAX_PAIRS_PER_EXPERT`]), so the table can move
/// it either way.
pub const DECODE_MAX_PAIRS_PER_EXPERT: usize = 16;

/// Seeds of the weights, the hidden states and the routing.
const WEIGHT_SEED: u64 = 404;
const HIDDEN_SEED: u64 = 405;
const IDS_SEED: u64 = 406;

/// The tuning plan: fewer samples than a published figure (many candidates), enough for a
/// stable median.
fn plan(quick: bool) -> Plan {
    if quick {
        Plan::quick()
    } else {
        Plan {
            cold_samples: 60,
            warm_samples: 20,
            warm_copies: 10,
        }
    }
}

/// Every candidate for `tokens` tokens at `shape`; `hopper`: the device runs sm_90a code, so
/// versions 4 to 11's configurations too (each at the BLOCK_M it is built for).
pub fn candidates(shape: &Shape, tokens: usize, hopper: bool) -> Vec<Choice> {
    let mut v: Vec<Choice> = TILE_CONFIGS
        .iter()
        .flat_map(|&tile| {
            // Chapter 3's BLOCK_M, and the next larger tile: an expert's weights read for twice
            // as many of its pairs at once.
            let rule = choose_block_m(tokens * shape.k, shape.experts);
            std::iter::once(None)
                .chain((rule < 128).then_some(Some(2 * rule)))
                .map(move |block_m| Choice {
                    path: Path::Tiled,
                    tile,
                    decode: DecodeGeometry::DEFAULT,
                    fusion: Fusion::SwiGlu,
                    block_m,
                })
        })
        .collect();
    if hopper {
        v.extend(HOPPER_CONFIGS.iter().map(|&tile| Choice {
            path: Path::Tiled,
            tile,
            decode: DecodeGeometry::DEFAULT,
            fusion: Fusion::SwiGlu,
            block_m: None,
        }));
    }
    if tokens * shape.k <= DECODE_MAX_PAIRS_PER_EXPERT * shape.experts {
        // Both decode paths with the sum over k fused into GEMM 2 and in its own kernel.
        // The decode path also with its weights streamed (`_na`); the grouped path reads a
        // tile's rows again from L1 and has no such geometry.
        let streamed = DECODE_STREAMED_GEOMETRIES.map(|g| DecodeGeometry { stream: true, ..g });
        for path in [Path::Decode, Path::DecodeGrouped] {
            let geometries: Vec<DecodeGeometry> = match path {
                Path::Decode => DECODE_GEOMETRIES.iter().chain(&streamed).copied().collect(),
                _ => DECODE_GEOMETRIES.to_vec(),
            };
            for fusion in [Fusion::SwiGluSumK, Fusion::SwiGlu] {
                v.extend(geometries.iter().map(|&decode| Choice {
                    path,
                    tile: TileConfig::DEFAULT,
                    decode,
                    fusion,
                    block_m: None,
                }));
            }
        }
    }
    v
}

/// The candidates named in `names` (all of them when it is empty), and the rule's choice, which
/// the table's row compares with. A decode geometry's name, such as `w4_c1`, names it on both
/// decode paths. A name that is no candidate of this bucket (a decode geometry at a batch too
/// large for the decode path) is said on stderr; [`check_names`] has already refused names that
/// are no candidate anywhere.
fn chosen(all: Vec<Choice>, names: &[String], rule: Choice, at: &str) -> Vec<Choice> {
    if names.is_empty() {
        return all;
    }
    for n in names {
        if !all.iter().any(|c| &c.config_name() == n) {
            eprintln!("bench ch04-tune: {at}: --configs {n} is not a candidate at this batch");
        }
    }
    all.into_iter()
        .filter(|c| *c == rule || names.contains(&c.config_name()))
        .collect()
}

/// `--configs` before any work: every name must be a candidate at one of the batches to run
/// (`buckets`: shape and tokens), else an error that lists the candidates' names.
fn check_names(names: &[String], buckets: &[(Shape, usize)], hopper: bool) -> Result<(), String> {
    let mut known: Vec<String> = Vec::new();
    for (shape, tokens) in buckets {
        for c in candidates(shape, *tokens, hopper) {
            let name = c.config_name();
            if !known.contains(&name) {
                known.push(name);
            }
        }
    }
    match names.iter().find(|n| !known.contains(n)) {
        Some(n) => Err(format!(
            "--configs: {n:?} is not a candidate of any batch to run; the candidates: {}",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

/// The layer running `choice`, sharing `base`'s weights.
fn variant(base: &FusedDevice, c: Choice) -> Result<FusedDevice, String> {
    let l = base
        .clone()
        .without_tuned_table()
        .with_path(c.path)
        .with_fusion(c.fusion);
    match (c.path, c.block_m) {
        (Path::Tiled, Some(m)) => l.with_tile(c.tile).and_then(|l| l.with_block_m(m)),
        (Path::Tiled, None) => l.with_tile(c.tile),
        (Path::Decode | Path::DecodeGrouped, _) => l.with_decode_geometry(c.decode),
    }
    .map_err(|e| e.to_string())
}

/// One batch on the device: its inputs and output.
struct Batch {
    tokens: usize,
    hidden: DeviceBuffer<f32>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
}

fn batch(dev: &'static Device, shape: &Shape, tokens: usize) -> Result<Batch, String> {
    let e = |e: moe_kernels::KernelError| e.to_string();
    let ids: Vec<i32> = routed_ids(tokens, shape.experts, shape.k, IDS_SEED, |_| 0.0)
        .into_iter()
        .map(|i| i as i32)
        .collect();
    let hidden = ch01_router::inputs::patterned(tokens * shape.hidden, HIDDEN_SEED, 1.0);
    Ok(Batch {
        tokens,
        hidden: dev.upload(&hidden).map_err(e)?,
        ids: dev.upload(&ids).map_err(e)?,
        weights: dev
            .upload(&vec![1.0 / shape.k as f32; tokens * shape.k])
            .map_err(e)?,
        out: dev.alloc(tokens * shape.hidden).map_err(e)?,
    })
}

/// Runs `layer` once on `b` and returns its output.
fn run_once(layer: &FusedDevice, b: &Batch) -> Result<Vec<f32>, String> {
    let ws = layer.workspace(b.tokens).map_err(|e| e.to_string())?;
    layer
        .enqueue_experts(&ws, &b.hidden, &b.ids, &b.weights, &b.out)
        .map_err(|e| e.to_string())?;
    b.out.to_vec().map_err(|e| e.to_string())
}

/// The candidates' outputs must agree: bit for bit within a path (the decode and grouped decode
/// paths together: the same arithmetic), within [`ch04_fused_moe::ACROSS_SUM_ORDERS`] across.
///
/// Versions 4 to 11 (sm_90a) are held to the same bits, but such a candidate that misses them is
/// reported on stderr and left out of the timings (returned), instead of ending the run: its
/// GPU test in chapter 4 fails too, and the rest of the table still gets measured.
fn check(at: &str, outs: &[(Choice, Vec<f32>)]) -> Result<Vec<Choice>, String> {
    let mut wrong = Vec::new();
    for tiled in [true, false] {
        let mut same = outs
            .iter()
            .filter(|(c, _)| (c.path == Path::Tiled) == tiled);
        if let Some((first, want)) = same.next() {
            for (c, got) in same {
                // Versions 4 to 11: the count of other bits, always reported.
                if c.tile.is_hopper() {
                    let differ = (0..want.len())
                        .filter(|&i| want[i].to_bits() != got[i].to_bits())
                        .count();
                    eprintln!(
                        "bench ch04-tune: {at}: {} gives {differ} of {} outputs with other bits than {}",
                        c.config_name(),
                        want.len(),
                        first.config_name()
                    );
                    if differ > 0 {
                        eprintln!(
                            "bench ch04-tune: {at}: {} is WRONG (not the portable path's bits): left out of the timings",
                            c.config_name()
                        );
                        wrong.push(*c);
                    }
                    continue;
                }
                if let Some(i) = (0..want.len()).find(|&i| want[i].to_bits() != got[i].to_bits()) {
                    return Err(format!(
                        "{at}: {} {} and {} {} differ at {i}: {} vs {}",
                        first.path,
                        first.config_name(),
                        c.path,
                        c.config_name(),
                        want[i],
                        got[i]
                    ));
                }
            }
        }
    }
    let tiled = outs.iter().find(|(c, _)| c.path == Path::Tiled);
    let decode = outs.iter().find(|(c, _)| c.path == Path::Decode);
    if let (Some((_, t)), Some((_, d))) = (tiled, decode) {
        check_output(
            &format!("{at}: tiled vs decode"),
            t,
            d,
            ch04_fused_moe::ACROSS_SUM_ORDERS,
        )?;
    }
    Ok(wrong)
}

/// One candidate's timing.
struct Timed {
    choice: Choice,
    cold_us: f64,
    warm_us: f64,
    cold_p10_us: f64,
    cold_p90_us: f64,
}

/// The bucket's row: the fastest cold median, and the rule's candidate beside it.
fn row(shape: &Shape, tokens: usize, rule: Choice, timed: &[Timed]) -> Result<TunedRow, String> {
    let best = timed
        .iter()
        .min_by(|a, b| a.cold_us.total_cmp(&b.cold_us))
        .ok_or("no candidate was timed")?;
    let ruled = timed.iter().find(|t| t.choice == rule).ok_or_else(|| {
        format!(
            "{} T {tokens}: the rule's choice ({} {}) is not among the candidates",
            shape.name,
            rule.path,
            rule.config_name()
        )
    })?;
    Ok(TunedRow {
        hidden: shape.hidden,
        intermediate: shape.intermediate,
        experts: shape.experts,
        k: shape.k,
        tokens,
        choice: best.choice,
        cold_us: best.cold_us,
        warm_us: best.warm_us,
        rule,
        rule_cold_us: ruled.cold_us,
    })
}

/// The rule's choice for `tokens` (no table, no override).
fn rule_choice(base: &FusedDevice, tokens: usize) -> Result<Choice, String> {
    let p = base
        .clone()
        .without_tuned_table()
        .plan_for(tokens)
        .map_err(|e| e.to_string())?;
    Ok(Choice {
        path: p.path,
        tile: if p.path == Path::Tiled {
            p.tile
        } else {
            TileConfig::DEFAULT
        },
        decode: if p.path.is_decode() {
            p.decode
        } else {
            DecodeGeometry::DEFAULT
        },
        fusion: p.fusion,
        block_m: None,
    })
}

const ALL_HEADER: &str =
    "shape,hidden,intermediate,experts,k,tokens,path,config,cold_us,cold_p10_us,cold_p90_us,warm_us";

pub fn run(args: &TuneArgs) -> Result<(), String> {
    let quick = args.quick || std::env::var_os("MOE_BENCH_QUICK").is_some_and(|v| !v.is_empty());
    let dev = match Device::cuda() {
        Ok(d) => d,
        Err(e) if quick => return smoke(&args.configs, &e.to_string()),
        Err(e) => {
            return Err(format!(
                "ch04-tune times kernels on the GPU and there is none here ({e}); `--quick` runs a smoke test on the emulator"
            ))
        }
    };
    let mut shapes = Vec::new();
    for name in &args.shapes {
        let s = SHAPES
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| {
                format!(
                    "unknown shape {name:?}: one of {}",
                    SHAPES.map(|s| s.0).join(", ")
                )
            })?
            .1;
        shapes.push(s);
    }
    let buckets: Vec<(Shape, usize)> = shapes
        .iter()
        .flat_map(|s| args.tokens.iter().map(move |&t| (*s, t)))
        .collect();
    check_names(&args.configs, &buckets, dev.has_sm90a())?;
    let h = Harness::new(dev, plan(quick)).map_err(|e| e.to_string())?;
    eprintln!(
        "bench ch04-tune on {}: {} shapes × {} batch buckets",
        dev.describe(),
        shapes.len(),
        args.tokens.len()
    );
    let mut table = TunedTable::default();
    let mut all = format!("{ALL_HEADER}\n");
    for shape in &shapes {
        let t0 = Instant::now();
        let base = FusedDevice::patterned_on_device(dev, &shape.config(), WEIGHT_SEED)
            .map_err(|e| e.to_string())?;
        dev.synchronize().map_err(|e| e.to_string())?;
        eprintln!(
            "bench ch04-tune: {}: weights filled on the device in {:.2} s",
            shape.name,
            t0.elapsed().as_secs_f64()
        );
        let b = bar(args.tokens.len(), shape.name);
        for &tokens in &args.tokens {
            b.set_message(format!("{tokens} tokens"));
            let input = batch(dev, shape, tokens)?;
            let mut outs = Vec::new();
            let mut layers = Vec::new();
            let rule = rule_choice(&base, tokens)?;
            let at = format!("{} T {tokens}", shape.name);
            for c in chosen(
                candidates(shape, tokens, dev.has_sm90a()),
                &args.configs,
                rule,
                &at,
            ) {
                let l = variant(&base, c)?;
                outs.push((c, run_once(&l, &input)?));
                layers.push((c, l));
            }
            let wrong = check(&at, &outs)?;
            let mut timed = Vec::new();
            for (c, l) in layers.iter().filter(|(c, _)| !wrong.contains(c)) {
                let ws = l.workspace(tokens).map_err(|e| e.to_string())?;
                let m = h
                    .measure(|| {
                        l.enqueue_experts(
                            &ws,
                            &input.hidden,
                            &input.ids,
                            &input.weights,
                            &input.out,
                        )
                        .map_err(|e| BenchError(e.to_string()))
                    })
                    .map_err(|e| format!("{at}: {}", e.0))?;
                all += &format!(
                    "{},{},{},{},{},{tokens},{},{},{:.3},{:.3},{:.3},{:.3}\n",
                    shape.name,
                    shape.hidden,
                    shape.intermediate,
                    shape.experts,
                    shape.k,
                    c.path,
                    c.config_name(),
                    m.cold.median_us,
                    m.cold.p10_us,
                    m.cold.p90_us,
                    m.warm.median_us
                );
                timed.push(Timed {
                    choice: *c,
                    cold_us: m.cold.median_us,
                    warm_us: m.warm.median_us,
                    cold_p10_us: m.cold.p10_us,
                    cold_p90_us: m.cold.p90_us,
                });
            }
            let r = row(shape, tokens, rule, &timed)?;
            let spread = timed
                .iter()
                .find(|t| t.choice == r.choice)
                .map(|t| (t.cold_p10_us, t.cold_p90_us))
                .unwrap_or_default();
            b.println(format!(
                "{:<24} T {tokens:>5}: {} {} cold {:.1} µs ({:.1}–{:.1}); the rule's {} {} {:.1} µs",
                shape.name,
                r.choice.path,
                r.choice.config_name(),
                r.cold_us,
                spread.0,
                spread.1,
                r.rule.path,
                r.rule.config_name(),
                r.rule_cold_us
            ));
            table.rows.push(r);
            b.inc(1);
        }
        b.finish_and_clear();
    }
    let text = tuned_text(&table, &dev.name(), quick, !args.configs.is_empty())?;
    let out = &args.out_dir;
    crate::common::write(&out.join("ch04_tuned.csv"), &text)?;
    crate::common::write(&out.join("ch04_tune_all.csv"), &all)?;
    println!(
        "wrote ch04_tuned.csv ({} buckets) and ch04_tune_all.csv in {}; commit the table and rebuild to use it",
        table.rows.len(),
        out.display()
    );
    Ok(())
}

/// The table's file: one comment line saying where it comes from, then the CSV; checked to
/// parse back to the same table.
fn tuned_text(table: &TunedTable, device: &str, quick: bool, some: bool) -> Result<String, String> {
    let text = format!(
        "# bench ch04-tune on {}{}{}: the fastest cold median per shape and batch bucket (tools/bench/src/ch04_tune.rs)\n{}",
        device.replace(',', " "),
        if quick { " (--quick: few samples)" } else { "" },
        if some {
            " (--configs: some candidates only)"
        } else {
            ""
        },
        table.to_csv()
    );
    let back = TunedTable::parse(&text)?;
    if back.rows.len() != table.rows.len() {
        return Err("the table does not parse back".into());
    }
    Ok(text)
}

/// Without a GPU: every candidate once on the emulator at a tiny shape, checked as on the GPU;
/// "timed" by the wall clock of that one run (a number about the emulator, not the GPU), so the
/// whole path to the table runs. Writes nothing; prints the table.
fn smoke(configs: &[String], no_gpu: &str) -> Result<(), String> {
    let dev = Device::emu();
    let shape = TINY;
    let buckets: Vec<(Shape, usize)> = TINY_TOKENS.iter().map(|&t| (shape, t)).collect();
    check_names(configs, &buckets, dev.has_sm90a())?;
    eprintln!(
        "bench ch04-tune: no GPU ({no_gpu}): the smoke test on the emulator, writing nothing"
    );
    let base = FusedDevice::patterned_on_device(dev, &shape.config(), WEIGHT_SEED)
        .map_err(|e| e.to_string())?;
    let mut table = TunedTable::default();
    for tokens in TINY_TOKENS {
        let input = batch(dev, &shape, tokens)?;
        let mut outs = Vec::new();
        let mut timed = Vec::new();
        let rule = rule_choice(&base, tokens)?;
        let at = format!("{} T {tokens}", shape.name);
        for c in chosen(
            candidates(&shape, tokens, dev.has_sm90a()),
            configs,
            rule,
            &at,
        ) {
            let l = variant(&base, c)?;
            let t = Instant::now();
            outs.push((c, run_once(&l, &input)?));
            let us = t.elapsed().as_secs_f64() * 1e6;
            timed.push(Timed {
                choice: c,
                cold_us: us,
                warm_us: us,
                cold_p10_us: us,
                cold_p90_us: us,
            });
        }
        check(&at, &outs)?;
        table.rows.push(row(&shape, tokens, rule, &timed)?);
    }
    print!("{}", tuned_text(&table, &dev.name(), true, false)?);
    println!(
        "bench ch04-tune --quick on the emulator: {} buckets checked (every candidate agrees), nothing written",
        table.rows.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--configs`: no names keep every candidate; names keep those (on every path that has
    /// them) and the rule's choice; a name that is no candidate of any batch to run is refused
    /// before any work, naming it and each candidate once; one that is a candidate elsewhere
    /// is left out of this batch.
    #[test]
    fn configs_pick_the_named_candidates_and_the_rules() {
        let all = candidates(&TINY, 16, false);
        let rule = all[0];
        assert_eq!(chosen(all.clone(), &[], rule, "here"), all);
        let some = chosen(
            all.clone(),
            &["w4_c1".into(), "w4_k64_n1_s3".into()],
            rule,
            "here",
        );
        let names: Vec<String> = some.iter().map(|c| c.config_name()).collect();
        assert_eq!(names[0], rule.config_name());
        assert_eq!(
            names.iter().filter(|n| *n == "w4_c1").count(),
            2,
            "{names:?}"
        );
        assert_eq!(
            names.iter().filter(|n| *n == "w4_k64_n1_s3").count(),
            1,
            "{names:?}"
        );
        assert_eq!(some.len(), 4, "{names:?}");
        let tiny = [(TINY, 1), (TINY, 16)];
        assert_eq!(check_names(&["w4_c1".into()], &tiny, false), Ok(()));
        let e = check_names(&["w4_c1".into(), "nonsense".into()], &tiny, false).unwrap_err();
        assert!(
            e.starts_with("--configs: \"nonsense\" is not a candidate of any batch to run"),
            "{e}"
        );
        assert_eq!(e.matches("w4_c1,").count(), 1, "each name once: {e}");
        // A decode geometry at a batch past the decode path: no candidate there, left out.
        let big = candidates(&TINY, 4096, false);
        assert!(!big.iter().any(|c| c.config_name() == "w4_c1"));
        let only_rule = chosen(big.clone(), &["w4_c1".into()], big[0], "T 4096");
        assert_eq!(only_rule, vec![big[0]]);
    }

    /// The routing this tool timed version 9 on (4096 tokens, tiles of 128 rows): how many of
    /// its tiles have their cluster neighbour in the same expert, the count `bench ch04` writes
    /// for its own routing as `paired_tiles`. The numbers were computed apart from this code, by
    /// a separate program and by Python on the same generator, and the book quotes them.
    #[test]
    fn the_tuning_routing_pairs_tiles_as_the_book_says() {
        for (name, tiles, paired) in [("qwen3", 312, 174), ("glm", 311, 22)] {
            let shape = SHAPES.iter().find(|(n, _)| *n == name).unwrap().1;
            let ids = routed_ids(4096, shape.experts, shape.k, IDS_SEED, |_| 0.0);
            let r = ch01_router::Routing {
                rows: 4096,
                k: shape.k,
                weights: vec![0.0; ids.len()],
                ids: ids.iter().map(|&i| i as u32).collect(),
            };
            let owners = crate::ch04::tile_owners(&r, shape.experts, 128);
            let got = (owners.len(), crate::ch04::paired_tiles(&owners));
            assert_eq!(got, (tiles, paired), "{name}");
        }
    }

    #[test]
    fn tiled_candidates_try_the_next_larger_block_m() {
        let tiled = |tokens| -> Vec<Option<usize>> {
            candidates(&TINY, tokens, false)
                .iter()
                .filter(|c| c.path == Path::Tiled)
                .map(|c| c.block_m)
                .collect()
        };
        let rule = choose_block_m(TINY.k, TINY.experts);
        assert!(rule < 128);
        let one = tiled(1);
        assert_eq!(one.len(), 2 * TILE_CONFIGS.len());
        assert_eq!(
            one.iter().filter(|m| **m == Some(2 * rule)).count(),
            TILE_CONFIGS.len()
        );
        // Where the rule already takes 128, only the rule.
        let big = 128 * TINY.experts / TINY.k;
        assert_eq!(choose_block_m(big * TINY.k, TINY.experts), 128);
        assert!(tiled(big).iter().all(|m| m.is_none()));
        assert_eq!(tiled(big).len(), TILE_CONFIGS.len());
    }

    #[test]
    fn grouped_decode_candidates_run_where_the_decode_ones_do() {
        let n = |tokens, p: Path| {
            candidates(&TINY, tokens, false)
                .iter()
                .filter(|c| c.path == p)
                .count()
        };
        assert_eq!(n(1, Path::DecodeGrouped), 2 * DECODE_GEOMETRIES.len());
        // The decode path also streams its weights (`_na`) in some geometries; never the grouped.
        let streamed = DECODE_STREAMED_GEOMETRIES.len();
        assert_eq!(n(1, Path::Decode), 2 * (DECODE_GEOMETRIES.len() + streamed));
        assert!(candidates(&TINY, 1, false)
            .iter()
            .all(|c| !c.decode.stream || c.path == Path::Decode));
        let past = DECODE_MAX_PAIRS_PER_EXPERT * TINY.experts / TINY.k + 1;
        assert_eq!(n(past, Path::DecodeGrouped), 0);
        assert_eq!(n(past, Path::Decode), 0);
    }

    #[test]
    fn the_check_wants_the_decode_bits_from_the_grouped_path() {
        let c = |path| Choice {
            path,
            tile: TileConfig::DEFAULT,
            decode: DecodeGeometry::DEFAULT,
            fusion: ch04_fused_moe::choose::default_fusion(path),
            block_m: None,
        };
        let (a, b) = (
            vec![1.0f32, 2.0],
            vec![1.0f32, f32::from_bits(2.0f32.to_bits() + 1)],
        );
        let same = [
            (c(Path::Decode), a.clone()),
            (c(Path::DecodeGrouped), a.clone()),
        ];
        check("t", &same).unwrap();
        let off = [(c(Path::Decode), a), (c(Path::DecodeGrouped), b)];
        let e = check("t", &off).unwrap_err();
        assert!(e.contains("decode_grouped"), "{e}");
    }
}
