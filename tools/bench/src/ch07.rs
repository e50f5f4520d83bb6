//! Chapter 7: a full-size decode step on the device, and what bf16 changes on the fixtures.
//!
//! **The step** (GPU): a random-weight model with Qwen3-30B-A3B's shapes (48 MoE layers, about
//! 61 GB of bf16 weights made on the device by chapter 4's hash fill), chapter 7's
//! [`DeviceModel`]: one decode step at batch 1, 8 and 64 after a context of [`CONTEXT`] positions
//! (written by real steps first), timed as one CUDA graph, cold (L2 flushed) and warm, by the
//! harness of every chapter. Then each part of the step alone ([`Part`]: the same launches on
//! the same buffers, the others left out), chapter 5's router alone inside the MoE layers, and
//! one MoE layer alone. `other` is the step minus the sum of its parts: what running them
//! back to back adds or saves. Each row has the bytes its part must read (weights touched, the
//! KV cache) and their time at the measured copy bandwidth.
//!
//! **bf16** (any backend): each fixture of `tools/fixtures/ch07-hf/` through three paths (the
//! CPU decoder with f32 MoE layers, with chapter 6's bf16 layer, and the device decoder, bf16
//! throughout): how many of transformers' 32 greedy tokens each follows before the first
//! difference, per prompt, and the logits' distance from transformers' along the first prompt
//! (fed transformers' tokens).
//!
//! ```text
//! tools/bench/run ch07 [--out-dir D] [--quick] [--fixtures DIR]
//! ```
//!
//! Without a GPU, `--quick` runs the step on the emulator at a tiny shape, untimed, and writes
//! the bf16 CSV.

use crate::cases::BenchError;
use crate::common::write;
use ch01_router::chain::{DeviceMatrix, DeviceRouter, GateInputs, GateShape, RouterOutputs};
use ch02_grouped::Dtype;
use ch05_fused_router::FusedRouter;
use ch07_model::cpu::argmax;
use ch07_model::device::{qwen3_30b_a3b, DeviceModel, Part, PARTS};
use ch07_model::fixtures::{Greedy, FIXTURES};
use ch07_model::{load, parse_model_config, Model, ModelConfig, ModelError};
use moe_kernels::measure::{Harness, Measurement, Plan};
use moe_kernels::{BackendKind, Device};
use std::collections::BTreeSet;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Ch07Args {
    /// Where the CSVs go.
    #[arg(long, default_value = "bench/results/h200")]
    pub out_dir: PathBuf,
    /// Fewer samples; without a GPU, the step untimed on the emulator at a tiny shape.
    #[arg(long)]
    pub quick: bool,
    /// The fixtures' folder.
    #[arg(long, default_value = "tools/fixtures/ch07-hf")]
    pub fixtures: PathBuf,
}

/// Positions already in the cache when the timed step runs.
pub const CONTEXT: usize = 256;
/// The batch sizes.
pub const BATCHES: [usize; 3] = [1, 8, 64];
const SEED: u64 = 7;

/// The CSV of the step's breakdown.
pub const DECODE_HEADER: &str =
    "batch,part,launches,cold_us,warm_us,cold_p10_us,cold_p90_us,bytes,floor_us,device";

fn e(e: ModelError) -> BenchError {
    BenchError(e.to_string())
}

/// A tiny model of the Qwen3-MoE family for the emulator's smoke test.
fn tiny() -> ModelConfig {
    let json = serde_json::json!({
        "model_type": "qwen3_moe", "vocab_size": 256, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 64, "moe_intermediate_size": 32,
        "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": true,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0
    });
    parse_model_config(&json).expect("a valid config")
}

/// The bytes each part must read at batch `b` after `ctx` positions, given the distinct experts
/// each MoE layer's routing touched: its weights once, and the KV cache.
fn part_bytes(c: &ModelConfig, part: Part, b: usize, ctx: usize, touched: &[usize]) -> f64 {
    let (h, d) = (c.hidden, c.head_dim);
    let m = &c.moe.config;
    let l = c.layers as f64;
    let w = |n: usize| 2.0 * n as f64;
    match part {
        Part::Embed => w(b * h),
        Part::Norms => l * 2.0 * (b * h * 4) as f64,
        Part::QkvProj => l * w((c.heads + 2 * c.kv_heads) * d * h),
        Part::OProj => l * w(h * c.heads * d),
        Part::Attention => l * (b * (ctx + 1) * 2 * c.kv_heads * d * 4) as f64,
        Part::Moe => touched
            .iter()
            .map(|&t| w(t * 3 * m.intermediate * h) + w(m.experts * h))
            .sum(),
        Part::DenseMlp => 0.0,
        Part::LmHead => w(c.vocab * h),
    }
}

struct Row {
    batch: usize,
    part: String,
    m: Measurement,
    bytes: f64,
    floor_us: f64,
}

fn timed(h: &Harness, f: impl FnMut() -> Result<(), BenchError>) -> Result<Measurement, String> {
    h.measure(f).map_err(|e| e.0)
}

fn decode(dev: &'static Device, quick: bool, out: &std::path::Path) -> Result<(), String> {
    let gpu = dev.kind() == BackendKind::Cuda;
    let (config, batches, ctx): (ModelConfig, &[usize], usize) = if gpu {
        (qwen3_30b_a3b(), &BATCHES, CONTEXT)
    } else {
        (tiny(), &[1, 3], 8)
    };
    let t0 = std::time::Instant::now();
    let model = DeviceModel::patterned(dev, &config, SEED, ctx + 1).map_err(|e| e.to_string())?;
    dev.synchronize().map_err(|e| e.to_string())?;
    eprintln!(
        "bench ch07: {} layers, {:.1} GB of bf16 weights made on the device in {:.2} s",
        config.layers,
        ch07_model::device::weight_bytes(&config) as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    let plan = if quick {
        Plan::quick()
    } else {
        Plan {
            cold_samples: 40,
            warm_samples: 10,
            warm_copies: 5,
        }
    };
    let h = if gpu {
        Some(Harness::new(dev, plan).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let copy_gbs = match &h {
        Some(h) => h.copy_bandwidth(1 << 30).map_err(|e| e.to_string())?,
        None => 1.0,
    };
    let device = dev.name().replace(' ', "_");
    let mut rows: Vec<Row> = Vec::new();
    let moe_layers = model.moe_layers();
    let mc = &config.moe.config;
    for &b in batches {
        let mut st = model.state(b).map_err(|e| e.to_string())?;
        let first: Vec<u32> = (0..b as u32)
            .map(|i| (i * 7919 + 11) % config.vocab as u32)
            .collect();
        st.set_tokens(&first, config.vocab)
            .map_err(|e| e.to_string())?;
        // The context, written by real steps (each fed its own greedy tokens).
        for pos in 0..ctx {
            model.step(&st, pos).map_err(|e| e.to_string())?;
        }
        model.step(&st, ctx).map_err(|e| e.to_string())?;
        dev.synchronize().map_err(|e| e.to_string())?;
        // The experts the step's routing touched, per MoE layer.
        let mut touched = Vec::new();
        for ws in st.moe_workspaces().iter().flatten() {
            let r = ws.routing(mc.router.k).map_err(|e| e.to_string())?;
            touched.push(r.ids.iter().collect::<BTreeSet<_>>().len());
        }
        let logits = st.logits().map_err(|e| e.to_string())?;
        if logits.iter().any(|v| !v.is_finite()) {
            return Err(format!("batch {b}: the step's logits are not all finite"));
        }
        // Chapter 5's router alone, as each MoE layer runs it at this batch.
        let router_of = |l: &ch06_layer::AssembledLayer| {
            FusedRouter::with_logits(
                dev,
                &mc.router,
                GateShape {
                    rows: b,
                    hidden: config.hidden,
                    experts: mc.experts,
                },
                None,
                l.logits_for(b),
            )
        };
        let first_moe = moe_layers.iter().flatten().next().ok_or("no MoE layer")?;
        let router = router_of(first_moe).map_err(|e| e.to_string())?;
        let route = || -> Result<(), BenchError> {
            for (l, ws) in moe_layers.iter().zip(st.moe_workspaces()) {
                if let (Some(l), Some(ws)) = (l, ws) {
                    let (ids, weights) = ws.routing_buffers();
                    let (gate, bias) = l.gate();
                    router
                        .enqueue(
                            &GateInputs {
                                hidden: DeviceMatrix::Bf16(st.moe_input()),
                                weight: DeviceMatrix::Bf16(gate),
                                bias,
                            },
                            &RouterOutputs { ids, weights },
                        )
                        .map_err(|x| BenchError(x.to_string()))?;
                }
            }
            Ok(())
        };
        let one_layer = || -> Result<(), BenchError> {
            let ws = st
                .moe_workspaces()
                .iter()
                .flatten()
                .next()
                .expect("a MoE layer");
            first_moe
                .enqueue(ws, st.moe_input(), st.moe_output())
                .map_err(|x| BenchError(x.to_string()))
        };
        let Some(h) = &h else {
            // The emulator: every part and the router once, untimed.
            for p in PARTS {
                model
                    .enqueue_parts(&st, ctx, &[p])
                    .map_err(|e| e.to_string())?;
            }
            route().map_err(|e| e.0)?;
            one_layer().map_err(|e| e.0)?;
            eprintln!("bench ch07 --quick on the emulator: batch {b}: the step, its parts, the router and one layer ran once; nothing timed");
            continue;
        };
        let all: f64 = PARTS
            .iter()
            .map(|&p| part_bytes(&config, p, b, ctx, &touched))
            .sum();
        let floor = |bytes: f64| bytes / (copy_gbs * 1e3);
        let step = timed(h, || model.step(&st, ctx).map_err(e))?;
        rows.push(Row {
            batch: b,
            part: "step".into(),
            m: step,
            bytes: all,
            floor_us: floor(all),
        });
        for p in PARTS {
            if p == Part::DenseMlp && moe_layers.iter().all(Option::is_some) {
                continue; // no dense layer in this model
            }
            let m = timed(h, || model.enqueue_parts(&st, ctx, &[p]).map_err(e))?;
            let bytes = part_bytes(&config, p, b, ctx, &touched);
            rows.push(Row {
                batch: b,
                part: p.name().into(),
                m,
                bytes,
                floor_us: floor(bytes),
            });
        }
        let router_bytes = (touched.len() * 2 * mc.experts * config.hidden) as f64;
        let m = timed(h, route)?;
        rows.push(Row {
            batch: b,
            part: "router".into(),
            m,
            bytes: router_bytes,
            floor_us: floor(router_bytes),
        });
        let layer_bytes = 2.0 * (touched[0] * 3 * mc.intermediate * config.hidden) as f64
            + 2.0 * (mc.experts * config.hidden) as f64;
        let m = timed(h, one_layer)?;
        rows.push(Row {
            batch: b,
            part: "moe_layer".into(),
            m,
            bytes: layer_bytes,
            floor_us: floor(layer_bytes),
        });
        eprintln!("bench ch07: batch {b} measured (experts touched per layer: {touched:?})");
    }
    if h.is_none() {
        return Ok(());
    }
    let mut csv = format!("{DECODE_HEADER}\n");
    for r in &rows {
        csv += &format!(
            "{},{},{},{:.2},{:.2},{:.2},{:.2},{:.0},{:.2},{}\n",
            r.batch,
            r.part,
            r.m.launches,
            r.m.cold.median_us,
            r.m.warm.median_us,
            r.m.cold.p10_us,
            r.m.cold.p90_us,
            r.bytes,
            r.floor_us,
            device
        );
    }
    write(&out.join("ch07_decode.csv"), &csv)?;
    println!("copy bandwidth {copy_gbs:.0} GB/s, context {ctx}");
    println!(
        "{:>5} {:<10} {:>8} {:>10} {:>10} {:>10}",
        "batch", "part", "launches", "cold µs", "warm µs", "floor µs"
    );
    for r in &rows {
        println!(
            "{:>5} {:<10} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            r.batch, r.part, r.m.launches, r.m.cold.median_us, r.m.warm.median_us, r.floor_us
        );
    }
    Ok(())
}

/// The CSV of what bf16 changes.
pub const BF16_HEADER: &str = "fixture,path,prompt,tokens,same_as_transformers,median_step_err,worst_step_err,min_logit_gap,backend";

fn worst(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// How many leading tokens two runs share.
fn same_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The three paths on every fixture: tokens that follow transformers', and the logits' distance.
fn bf16_rows(dev: &'static Device, dir: &std::path::Path) -> Result<String, String> {
    let s = |e: ModelError| e.to_string();
    let backend = match dev.kind() {
        BackendKind::Cuda => dev.name().replace(' ', "_"),
        BackendKind::Emu => "emulator".to_string(),
    };
    let mut csv = format!("{BF16_HEADER}\n");
    for name in FIXTURES {
        let fx = Greedy::read(&dir.join(name)).map_err(s)?;
        let w = load(&fx.model, false).map_err(s)?;
        let v = w.config.vocab;
        let n = fx.tokens[0].len();
        for path in ["cpu_f32_moe", "cpu_bf16_moe", "device_bf16"] {
            let (tokens, forced): (Vec<Vec<u32>>, Vec<Vec<f32>>) = if path == "device_bf16" {
                let m = DeviceModel::new(dev, &w, 64).map_err(s)?;
                let t = fx
                    .prompts
                    .iter()
                    .map(|p| m.generate(p, n).map(|r| r.0))
                    .collect::<Result<_, _>>()
                    .map_err(s)?;
                let (_, f) = m
                    .teacher_forced(&fx.prompts[0], &fx.tokens[0], n)
                    .map_err(s)?;
                (t, f)
            } else {
                let dtype = if path == "cpu_f32_moe" {
                    Dtype::F32
                } else {
                    Dtype::Bf16
                };
                let m = Model::new(dev, w.clone(), dtype).map_err(s)?;
                let t = fx
                    .prompts
                    .iter()
                    .map(|p| m.generate(p, n, |_| Ok::<(), ModelError>(())))
                    .collect::<Result<_, _>>()
                    .map_err(s)?;
                let mut cache = m.cache();
                let mut input = fx.prompts[0].clone();
                let mut f = Vec::new();
                for &t in &fx.tokens[0] {
                    f.push(m.forward(&input, &mut cache).map_err(s)?);
                    input = vec![t];
                }
                (t, f)
            };
            let mut errs: Vec<f32> = forced
                .iter()
                .zip(fx.logits.chunks_exact(v))
                .map(|(a, b)| worst(a, b))
                .collect();
            errs.sort_by(f32::total_cmp);
            let (med, max) = (errs[errs.len() / 2], errs[errs.len() - 1]);
            if !forced.is_empty() && argmax(&forced[0]) != fx.tokens[0][0] {
                eprintln!("bench ch07: {name} {path}: the first token differs from transformers'");
            }
            for (i, (t, want)) in tokens.iter().zip(&fx.tokens).enumerate() {
                csv += &format!(
                    "{name},{path},{},{n},{},{med:.3e},{max:.3e},{:.3e},{backend}\n",
                    i + 1,
                    same_prefix(t, want),
                    fx.min_logit_gap
                );
            }
        }
    }
    Ok(csv)
}

pub fn run(args: &Ch07Args) -> Result<(), String> {
    let quick = args.quick || crate::cases::quick_from_env();
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    if dev.kind() == BackendKind::Emu && !quick {
        return Err(format!(
            "bench ch07 measures on the GPU, and the backend is the emulator ({why}); --quick \
             (or MOE_BENCH_QUICK=1) runs the step untimed on the emulator and writes the bf16 CSV"
        ));
    }
    decode(dev, quick, &args.out_dir)?;
    let csv = bf16_rows(dev, &args.fixtures)?;
    let name = match dev.kind() {
        BackendKind::Cuda => "ch07_bf16.csv",
        BackendKind::Emu => "ch07_bf16_emu.csv",
    };
    write(&args.out_dir.join(name), &csv)?;
    println!("wrote {name} in {}", args.out_dir.display());
    Ok(())
}
