//! Chapter 2's cases: the loop grouped by expert ([`GroupedDevice::enqueue_experts`]: gather,
//! one cuBLAS GEMM per active expert for `w13`, SwiGLU, one per active expert for `w2`,
//! combine) at Qwen3-30B-A3B's layer shape, for a routing given, from one decode token to a
//! prefill chunk; beside it, measured in the same GPU session by `tools/peers/ch02_moe_loop.py`,
//! Hugging Face's two experts paths (transformers 5.17) on exactly the same routings: its eager
//! per-expert loop (`torch_loop`) and its default `grouped_mm` path (`torch_grouped_mm`: one
//! grouped GEMM per projection, combined by the inverse permutation and a fixed-order fp32 sum).
//!
//!     bench ch02 --export-routing R.safetensors       the routings, for the peers (no GPU needed)
//!     python3 tools/peers/ch02_moe_loop.py --routing R.safetensors --samples S.csv
//!     bench ch02 --routing R.safetensors --peers S.csv --out-dir bench/results/h200
//!     bench ch02 --cpu                                the candle grouped loop against the literal
//!                                                     loop on this CPU (bench/results/cpu/ch02.csv)
//!     bench ch02 --quick                              on the GPU: fewer samples; without one: a
//!                                                     smoke test on the emulator at a tiny shape
//!
//! What is timed is the experts for a routing given: the grouping plan was made on the host and
//! uploaded before capture ([`GroupedDevice::workspace`]), so the graph holds only launches.
//! The floor of each token count is its expert weights touched (the active experts' `w13` and
//! `w2` slices, bf16) at the measured copy bandwidth, or its FLOPs (`6·H·I` per (token, expert)
//! pair) at the measured bf16 cuBLAS rate, whichever is larger, plus one launch. It leaves out
//! the `[T, H]` f32 input and output (8·T·H bytes: 0.02% of the weight bytes at one token, under
//! 6% at 4096 tokens, where the FLOPs set the floor anyway), so it stays a lower bound.
//!
//! What ours moves besides the weights is not what the peers move. Our layer's interface is f32:
//! it reads the f32 hidden states `[T, H]` (converted to bf16 in its gather), writes the down
//! projection of every pair as f32 `y` `[T·k, H]` and reads it back in its combine, and writes an
//! f32 output `[T, H]`; in between it keeps bf16 (the gathered rows, `gate | up`, SwiGLU). The
//! peers take and return bf16 and keep every activation in bf16. The GPU run prints once what
//! ours moves ([`Shape::activation_bytes`]) against the weights at each token count: at 4096
//! tokens, 1174 MB of activations (604 MB of them the f32 input, `y` and output; 872 MB if
//! those three were bf16) against 1208 MB of expert weights.
//!
//! Before timing, the GPU run checks our output on the device at the first two token counts (1
//! and 8) against the CPU grouped loop ([`GroupedCpu`], the same bf16 roundings) and stops if it
//! does not match; the emulator's smoke test checks every token count of its tiny shape. The
//! peers check themselves against an fp32 reference.

use crate::cases::{csv, peers_file, summary, Case, Session, SummaryLayout, Work};
use ch01_router::inputs::patterned;
use ch01_router::{ReferenceRouter, Router, RouterConfig, Routing};
use ch02_grouped::compare::{check_output, OutputError, Tolerance};
use ch02_grouped::device::Workspace;
use ch02_grouped::{
    Dtype, GroupPlan, GroupedCpu, GroupedDevice, LiteralLayer, MoeConfig, MoeLayer, MoeWeights,
};
use moe_kernels::safetensors::SafetensorsWriter;
use moe_kernels::{record_launches, BackendKind, Device, DeviceBuffer};
use moe_tools::bench_row::BenchRow;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

/// `bench ch02`'s arguments.
#[derive(clap::Args)]
pub struct Ch02Args {
    /// Where the GPU CSVs go (`ch02.csv`, `ch02_ceilings.csv`).
    #[arg(long, default_value = "bench/results/h200")]
    out_dir: PathBuf,
    /// The PyTorch peers' samples to merge (from `tools/peers/ch02_moe_loop.py --samples`).
    #[arg(long)]
    peers: Option<PathBuf>,
    /// The routings file the peers measured (from `--export-routing`): checked to be exactly
    /// the routings measured here.
    #[arg(long, value_name = "FILE")]
    routing: Option<PathBuf>,
    /// GPU: fewer samples (a smoke test of the pipeline, not numbers to publish). Without a
    /// GPU: the whole path once on the emulator at a tiny shape. Also `MOE_BENCH_QUICK=1`.
    #[arg(long)]
    quick: bool,
    /// Write the routing of every measured token count (safetensors: `topk_ids.T` i32 [T, k],
    /// `topk_weights.T` f32 [T, k], the shape in the metadata) for the peers, and stop.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cpu", "peers"])]
    export_routing: Option<PathBuf>,
    /// The CPU comparison instead: the candle grouped loop against the literal loop, wall clock
    /// on this machine.
    #[arg(long)]
    cpu: bool,
    /// Where `--cpu` writes its CSV.
    #[arg(long, default_value = "bench/results/cpu/ch02.csv")]
    cpu_out: PathBuf,
    /// `--cpu`: timed runs of each implementation at each shape (after one untimed run); the
    /// emulator's smoke test takes at most 3.
    #[arg(long, default_value_t = 5)]
    samples: usize,
}

/// One benchmarked layer shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub k: usize,
}

impl Shape {
    /// The layer's config: Qwen3's router (softmax, top-k, renormalised; the router itself is
    /// not timed here), no shared expert.
    pub fn config(&self) -> MoeConfig {
        MoeConfig {
            hidden: self.hidden,
            intermediate: self.intermediate,
            experts: self.experts,
            router: RouterConfig::qwen3(self.k),
            shared: None,
        }
    }

    /// Bytes of expert weights a call touches in bf16: each active expert's `w13` [2I, H] and
    /// `w2` [H, I] once (what [`GroupedDevice::weight_bytes_touched`] says, checked at build).
    pub fn touched_bytes(&self, active: usize) -> f64 {
        (active * 3 * self.intermediate * self.hidden * Dtype::Bf16.bytes()) as f64
    }

    /// FLOPs of `tokens` tokens: `2·(2I·H) + 2·(H·I)` per (token, expert) pair.
    pub fn flops(&self, tokens: usize) -> f64 {
        6.0 * (tokens * self.k * self.hidden * self.intermediate) as f64
    }

    /// The activation bytes one call of our grouped loop moves at `tokens` tokens.
    pub fn activation_bytes(&self, tokens: usize) -> ActivationBytes {
        let (t, p, h, i) = (tokens, tokens * self.k, self.hidden, self.intermediate);
        let (f32b, bf16b) = (4, Dtype::Bf16.bytes());
        ActivationBytes {
            f32: (t * h * f32b + 2 * p * h * f32b + t * h * f32b) as f64,
            bf16: (2 * p * h * bf16b + 2 * p * 2 * i * bf16b + 2 * p * i * bf16b) as f64,
        }
    }
}

/// The activation bytes one call of our grouped loop ([`GroupedDevice::enqueue_experts`])
/// moves, each buffer counted written once by the kernel that makes it and read once by the
/// kernel that uses it, `P = T·k` pairs. Left out: the 12 bytes per pair of the plan and the
/// routing weights it reads, and the gather's repeated reads of a token's row (it addresses
/// each row k times; counted once).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActivationBytes {
    /// The f32 ones: the hidden states read (`T·H`), `y` written and read (`2·P·H`), the
    /// output written (`T·H`).
    pub f32: f64,
    /// The bf16 ones, each written and read: the gathered rows (`P·H`), `gate | up` (`P·2I`),
    /// SwiGLU's output (`P·I`).
    pub bf16: f64,
}

impl ActivationBytes {
    pub fn total(&self) -> f64 {
        self.f32 + self.bf16
    }

    /// What the same layer would move with bf16 hidden states, `y` and output, as the peers
    /// keep them.
    pub fn all_bf16(&self) -> f64 {
        self.f32 / 2.0 + self.bf16
    }
}

/// Qwen3-30B-A3B's MoE layer: 128 experts of 2048 → 768 → 2048, k = 8, bf16.
pub const QWEN3: Shape = Shape {
    name: "qwen3_h2048_i768_e128_k8",
    hidden: 2048,
    intermediate: 768,
    experts: 128,
    k: 8,
};

/// One decode token, a small decode batch, a larger one, and two prefill chunks.
pub const TOKENS: [usize; 5] = [1, 8, 64, 512, 4096];

/// The emulator's smoke test: the same code path at a shape the emulator runs in a moment.
pub const TINY: Shape = Shape {
    name: "tiny_h64_i32_e16_k4",
    hidden: 64,
    intermediate: 32,
    experts: 16,
    k: 4,
};
const TINY_TOKENS: [usize; 3] = [1, 8, 32];

/// The CPU comparison's shapes and token counts: the literal loop does `3·H·I` f64
/// multiply-adds per pair, one thread, so the medium shape takes it about a second.
pub const CPU_CASES: [(Shape, usize); 2] = [
    (
        Shape {
            name: "small_h256_i128_e16_k4",
            hidden: 256,
            intermediate: 128,
            experts: 16,
            k: 4,
        },
        16,
    ),
    (
        Shape {
            name: "medium_h1024_i512_e64_k8",
            hidden: 1024,
            intermediate: 512,
            experts: 64,
            k: 8,
        },
        128,
    ),
];

/// The seed of every benchmarked layer's weights ([`MoeWeights::patterned`]).
const WEIGHT_SEED: u64 = 2;
/// Salts of the generated logits and hidden states (one sequence per token count).
const LOGIT_SALT: u64 = 20_000;
const HIDDEN_SALT: u64 = 30_000;

/// The routing of `tokens` tokens: logits in ±3 from the book's generator (a fixed seed per
/// token count), routed by chapter 1's reference router with Qwen3's config (softmax over E,
/// top k, renormalised). The logits are not a gate's output (the router is not timed here):
/// they spread the pairs over the experts about uniformly, as a load-balanced model does.
pub fn routing(shape: &Shape, tokens: usize) -> Result<Routing, String> {
    let e = shape.experts;
    let logits = patterned(tokens * e, LOGIT_SALT + tokens as u64, 3.0);
    let t = candle_core::Tensor::from_vec(logits, (tokens, e), &candle_core::Device::Cpu)
        .map_err(|e| e.to_string())?;
    ReferenceRouter {
        config: RouterConfig::qwen3(shape.k),
    }
    .route(&t, None)
    .map_err(|e| format!("routing {tokens} tokens: {e}"))
}

/// `[tokens, H]` f32 hidden states in ±1.
pub fn hidden(shape: &Shape, tokens: usize) -> Vec<f32> {
    patterned(tokens * shape.hidden, HIDDEN_SALT + tokens as u64, 1.0)
}

/// The routings as a safetensors file: for each token count T, `topk_ids.T` i32 [T, k] and
/// `topk_weights.T` f32 [T, k]; the metadata names the shape and its sizes, so the peers build
/// weights of exactly the measured shapes. Written with `moe_kernels::safetensors` (candle's
/// writer takes no metadata and writes only to a file).
pub fn routing_file(shape: &Shape, routings: &[(usize, Routing)]) -> Vec<u8> {
    let tokens: Vec<String> = routings.iter().map(|(t, _)| t.to_string()).collect();
    let mut w = SafetensorsWriter::new();
    w.metadata("shape", shape.name)
        .metadata("hidden", &shape.hidden.to_string())
        .metadata("intermediate", &shape.intermediate.to_string())
        .metadata("experts", &shape.experts.to_string())
        .metadata("k", &shape.k.to_string())
        .metadata("tokens", &tokens.join(","))
        .metadata("dtype", "bf16");
    for (t, r) in routings {
        // Ids are below E ≤ 2³¹ (MoeConfig::validate), so i32 holds them.
        let ids: Vec<i32> = r.ids.iter().map(|&i| i as i32).collect();
        w.i32(&format!("topk_ids.{t}"), &[*t, r.k], &ids).f32(
            &format!("topk_weights.{t}"),
            &[*t, r.k],
            &r.weights,
        );
    }
    w.to_bytes()
}

/// Every measured token count's routing at `shape`.
pub fn routings(shape: &Shape, tokens: &[usize]) -> Result<Vec<(usize, Routing)>, String> {
    tokens
        .iter()
        .map(|&t| Ok((t, routing(shape, t)?)))
        .collect()
}

/// The benchmarked layer's weights (f32 values; each layer rounds them to bf16).
fn weights(shape: &Shape) -> MoeWeights {
    MoeWeights::patterned(&shape.config(), WEIGHT_SEED, 0.02, false)
}

/// The layer on a device, built once and shared by the cases of every token count.
fn layer(
    dev: &'static Device,
    shape: &Shape,
    weights: &MoeWeights,
) -> Result<Rc<GroupedDevice>, String> {
    let t = Instant::now();
    let layer = GroupedDevice::new(dev, weights, Dtype::Bf16).map_err(|e| e.to_string())?;
    eprintln!(
        "bench ch02: {} weights uploaded in bf16 ({:.0} MB) in {:.1} s",
        shape.name,
        (shape.experts * 3 * shape.hidden * shape.intermediate * 2) as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(Rc::new(layer))
}

/// One call of the experts for one routing, ready to be captured (chapter 4's bench times
/// chapter 2's loop with it too).
pub(crate) struct GroupedWork {
    pub(crate) layer: Rc<GroupedDevice>,
    pub(crate) ws: Workspace,
    pub(crate) hidden: DeviceBuffer<f32>,
    pub(crate) out: DeviceBuffer<f32>,
}

impl Work for GroupedWork {
    fn enqueue(&self) -> Result<(), String> {
        self.layer
            .enqueue_experts(&self.ws, &self.hidden, &self.out)
            .map_err(|e| e.to_string())
    }
}

/// Builds the work of `tokens` tokens on the layer's device, runs it once outside any graph
/// and checks what that run says: the launches it made are the ones the layer counts, the
/// weight bytes are the case's, and the output is finite.
fn build_work(
    layer: &Rc<GroupedDevice>,
    shape: &Shape,
    tokens: usize,
    routing: &Routing,
) -> Result<GroupedWork, String> {
    let dev = layer.device();
    let err = |e: moe_kernels::KernelError| e.to_string();
    let ws = layer.workspace(routing).map_err(|e| e.to_string())?;
    let work = GroupedWork {
        layer: layer.clone(),
        hidden: dev.upload(&hidden(shape, tokens)).map_err(err)?,
        out: dev.alloc::<f32>(tokens * shape.hidden).map_err(err)?,
        ws,
    };
    let (r, names) = record_launches(|| work.enqueue());
    r?;
    let out = work.out.to_vec().map_err(err)?;
    let want = layer.launches(work.ws.plan());
    if names.len() != want {
        return Err(format!(
            "{tokens} tokens: {} launches recorded, the layer counts {want}",
            names.len()
        ));
    }
    let active = work.ws.plan().active_experts().len();
    if layer.weight_bytes_touched(work.ws.plan()) as f64 != shape.touched_bytes(active) {
        return Err(format!(
            "{tokens} tokens: the layer touches {} weight bytes, the case counts {}",
            layer.weight_bytes_touched(work.ws.plan()),
            shape.touched_bytes(active)
        ));
    }
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        return Err(format!("{tokens} tokens: output {i} is {}", out[i]));
    }
    Ok(work)
}

/// Builds the work of `tokens` tokens ([`build_work`]: its one run outside any graph) and checks
/// its output against the CPU grouped loop on the same routing, hidden states and weights:
/// within [`Tolerance::between`] bf16 of the output's rms, or an error naming the device.
fn check_against_cpu(
    layer: &Rc<GroupedDevice>,
    cpu: &GroupedCpu,
    shape: &Shape,
    tokens: usize,
    routing: &Routing,
) -> Result<(GroupedWork, OutputError), String> {
    let work = build_work(layer, shape, tokens, routing)?;
    let got = work.out.to_vec().map_err(|e| e.to_string())?;
    let want = cpu
        .experts(&hidden(shape, tokens), routing)
        .map_err(|e| e.to_string())?;
    let e = check_output(
        &format!(
            "{} at {tokens} tokens: our output on {} against the CPU grouped loop",
            shape.name,
            layer.device().describe()
        ),
        &want,
        &got,
        Tolerance::between(Dtype::Bf16),
    )?;
    Ok((work, e))
}

/// The measured cases: the grouped loop at each token count, with its floor.
fn cases(
    shape: &'static Shape,
    routings: &[(usize, Routing)],
    layer: &Rc<GroupedDevice>,
) -> Result<Vec<Case>, String> {
    routings
        .iter()
        .map(|(tokens, routing)| {
            let plan = GroupPlan::new(routing, shape.experts).map_err(|e| e.to_string())?;
            let touched = shape.touched_bytes(plan.active_experts().len());
            let (tokens, routing, layer) = (*tokens, routing.clone(), layer.clone());
            Ok(Case {
                chapter: "ch02",
                shape: shape.name,
                imp: "grouped",
                rows: tokens,
                bytes: touched,
                read_bytes: touched,
                flops: shape.flops(tokens),
                // 3 + 2 × active launches: a per-kernel table would be 260 lines at 512 tokens.
                steps: false,
                build: Box::new(move |_dev: &'static Device| {
                    Ok(Box::new(build_work(&layer, shape, tokens, &routing)?) as Box<dyn Work>)
                }),
            })
        })
        .collect()
}

/// `bench ch02`.
pub fn run(args: &Ch02Args) -> Result<(), String> {
    let quick = args.quick || crate::cases::quick_from_env();
    if let Some(p) = &args.export_routing {
        let r = routings(&QWEN3, &TOKENS)?;
        if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        std::fs::write(p, routing_file(&QWEN3, &r)).map_err(|e| format!("{}: {e}", p.display()))?;
        let pairs: usize = r.iter().map(|(t, _)| t * QWEN3.k).sum();
        println!(
            "wrote the routings of {} tokens ({pairs} pairs) at {} to {}",
            TOKENS.map(|t| t.to_string()).join(", "),
            QWEN3.name,
            p.display()
        );
        return Ok(());
    }
    if args.cpu {
        return cpu(args, quick);
    }
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    match dev.kind() {
        BackendKind::Cuda => gpu(dev, args, quick),
        BackendKind::Emu if quick => emu_smoke(dev, args.samples.clamp(1, 3)),
        BackendKind::Emu => Err(format!(
            "bench ch02 measures on the GPU, and the backend is the emulator ({why}); \
             --quick (or MOE_BENCH_QUICK=1) runs a smoke test of the same path on the emulator, \
             --cpu the CPU comparison"
        )),
    }
}

fn gpu(dev: &'static Device, args: &Ch02Args, quick: bool) -> Result<(), String> {
    let shape = &QWEN3;
    let routings = routings(shape, &TOKENS)?;
    if let Some(p) = &args.routing {
        let file = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if file != routing_file(shape, &routings) {
            return Err(format!(
                "{} is not the routing file of this build (bench ch02 --export-routing): the peers measured other routings",
                p.display()
            ));
        }
        eprintln!(
            "bench ch02: {} holds exactly the routings measured here",
            p.display()
        );
    }
    let session = Session::start(dev, quick)?;
    let Session { ceilings, .. } = &session;
    eprintln!("{}", session.describe());
    let weights = weights(shape);
    let layer = layer(dev, shape, &weights)?;
    check_on_device(&layer, &weights, shape, &routings[..CHECKED])?;
    drop(weights);
    print_activation_bytes(shape, &routings)?;
    let cases = cases(shape, &routings, &layer)?;
    let mut rows: Vec<BenchRow> = vec![session.empty_row("ch02")];
    session.settle(&cases)?;
    let b = crate::common::bar(cases.len(), "ch02");
    for case in &cases {
        b.set_message(format!("{} tokens", case.rows));
        let (r, _) = session
            .run(case)
            .map_err(|e| format!("{} tokens: {e}", case.rows))?;
        rows.extend(r);
        b.inc(1);
    }
    b.finish_and_clear();

    if let Some(p) = &args.peers {
        rows.extend(peers_file(p, &cases, ceilings)?);
    }

    let out = &args.out_dir;
    crate::common::write(&out.join("ch02.csv"), &csv(&rows))?;
    // Its own file: `ceilings.csv` is chapter 1's run's, whose floors its CSV holds.
    crate::common::write(&out.join("ch02_ceilings.csv"), &session.ceilings_csv())?;
    print!(
        "{}",
        summary(
            &rows,
            &SummaryLayout {
                shape_w: 26,
                rows_name: "tokens",
                rows_w: 6,
                imp_w: 17,
                tflops_digits: 2,
            }
        )
    );
    println!(
        "wrote ch02.csv and ch02_ceilings.csv in {}{}",
        out.display(),
        if quick {
            " (--quick: not numbers to publish)"
        } else {
            ""
        }
    );
    Ok(())
}

/// How many of the GPU run's token counts (the first ones: 1 and 8) [`check_on_device`] checks.
const CHECKED: usize = 2;

/// Our output on the device at each of `routings` against the CPU grouped loop (built here from
/// `weights` and dropped at the end: for Qwen3's layer, a few GB of host memory for a few
/// seconds); stops the run at the first that does not match.
fn check_on_device(
    layer: &Rc<GroupedDevice>,
    weights: &MoeWeights,
    shape: &Shape,
    routings: &[(usize, Routing)],
) -> Result<(), String> {
    let t = Instant::now();
    let cpu = GroupedCpu::new(weights, Dtype::Bf16).map_err(|e| e.to_string())?;
    for (tokens, routing) in routings {
        let (_, e) = check_against_cpu(layer, &cpu, shape, *tokens, routing)?;
        eprintln!(
            "bench ch02: checked on the device at {} against the CPU grouped loop: \
             max |difference| {:.3e}, {:.2e} of the output's rms {:.3e} (tolerance {:.0e})",
            plural(*tokens, "token"),
            e.max_abs,
            e.relative,
            e.rms,
            Tolerance::between(Dtype::Bf16).0
        );
    }
    eprintln!(
        "bench ch02: our output matches the CPU grouped loop at {} ({:.1} s with the CPU layer)",
        routings
            .iter()
            .map(|(t, _)| plural(*t, "token"))
            .collect::<Vec<_>>()
            .join(" and "),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `1 token`, `8 tokens`.
fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Prints, once, the activation bytes ours moves at each token count against the expert
/// weights it touches ([`Shape::activation_bytes`]).
fn print_activation_bytes(shape: &Shape, routings: &[(usize, Routing)]) -> Result<(), String> {
    eprintln!(
        "bench ch02: activation bytes per call of ours, each buffer written once and read once \
         (f32: hidden [T, H] in, y [T·k, H] written and read, out [T, H]; bf16: the gathered \
         rows [T·k, H], gate|up [T·k, 2I], SwiGLU [T·k, I]), against the expert weights touched:"
    );
    eprintln!(
        "bench ch02: {:>6} {:>11} {:>10} {:>16} {:>11} {:>13}",
        "tokens", "act. MB", "f32 MB", "act. if bf16 MB", "weights MB", "act./weights"
    );
    for (tokens, routing) in routings {
        let a = shape.activation_bytes(*tokens);
        let active = GroupPlan::new(routing, shape.experts)
            .map_err(|e| e.to_string())?
            .active_experts()
            .len();
        let w = shape.touched_bytes(active);
        eprintln!(
            "bench ch02: {tokens:>6} {:>11.3} {:>10.3} {:>16.3} {:>11.3} {:>12.1}%",
            a.total() / 1e6,
            a.f32 / 1e6,
            a.all_bf16() / 1e6,
            w / 1e6,
            100.0 * a.total() / w
        );
    }
    Ok(())
}

/// The GPU path on the emulator at [`TINY`]: the same cases, built and run the same way
/// (launch counts, bytes and finiteness checked at build), each output also checked against
/// the CPU grouped loop, and timed by wall clock. Writes nothing: these are not GPU numbers.
fn emu_smoke(dev: &'static Device, samples: usize) -> Result<(), String> {
    eprintln!(
        "bench ch02 --quick on the emulator ({}): a smoke test of the GPU path at {}; nothing is written",
        dev.describe(),
        TINY.name
    );
    let shape = &TINY;
    let routings = routings(shape, &TINY_TOKENS)?;
    let weights = weights(shape);
    let layer = layer(dev, shape, &weights)?;
    // What the GPU run checks and prints before timing, then every token count below.
    check_on_device(&layer, &weights, shape, &routings[..CHECKED])?;
    print_activation_bytes(shape, &routings)?;
    let cpu = GroupedCpu::new(&weights, Dtype::Bf16).map_err(|e| e.to_string())?;
    let cases = cases(shape, &routings, &layer)?;
    println!(
        "{:<22} {:>6} {:>8} {:>10} {:>12} {:>14}",
        "shape", "tokens", "launches", "touched B", "emu ms/call", "vs CPU (rms)"
    );
    for (case, (tokens, routing)) in cases.iter().zip(&routings) {
        let (work, e) = check_against_cpu(&layer, &cpu, shape, *tokens, routing)?;
        // The same boxed build the GPU runner measures, so its closure is exercised too.
        let boxed = (case.build)(dev)?;
        let mut times = Vec::new();
        for _ in 0..samples {
            let t = Instant::now();
            boxed.enqueue()?;
            dev.synchronize().map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{:<22} {:>6} {:>8} {:>10} {:>12.2} {:>14.1e}",
            shape.name,
            tokens,
            layer.launches(work.ws.plan()),
            case.bytes,
            times[times.len() / 2],
            e.relative
        );
    }
    println!(
        "bench ch02 --quick: the GPU path ran on the emulator and agrees with the CPU grouped loop"
    );
    Ok(())
}

/// The CSV header of `bench/results/cpu/ch02.csv`.
pub const CPU_HEADER: &str = "shape,impl,tokens,hidden,intermediate,experts,k,dtype,active_experts,median_ms,min_ms,max_ms,samples,threads,host";

/// `bench ch02 --cpu`: for each of [`CPU_CASES`], the literal loop (f64, one thread) and the
/// candle grouped loop (bf16 values, f32 arithmetic), same routing; checked against each other
/// once, then timed by wall clock (the median of `samples` runs after one untimed run).
fn cpu(args: &Ch02Args, quick: bool) -> Result<(), String> {
    let samples = if quick { 1 } else { args.samples.max(1) };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let host = crate::common::host();
    eprintln!(
        "bench ch02 --cpu: the literal loop against the candle grouped loop, bf16, {samples} timed runs each, on {host} ({threads} threads)"
    );
    let mut lines = vec![CPU_HEADER.to_string()];
    let b = crate::common::bar(CPU_CASES.len() * 2 * (samples + 1), "ch02 cpu");
    for (shape, tokens) in &CPU_CASES {
        let weights = MoeWeights::patterned(&shape.config(), WEIGHT_SEED, 0.02, false);
        let routing = routing(shape, *tokens)?;
        let x = hidden(shape, *tokens);
        let active = GroupPlan::new(&routing, shape.experts)
            .map_err(|e| e.to_string())?
            .active_experts()
            .len();
        let literal = LiteralLayer::new(&weights, Dtype::Bf16).map_err(|e| e.to_string())?;
        let grouped = GroupedCpu::new(&weights, Dtype::Bf16).map_err(|e| e.to_string())?;
        let layers: [&dyn MoeLayer; 2] = [&literal, &grouped];
        let mut outs = Vec::new();
        for layer in layers {
            b.set_message(format!("{} {}", shape.name, layer.name()));
            let mut ms = Vec::new();
            let mut out = Vec::new();
            for i in 0..=samples {
                let t = Instant::now();
                out = layer.experts(&x, &routing).map_err(|e| e.to_string())?;
                if i > 0 {
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                b.inc(1);
            }
            outs.push(out);
            ms.sort_by(f64::total_cmp);
            let median = if ms.len() % 2 == 1 {
                ms[ms.len() / 2]
            } else {
                (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
            };
            lines.push(format!(
                "{},{},{tokens},{},{},{},{},bf16,{active},{median:.3},{:.3},{:.3},{},{threads},{host}",
                shape.name,
                layer.name(),
                shape.hidden,
                shape.intermediate,
                shape.experts,
                shape.k,
                ms[0],
                ms[ms.len() - 1],
                ms.len()
            ));
        }
        let e = check_output(
            &format!("{}: the grouped loop against the literal loop", shape.name),
            &outs[0],
            &outs[1],
            Tolerance::vs_oracle(Dtype::Bf16),
        )?;
        b.suspend(|| {
            eprintln!(
                "{}: {tokens} tokens, {active} of {} experts active; grouped within {:.1e} of the literal loop's rms",
                shape.name, shape.experts, e.relative
            )
        });
    }
    b.finish_and_clear();
    for l in &lines {
        println!("{l}");
    }
    if quick {
        println!("(--quick: one run each; nothing written)");
        return Ok(());
    }
    crate::common::write(&args.cpu_out, &(lines.join("\n") + "\n"))?;
    println!("wrote {}", args.cpu_out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{peer_rows, Ceilings};
    use std::path::Path;

    /// Reads a routing file back with candle's reader.
    fn read_routing_file(path: &Path) -> Result<Vec<(String, candle_core::Tensor)>, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut v: Vec<_> =
            candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .into_iter()
                .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v)
    }

    #[test]
    fn the_routing_file_reads_back_with_candle() {
        let r = routings(&TINY, &TINY_TOKENS).unwrap();
        let bytes = routing_file(&TINY, &r);
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0, "header padded to 8 bytes");
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        assert!(
            header.contains(r#""shape":"tiny_h64_i32_e16_k4""#),
            "{header}"
        );
        assert!(header.contains(r#""tokens":"1,8,32""#), "{header}");
        let dir = std::env::temp_dir().join(format!("moe-bench-ch02-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("routing.safetensors");
        std::fs::write(&p, &bytes).unwrap();
        let back = read_routing_file(&p).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back.len(), 2 * TINY_TOKENS.len());
        for (t, routing) in &r {
            let ids = &back
                .iter()
                .find(|(n, _)| *n == format!("topk_ids.{t}"))
                .unwrap()
                .1;
            let w = &back
                .iter()
                .find(|(n, _)| *n == format!("topk_weights.{t}"))
                .unwrap()
                .1;
            assert_eq!(ids.dims(), &[*t, TINY.k]);
            let ids: Vec<i32> = ids.flatten_all().unwrap().to_vec1().unwrap();
            let want: Vec<i32> = routing.ids.iter().map(|&i| i as i32).collect();
            assert_eq!(ids, want);
            let w: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(w, routing.weights);
        }
    }

    #[test]
    fn routings_are_fixed_and_spread() {
        let a = routing(&QWEN3, 64).unwrap();
        assert_eq!(a, routing(&QWEN3, 64).unwrap(), "deterministic");
        assert_eq!((a.rows, a.k), (64, 8));
        for t in 0..a.rows {
            let s: f32 = a.row_weights(t).iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "renormalised: {s}");
        }
        let plan = GroupPlan::new(&a, QWEN3.experts).unwrap();
        // 512 pairs over 128 experts, about uniformly: nearly every expert is active.
        assert!(
            plan.active_experts().len() > 110,
            "{}",
            plan.active_experts().len()
        );
        let one = GroupPlan::new(&routing(&QWEN3, 1).unwrap(), QWEN3.experts).unwrap();
        assert_eq!(one.active_experts().len(), 8);
        // One token touches 8 experts' w13 and w2: 8 · 3 · 768 · 2048 · 2 bytes.
        assert_eq!(QWEN3.touched_bytes(8), 75_497_472.0);
        assert_eq!(QWEN3.flops(1), 6.0 * 8.0 * 2048.0 * 768.0);
        // The GPU run checks our output on the device at the first two: 1 and 8 tokens.
        assert_eq!(TOKENS[..CHECKED], [1, 8]);
    }

    #[test]
    fn activation_bytes_at_4096_tokens() {
        // P = 32768 pairs, H = 2048, I = 768: f32 hidden 33.5 MB, y 2 × 268.4 MB, out 33.5 MB;
        // bf16 rows 2 × 134.2 MB, gate | up 2 × 100.7 MB, SwiGLU 2 × 50.3 MB.
        let a = QWEN3.activation_bytes(4096);
        assert_eq!(a.f32, 603_979_776.0);
        assert_eq!(a.bf16, 570_425_344.0);
        assert_eq!(a.total(), 1_174_405_120.0);
        assert_eq!(a.all_bf16(), 872_415_232.0);
        // All 128 experts: 1208 MB of weights.
        assert_eq!(QWEN3.touched_bytes(128), 1_207_959_552.0);
        assert_eq!(
            QWEN3.activation_bytes(1).total(),
            (8192 + 131_072 + 8192 + 65_536 + 49_152 + 24_576) as f64
        );
    }

    #[test]
    fn the_gpu_path_runs_on_the_emulator() {
        emu_smoke(Device::emu(), 1).unwrap();
    }

    #[test]
    fn peers_get_the_floor_of_our_case() {
        let dev = Device::emu();
        let r = routings(&TINY, &TINY_TOKENS).unwrap();
        let cases = cases(&TINY, &r, &layer(dev, &TINY, &weights(&TINY)).unwrap()).unwrap();
        let ceilings = Ceilings {
            launch_us: 4.0,
            copy_gbs: 4000.0,
            bf16_tflops: 600.0,
        };
        let text = "chapter,shape,impl,rows,launches,device,cold_us,warm_us\n\
                    ch02,tiny_h64_i32_e16_k4,torch_loop,8,40,H200,30 10 20,5 6\n\
                    ch02,tiny_h64_i32_e16_k4,torch_grouped_mm,8,9,H200,12,4\n";
        let rows = peer_rows(text, "s.csv", &cases, &ceilings).unwrap();
        assert_eq!(rows.len(), 2);
        let ours = cases.iter().find(|c| c.rows == 8).unwrap();
        for r in &rows {
            assert_eq!((r.bytes, r.flops), (ours.bytes, ours.flops));
            assert_eq!(r.floor_us, ceilings.floor_us(ours.bytes, ours.flops));
        }
        assert_eq!((rows[0].cold_median_us, rows[0].launches), (20.0, 40));
        let e = peer_rows(
            &text.replace(",8,40,", ",9,40,"),
            "s.csv",
            &cases,
            &ceilings,
        );
        assert!(e
            .unwrap_err()
            .contains("torch_loop tiny_h64_i32_e16_k4 9 has no matching case"));
    }
}
