//! Chapter 4's cases: the fused MoE layer ([`FusedDevice::enqueue_experts`]: the hidden states
//! to bf16, chapter 3's alignment of the routing on the device, one tensor-core GEMM launch per
//! projection for every expert at once, the fixed-order sum over k) at Qwen3-30B-A3B's layer
//! shape and a GLM-like one, from one decode token to a prefill chunk; beside it, in the same
//! GPU session and on exactly the same routings, chapter 2's device loop (`ch02_grouped`: one
//! cuBLAS GEMM per active expert and projection, measured here) and two PyTorch layers from
//! `tools/peers/ch04_grouped_mm.py`: `torch._grouped_mm` (`torch_grouped_mm`: the pairs sorted by
//! expert, one grouped GEMM per projection) and chapter 2's per-expert loop (`torch_loop`).
//!
//! ```text
//! bench ch04 --export-routing R.safetensors   the routings and how the weights and hidden
//!                                             states are generated, for the peer (no GPU)
//! python3 tools/peers/ch04_grouped_mm.py --routing R.safetensors --samples S.csv \
//!     --outputs O.safetensors
//! bench ch04 --routing R.safetensors --peers S.csv --peer-outputs O.safetensors \
//!     --out-dir bench/results/h200
//! bench ch04 --quick                          on the GPU: fewer samples; without one: a
//!                                             smoke test on the emulator at two tiny shapes
//! ```
//!
//! What is timed: the experts for a routing given on the device (`ids` [T, k] i32 and `weights`
//! [T, k] f32, uploaded before capture), the alignment included; the router is not (it is
//! chapter 1's and chapter 5's business), so every implementation here starts from the same
//! routing. Chapter 2's loop gets its grouping from the host before capture, as in chapter 2's
//! bench; the peers get theirs the same way (their sort is in the timed call, see the peer).
//!
//! The floor of each case: one empty launch plus the larger of the expert weights the routing
//! touches (the active experts' `w13` [2I, H] and `w2` [H, I] slices, bf16, counted from the
//! routing) at the measured copy bandwidth and the FLOPs (`2·T·k·(2I·H + H·I)`) at the measured
//! bf16 cuBLAS rate; the `floor_probe` row beside each case is one launch reading those bytes
//! cold, measured. Activations are left out (as in chapter 2: 8·T·H bytes of f32 input and
//! output, plus `y` [T·k, H] f32 written and read), so the floor stays a lower bound. The CSV's
//! `cold_gbs` and `cold_tflops` are those touched bytes and FLOPs over the cold median.
//!
//! Before timing, at every shape and T, the output of every variant of ours is checked on the
//! device against chapter 2's device loop on the same weights, hidden states and routing
//! ([`OURS_VS_CH02`]), and the run stops if one does not match; the emulator's smoke test also
//! checks chapter 2's loop against the CPU grouped loop. Each peer regenerates exactly our bf16 weights
//! and hidden states from the generator described in the routing file (and checks that it did,
//! on the values exported with it), checks itself against an fp32 reference, and writes its
//! outputs; the bench compares them with ours ([`PEER_TOLERANCE`]) into `ch04_check.csv`, and a
//! peer whose output is not ours within it loses its timing rows and fails the command (after
//! the CSVs are written).
//!
//! Chapter 4's layer is timed as it ships (`fused`: path, fusion and tiles by its rules and
//! measured table) and with each path forced and each fusion undone ([`VARIANTS`], one `impl`
//! each, clones sharing the weights), the grouped decode path too (`fused_decode_grouped`,
//! checked to give `fused_decode`'s bits: [`SAME_BITS`]); the decode variants up to
//! [`DECODE_MAX_TOKENS`]. The shipped layer also gets the per-kernel breakdown
//! (`ch04_steps.csv`: each prefix of its launches timed, so each GEMM alone is a difference). A
//! call longer than [`LONG_CALL_US`] is measured with [`LONG_PLAN`] (fewer samples; the CSV's
//! `samples` says how many).

use crate::cases::{csv, peers_file, summary, Case, Ceilings, Session, SummaryLayout, Work};
use crate::ch02::GroupedWork;
use crate::ch02::{self, Shape};
pub use crate::ch04_inputs::{check_routing_file, hidden, routing_file, weights, PeerOutputs};
use ch01_router::Routing;
use ch02_grouped::compare::{check_output, output_error, OutputError, Tolerance};
use ch02_grouped::{Dtype, GroupPlan, GroupedCpu, GroupedDevice, MoeLayer, MoeWeights};
use ch03_align::reference::align_reference;
use ch04_fused_moe::choose::{use_tuned_table, TunedTable};
use ch04_fused_moe::device::Hidden;
use ch04_fused_moe::{BatchPlan, FusedDevice, FusedWorkspace};
use half::bf16;
use moe_kernels::measure::{Harness, Plan};
use moe_kernels::{record_launches, BackendKind, Device, DeviceBuffer};
use moe_tools::bench_row::{BenchRow, StepRow, STEP_COLUMNS};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

/// `bench ch04`'s arguments.
#[derive(clap::Args)]
pub struct Ch04Args {
    /// Where the GPU CSVs go (`ch04.csv`, `ch04_steps.csv`, `ch04_layout.csv`,
    /// `ch04_check.csv`, `ch04_ceilings.csv`).
    #[arg(long, default_value = "bench/results/h200")]
    out_dir: PathBuf,
    /// The PyTorch peers' samples to merge (from `tools/peers/ch04_grouped_mm.py --samples`).
    #[arg(long, requires_all = ["routing", "peer_outputs"])]
    peers: Option<PathBuf>,
    /// The routing file the peers measured (from `--export-routing`): checked to be exactly the
    /// one of this build.
    #[arg(long, value_name = "FILE")]
    routing: Option<PathBuf>,
    /// The peers' outputs (from `tools/peers/ch04_grouped_mm.py --outputs`): compared with ours.
    #[arg(long, value_name = "FILE", requires = "routing")]
    peer_outputs: Option<PathBuf>,
    /// GPU: fewer samples (a smoke test of the pipeline, not numbers to publish). Without a GPU:
    /// the whole path on the emulator at two tiny shapes, writing nothing. Also
    /// `MOE_BENCH_QUICK=1`.
    #[arg(long)]
    quick: bool,
    /// Write the routings of every measured shape and token count, and how the peers make our
    /// weights and hidden states ([`routing_file`]), and stop.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["peers", "routing", "peer_outputs"])]
    export_routing: Option<PathBuf>,
    /// With `--export-routing`: the emulator smoke test's tiny shapes instead (to check a peer
    /// on a CPU against `bench ch04 --quick --routing … --peer-outputs …`).
    #[arg(long, requires = "export_routing")]
    tiny: bool,
    /// Plan the shipped layer (`fused`) by this table (`ch04_tuned.csv` as `bench ch04-tune`
    /// writes it) instead of the one compiled in: to time a table tuned in the same GPU session,
    /// before it is committed and built in.
    #[arg(long, value_name = "FILE", conflicts_with = "export_routing")]
    tuned: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------------
// What is measured.

/// Qwen3-30B-A3B's MoE layer: 128 experts of 2048 → 768 → 2048, k = 8 (chapter 2's shape).
pub const QWEN3: Shape = ch02::QWEN3;
/// A GLM-like MoE layer: 288 experts of 4096 → 1024 → 4096, k = 8 (7.2 GB of bf16 experts).
pub const GLM: Shape = Shape {
    name: "glm_h4096_i1024_e288_k8",
    hidden: 4096,
    intermediate: 1024,
    experts: 288,
    k: 8,
};
pub static SHAPES: [Shape; 2] = [QWEN3, GLM];
/// One decode token, a small decode batch, a larger one, and two prefill chunks.
pub const TOKENS: [usize; 5] = [1, 8, 64, 512, 4096];

/// The emulator's smoke test: the same path at shapes the emulator runs in a moment; the second
/// takes chapter 3's two-launch path (2400 pairs) and a k of 8.
pub static TINY: [Shape; 2] = [
    ch02::TINY,
    Shape {
        name: "tiny_h96_i40_e24_k8",
        hidden: 96,
        intermediate: 40,
        experts: 24,
        k: 8,
    },
];
pub const TINY_TOKENS: [usize; 3] = [1, 8, 300];
/// The smoke test runs the variants after the first up to this many tokens.
const SMOKE_VARIANT_MAX_TOKENS: usize = 8;

/// The seed of the weights ([`MoeWeights::patterned`]'s, chapter 2's bench's: the Qwen3 layer
/// is chapter 2's), the gate's scale, and the salt of the hidden states of T tokens
/// (`HIDDEN_SALT + T`, chapter 2's).
pub const WEIGHT_SEED: u64 = 2;
pub const GATE_SCALE: f32 = 0.02;
pub const HIDDEN_SALT: u64 = 30_000;

/// A peer's output against ours, as max |peer − ours| over max |ours| (the test each peer applies
/// against its fp32 reference, `ch02_moe_loop.TOLERANCE`): the peers keep every activation in
/// bf16 and round their output to bf16 (the loop rounds each of a token's k partial sums: its
/// error reaches 4e-2 of the output's rms, 1e-2 of its largest value, on the emulator's tiny
/// shapes); a wrong expert, weight or token is of the order of the output itself.
pub const PEER_TOLERANCE: f64 = 2e-2;

/// Ours against chapter 2's device loop, as max |ours − theirs| over the rms of theirs: they
/// round at the same places and sum in other orders ([`ch04_fused_moe::ACROSS_SUM_ORDERS`]).
pub const OURS_VS_CH02: Tolerance = ch04_fused_moe::ACROSS_SUM_ORDERS;

/// `fused_bf16y` and `fused_bf16x_bf16y` against chapter 2's device loop (max |ours − theirs| over the rms of theirs):
/// each of a token's k weighted terms is rounded to bf16 before the sum (a relative error up to
/// 2⁻⁹ per term, as the engines round theirs), which [`OURS_VS_CH02`] (for layers that round
/// where the loop rounds) does not allow; a wrong expert, weight or token is of the order of the
/// output itself. [`PEER_TOLERANCE`]'s bound, on the rms.
pub const BF16_Y_VS_CH02: Tolerance = Tolerance(PEER_TOLERANCE);

/// How many values from each end of every generated tensor the routing file carries, so a peer
/// can prove it made exactly ours.
pub const CHECK_VALUES: usize = 64;

pub use crate::ch04_variants::{Variant, SAME_BITS, VARIANTS};

/// The largest T the decode variants are measured at.
pub const DECODE_MAX_TOKENS: usize = 512;

/// A call longer than this (one run, wall clock, after its first) is measured with
/// [`LONG_PLAN`]: 20 copies of a 20 ms call in a warm graph say nothing a single one does not,
/// and the default plan would spend minutes on one case.
pub const LONG_CALL_US: f64 = 1000.0;
/// Fewer samples for long calls: 50 cold, 10 warm of 2 copies.
pub const LONG_PLAN: Plan = Plan {
    cold_samples: 50,
    warm_samples: 10,
    warm_copies: 2,
};

/// Chapter 2's device loop, measured here.
pub const GROUPED: &str = "ch02_grouped";

/// FLOPs of `tokens` tokens: `2·T·k·(2I·H + H·I)`.
pub fn flops(shape: &Shape, tokens: usize) -> f64 {
    let (h, i) = (shape.hidden as f64, shape.intermediate as f64);
    2.0 * (tokens * shape.k) as f64 * (2.0 * i * h + h * i)
}

/// The experts a routing touches.
pub fn active_experts(routing: &Routing) -> usize {
    routing.ids.iter().collect::<BTreeSet<_>>().len()
}

/// Bytes of expert weights a routing touches in bf16: each active expert's `w13` and `w2` once.
pub fn touched_bytes(shape: &Shape, routing: &Routing) -> f64 {
    (active_experts(routing) * 3 * shape.intermediate * shape.hidden * 2) as f64
}

// ---------------------------------------------------------------------------------------------
// The work on a device.

/// One call of chapter 4's layer for one routing on the device, ready to be captured.
struct FusedWork {
    layer: Rc<FusedDevice>,
    ws: FusedWorkspace,
    hidden: HiddenBuffer,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
}

/// The hidden states as a variant takes them ([`Variant::bf16_hidden`]).
enum HiddenBuffer {
    F32(DeviceBuffer<f32>),
    Bf16(DeviceBuffer<bf16>),
}

impl HiddenBuffer {
    fn get(&self) -> Hidden<'_> {
        match self {
            HiddenBuffer::F32(b) => Hidden::F32(b),
            HiddenBuffer::Bf16(b) => Hidden::Bf16(b),
        }
    }

    fn dtype(&self) -> Dtype {
        match self {
            HiddenBuffer::F32(_) => Dtype::F32,
            HiddenBuffer::Bf16(_) => Dtype::Bf16,
        }
    }
}

impl Work for FusedWork {
    fn enqueue(&self) -> Result<(), String> {
        self.layer
            .enqueue_experts_from(
                &self.ws,
                self.hidden.get(),
                &self.ids,
                &self.weights,
                &self.out,
            )
            .map_err(|e| e.to_string())
    }
}

fn kerr(e: moe_kernels::KernelError) -> String {
    e.to_string()
}

/// Runs `work` once outside any graph (its output was uploaded as NaN: an element left
/// unwritten shows) and checks the launches it made against `want`; returns the output, checked
/// finite.
fn run_once(
    work: &dyn Work,
    out: &DeviceBuffer<f32>,
    want: usize,
    at: &str,
) -> Result<Vec<f32>, String> {
    let (r, names) = record_launches(|| work.enqueue());
    r?;
    if names.len() != want {
        return Err(format!(
            "{at}: {} launches recorded ({names:?}), the layer counts {want}",
            names.len()
        ));
    }
    let v = out.to_vec().map_err(kerr)?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(format!(
            "{at}: output {i} is {} (unwritten or broken)",
            v[i]
        ));
    }
    Ok(v)
}

/// `[T, H]` f32 of NaN: an output nothing has written yet.
fn poisoned(dev: &Device, len: usize) -> Result<DeviceBuffer<f32>, String> {
    dev.upload(&vec![f32::NAN; len]).map_err(kerr)
}

/// Builds chapter 4's work for `tokens` tokens as `variant` takes its input, and runs it once
/// ([`run_once`]).
fn fused_work(
    layer: &Rc<FusedDevice>,
    shape: &Shape,
    tokens: usize,
    routing: &Routing,
    variant: &Variant,
) -> Result<(FusedWork, Vec<f32>), String> {
    let dev = layer.device();
    let ws = layer.workspace(tokens).map_err(|e| e.to_string())?;
    let ids: Vec<i32> = routing.ids.iter().map(|&i| i as i32).collect();
    let x = hidden(shape, tokens);
    let work = FusedWork {
        layer: layer.clone(),
        hidden: if variant.bf16_hidden {
            let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            HiddenBuffer::Bf16(dev.upload(&xb).map_err(kerr)?)
        } else {
            HiddenBuffer::F32(dev.upload(&x).map_err(kerr)?)
        },
        ids: dev.upload(&ids).map_err(kerr)?,
        weights: dev.upload(&routing.weights).map_err(kerr)?,
        out: poisoned(dev, tokens * shape.hidden)?,
        ws,
    };
    let at = format!("{} {} at {tokens} tokens", shape.name, variant.imp);
    let launches = layer.launches_from(&work.ws, work.hidden.dtype());
    let v = run_once(&work, &work.out, launches, &at)?;
    Ok((work, v))
}

/// Builds chapter 2's work for `tokens` tokens and runs it once ([`run_once`]); checks that the
/// weight bytes it touches are the case's.
fn grouped_work(
    layer: &Rc<GroupedDevice>,
    shape: &Shape,
    tokens: usize,
    routing: &Routing,
) -> Result<(GroupedWork, Vec<f32>), String> {
    let dev = layer.device();
    let ws = layer.workspace(routing).map_err(|e| e.to_string())?;
    let touched = layer.weight_bytes_touched(ws.plan()) as f64;
    if touched != touched_bytes(shape, routing) {
        return Err(format!(
            "{} at {tokens} tokens: chapter 2's layer touches {touched} weight bytes, the case counts {}",
            shape.name,
            touched_bytes(shape, routing)
        ));
    }
    let want = layer.launches(ws.plan());
    let work = GroupedWork {
        layer: layer.clone(),
        hidden: dev.upload(&hidden(shape, tokens)).map_err(kerr)?,
        out: poisoned(dev, tokens * shape.hidden)?,
        ws,
    };
    let at = format!("{} {GROUPED} at {tokens} tokens", shape.name);
    let v = run_once(&work, &work.out, want, &at)?;
    Ok((work, v))
}

/// The layers of one shape on a device: chapter 4's variants and chapter 2's loop.
struct Layers {
    fused: Vec<(&'static Variant, Rc<FusedDevice>)>,
    grouped: Rc<GroupedDevice>,
    /// The variants after the first run only up to this many tokens (the emulator's smoke
    /// test: the decode kernels at 300 tokens take seconds there).
    cap: Option<usize>,
}

impl Layers {
    /// The variants of ours that run at `tokens` tokens.
    fn fused_at(
        &self,
        tokens: usize,
    ) -> impl Iterator<Item = &(&'static Variant, Rc<FusedDevice>)> + '_ {
        self.fused.iter().enumerate().filter_map(move |(i, f)| {
            let capped = i > 0 && self.cap.is_some_and(|c| tokens > c);
            (f.0.runs_at(tokens) && !capped).then_some(f)
        })
    }
}

/// Builds every layer of `shape` from `weights` (each uploads its own bf16 copy).
fn layers(dev: &'static Device, shape: &Shape, weights: &MoeWeights) -> Result<Layers, String> {
    let t = Instant::now();
    let base = FusedDevice::new(dev, weights, Dtype::Bf16).map_err(|e| e.to_string())?;
    let mut fused = Vec::new();
    for v in VARIANTS {
        if v.needs_sm90a && !dev.runs_hopper() {
            eprintln!(
                "bench ch04: {}: {} left out (it needs an sm_90a GPU or the emulator; this is {})",
                shape.name,
                v.imp,
                dev.describe()
            );
            continue;
        }
        eprintln!("bench ch04: {}: {} ({})", shape.name, v.imp, v.about);
        fused.push((v, Rc::new((v.make)(base.clone()))));
    }
    let grouped =
        Rc::new(GroupedDevice::new(dev, weights, Dtype::Bf16).map_err(|e| e.to_string())?);
    eprintln!(
        "bench ch04: {}: chapter 4's and chapter 2's layers uploaded ({:.0} MB of bf16 experts each) in {:.1} s",
        shape.name,
        (shape.experts * 3 * shape.hidden * shape.intermediate * 2) as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(Layers {
        fused,
        grouped,
        cap: None,
    })
}

// ---------------------------------------------------------------------------------------------
// Correctness before timing.

/// One line of `ch04_check.csv`: an implementation's output against another's at one shape and
/// token count.
#[derive(Clone, Debug)]
pub struct CheckRow {
    pub shape: String,
    pub tokens: usize,
    pub imp: String,
    pub against: String,
    pub e: OutputError,
    /// max |against|.
    pub max: f64,
    /// What `relative` divides the largest difference by: `rms` or `max` of `against`.
    pub relative_to: &'static str,
    pub tolerance: f64,
}

pub const CHECK_HEADER: &str = "shape,tokens,impl,against,max_abs_diff,rms_of_against,max_of_against,relative,relative_to,tolerance,ok";

impl CheckRow {
    /// The largest difference over the rms or the largest value of `against`.
    pub fn relative(&self) -> f64 {
        match self.relative_to {
            "max" if self.max > 0.0 => self.e.max_abs / self.max,
            "max" => 0.0,
            _ => self.e.relative,
        }
    }

    pub fn ok(&self) -> bool {
        self.e.nan == 0 && self.relative() <= self.tolerance
    }

    fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{:.4e},{:.4e},{:.4e},{:.4e},{},{:.1e},{}",
            self.shape,
            self.tokens,
            self.imp,
            self.against,
            self.e.max_abs,
            self.e.rms,
            self.max,
            self.relative(),
            self.relative_to,
            self.tolerance,
            u8::from(self.ok())
        )
    }
}

pub fn check_csv(rows: &[CheckRow]) -> String {
    std::iter::once(CHECK_HEADER.to_string())
        .chain(rows.iter().map(CheckRow::to_csv))
        .map(|l| l + "\n")
        .collect()
}

/// Every implementation's output at `shape`, each T: chapter 4's variants against chapter 2's
/// loop (an error stops the run: ours is wrong), against the CPU grouped loop when given (the
/// emulator's smoke test), and the peers' against ours (recorded; the caller drops a failing
/// peer). Returns the check rows.
fn check_shape(
    layers: &Layers,
    shape: &Shape,
    routings: &[(usize, Routing)],
    cpu: Option<&GroupedCpu>,
    peers: Option<&PeerOutputs>,
) -> Result<Vec<CheckRow>, String> {
    let mut rows = Vec::new();
    let max_of = |v: &[f32]| v.iter().fold(0f64, |m, x| m.max(x.abs() as f64));
    let row = |imp: &str,
               against: (&str, &[f32]),
               tokens: usize,
               e: OutputError,
               tol: (&'static str, f64)| CheckRow {
        shape: shape.name.to_string(),
        tokens,
        imp: imp.to_string(),
        against: against.0.to_string(),
        e,
        max: max_of(against.1),
        relative_to: tol.0,
        tolerance: tol.1,
    };
    let between = ("rms", Tolerance::BF16_VS_BF16.0);
    for (tokens, routing) in routings {
        let tokens = *tokens;
        let (_, grouped) = grouped_work(&layers.grouped, shape, tokens, routing)?;
        if let Some(cpu) = cpu {
            let want = cpu
                .experts(&hidden(shape, tokens), routing)
                .map_err(|e| e.to_string())?;
            let what = format!(
                "{} at {tokens} tokens: {GROUPED} against the CPU grouped loop",
                shape.name
            );
            let e = check_output(&what, &want, &grouped, Tolerance::BF16_VS_BF16)?;
            rows.push(row(GROUPED, ("cpu_grouped", &want), tokens, e, between));
        }
        let mut outs: Vec<(&str, Vec<f32>)> = Vec::new();
        for (v, layer) in layers.fused_at(tokens) {
            let (_, out) = fused_work(layer, shape, tokens, routing, v)?;
            let what = format!(
                "{} at {tokens} tokens: {} on {} against chapter 2's device loop",
                shape.name,
                v.imp,
                layer.device().describe()
            );
            let tol = if v.imp.ends_with("bf16y") {
                BF16_Y_VS_CH02
            } else {
                OURS_VS_CH02
            };
            let e = check_output(&what, &grouped, &out, tol)?;
            rows.push(row(v.imp, (GROUPED, &grouped), tokens, e, ("rms", tol.0)));
            outs.push((v.imp, out));
        }
        let out_of = |imp: &str| outs.iter().find(|o| o.0 == imp).map(|o| &o.1);
        for (imp, twin) in SAME_BITS {
            if let (Some(a), Some(b)) = (out_of(imp), out_of(twin)) {
                if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
                    return Err(format!(
                        "{} at {tokens} tokens: {imp} must give {twin}'s bits; output {i} is {} against {}",
                        shape.name, a[i], b[i]
                    ));
                }
            }
        }
        let ours = outs
            .into_iter()
            .next()
            .map(|o| o.1)
            .ok_or("no variant of chapter 4's layer to measure")?;
        if let Some(p) = peers {
            for (imp, out) in p.at(shape.name, tokens) {
                let e = if out.len() == ours.len() {
                    output_error(&ours, out)
                } else {
                    return Err(format!(
                        "{}: {imp} at {} {tokens} tokens has {} outputs, ours {}",
                        p.name,
                        shape.name,
                        out.len(),
                        ours.len()
                    ));
                };
                let peer = ("max", PEER_TOLERANCE);
                rows.push(row(imp, (VARIANTS[0].imp, &ours), tokens, e, peer));
            }
        }
    }
    Ok(rows)
}

/// Prints the check rows of one shape, a line each.
fn print_checks(rows: &[CheckRow]) {
    for r in rows {
        eprintln!(
            "bench ch04: {} {:>5} tokens: {:<17} against {:<13} max |diff| {:.3e} = {:.2e} of its {} {:.3e} (tolerance {:.0e}){}",
            r.shape,
            r.tokens,
            r.imp,
            r.against,
            r.e.max_abs,
            r.relative(),
            r.relative_to,
            if r.relative_to == "max" { r.max } else { r.e.rms },
            r.tolerance,
            if r.ok() { "" } else { "  WRONG" }
        );
    }
}

/// The peers (by `(shape, impl)`) whose output is not ours within [`PEER_TOLERANCE`], or missing
/// at a measured T.
fn wrong_peers(
    checks: &[CheckRow],
    peers: &PeerOutputs,
    shapes: &[Shape],
    tokens: &[usize],
) -> Vec<(String, String, String)> {
    let mut bad = Vec::new();
    let names: BTreeSet<&str> = peers.outputs.iter().map(|o| o.0.as_str()).collect();
    for s in shapes {
        for imp in &names {
            for &t in tokens {
                let c = checks
                    .iter()
                    .find(|c| c.shape == s.name && c.tokens == t && c.imp == *imp);
                let why = match c {
                    None => Some(format!("no output at {t} tokens")),
                    Some(c) if !c.ok() => Some(format!(
                        "at {t} tokens its output is {:.2e} of our largest value away (tolerance {:.0e})",
                        c.relative(), c.tolerance
                    )),
                    _ => None,
                };
                if let Some(why) = why {
                    bad.push((s.name.to_string(), imp.to_string(), why));
                    break;
                }
            }
        }
    }
    bad
}

// ---------------------------------------------------------------------------------------------
// The cases.

/// What the layout table prints beside the timings (`ch04_layout.csv`): the routing's active
/// experts, and the path, BLOCK_M and tile count of chapter 4's layer as it runs the batch (its
/// plan: the measured table's bucket). BLOCK_M and tiles are 0 on the decode path (no layout).
/// `paired_tiles`: the tiles whose neighbour in a cluster of version 9 (tile 2j with 2j + 1) is
/// of the same expert, so that the two could share one copy of the weight slice.
pub const LAYOUT_HEADER: &str = "shape,hidden,intermediate,experts,k,tokens,pairs,active_experts,path,block_m,tiles,paired_tiles,touched_bytes,flops";

/// The expert of every tile of chapter 3's layout of `routing` at `block_m` (its CPU reference,
/// each expert's pairs in ⌈pairs / BLOCK_M⌉ tiles, in expert order); none for BLOCK_M 0 (the
/// decode path has no layout).
pub fn tile_owners(routing: &Routing, experts: usize, block_m: usize) -> Vec<i32> {
    if block_m == 0 {
        return Vec::new();
    }
    let ids: Vec<i64> = routing.ids.iter().map(|&i| i as i64).collect();
    let a = align_reference(&ids, experts, block_m);
    a.expert_ids[..a.tiles(block_m)].to_vec()
}

/// Of those tiles, the ones whose cluster neighbour (tile 2j with 2j + 1, version 9's clusters
/// of two) is a tile of the same expert.
pub fn paired_tiles(owners: &[i32]) -> usize {
    2 * owners
        .chunks(2)
        .filter(|c| c.len() == 2 && c[0] == c[1])
        .count()
}

fn layout_line(shape: &Shape, tokens: usize, routing: &Routing, plan: &BatchPlan) -> String {
    let owners = tile_owners(routing, shape.experts, plan.block_m);
    format!(
        "{},{},{},{},{},{tokens},{},{},{},{},{},{},{},{}",
        shape.name,
        shape.hidden,
        shape.intermediate,
        shape.experts,
        shape.k,
        tokens * shape.k,
        active_experts(routing),
        plan.path,
        plan.block_m,
        owners.len(),
        paired_tiles(&owners),
        touched_bytes(shape, routing),
        flops(shape, tokens)
    )
}

/// The cases of one shape: each variant of chapter 4's layer (the first with its per-kernel
/// steps: each GEMM alone) and chapter 2's loop, at every T.
fn cases(shape: &'static Shape, routings: &[(usize, Routing)], layers: &Layers) -> Vec<Case> {
    let mut v = Vec::new();
    for (tokens, routing) in routings {
        let (tokens, bytes) = (*tokens, touched_bytes(shape, routing));
        let case = |imp: &'static str, steps: bool, build: crate::cases::Build| Case {
            chapter: "ch04",
            shape: shape.name,
            imp,
            rows: tokens,
            bytes,
            read_bytes: bytes,
            flops: flops(shape, tokens),
            steps,
            build,
        };
        for (i, (variant, layer)) in layers.fused_at(tokens).enumerate() {
            let (layer, routing, variant) = (layer.clone(), routing.clone(), *variant);
            v.push(case(
                variant.imp,
                i == 0,
                Box::new(move |_dev: &'static Device| {
                    Ok(
                        Box::new(fused_work(&layer, shape, tokens, &routing, variant)?.0)
                            as Box<dyn Work>,
                    )
                }),
            ));
        }
        let (layer, routing) = (layers.grouped.clone(), routing.clone());
        v.push(case(
            GROUPED,
            false,
            Box::new(move |_dev: &'static Device| {
                Ok(Box::new(grouped_work(&layer, shape, tokens, &routing)?.0) as Box<dyn Work>)
            }),
        ));
    }
    v
}

/// How long one call of `case` takes, µs: its work built and run once (outside any graph), then
/// run again and timed by wall clock to the end of the queue.
fn call_us(dev: &'static Device, case: &Case) -> Result<f64, String> {
    let work = (case.build)(dev)?;
    work.enqueue()?;
    dev.synchronize().map_err(kerr)?;
    let t = Instant::now();
    work.enqueue()?;
    dev.synchronize().map_err(kerr)?;
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

/// A case that only carries what a peer's row takes from it (shape, T, bytes, FLOPs): the
/// layers are gone by the time the peers' rows are merged.
fn stub(c: &Case) -> Case {
    Case {
        chapter: c.chapter,
        shape: c.shape,
        imp: c.imp,
        rows: c.rows,
        bytes: c.bytes,
        read_bytes: c.read_bytes,
        flops: c.flops,
        steps: false,
        build: Box::new(|_| Err("a stub: only for the peers' floors".to_string())),
    }
}

// ---------------------------------------------------------------------------------------------
// `bench ch04`.

pub fn run(args: &Ch04Args) -> Result<(), String> {
    let quick = args.quick || crate::cases::quick_from_env();
    if let Some(p) = &args.export_routing {
        let (shapes, tokens): (&[Shape], &[usize]) = if args.tiny {
            (&TINY, &TINY_TOKENS)
        } else {
            (&SHAPES, &TOKENS)
        };
        if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        std::fs::write(p, routing_file(shapes, tokens)?)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        println!(
            "wrote the routings of {} tokens at {} to {}",
            tokens
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            shapes
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(" and "),
            p.display()
        );
        return Ok(());
    }
    if let Some(p) = &args.tuned {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("--tuned {}: {e}", p.display()))?;
        let table =
            TunedTable::parse(&text).map_err(|e| format!("--tuned {}: {e}", p.display()))?;
        if table.rows.is_empty() {
            return Err(format!("--tuned {}: the table has no rows", p.display()));
        }
        eprintln!(
            "bench ch04: the layer plans by {} ({} buckets), not by the table it was built with",
            p.display(),
            table.rows.len()
        );
        use_tuned_table(table)?;
    }
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    match dev.kind() {
        BackendKind::Cuda => gpu(dev, args, quick),
        BackendKind::Emu if quick => emu_smoke(dev, args),
        BackendKind::Emu => Err(format!(
            "bench ch04 measures on the GPU, and the backend is the emulator ({why}); \
             --quick (or MOE_BENCH_QUICK=1) runs a smoke test of the same path on the emulator, \
             --export-routing the peers' inputs"
        )),
    }
}

fn gpu(dev: &'static Device, args: &Ch04Args, quick: bool) -> Result<(), String> {
    if let Some(p) = &args.routing {
        check_routing_file(p, &SHAPES, &TOKENS)?;
    }
    let peer_outputs = args
        .peer_outputs
        .as_deref()
        .map(PeerOutputs::read)
        .transpose()?;
    let session = Session::start(dev, quick)?;
    let Session { ceilings, .. } = &session;
    eprintln!("{}", session.describe());
    // The harness of long calls (the quick plan is lighter still).
    let long = if quick {
        None
    } else {
        Some(Harness::new(dev, LONG_PLAN).map_err(|e| e.to_string())?)
    };
    let mut rows: Vec<BenchRow> = vec![session.empty_row("ch04")];
    let (mut steps, mut checks, mut stubs) = (Vec::new(), Vec::new(), Vec::new());
    let mut layout = vec![LAYOUT_HEADER.to_string()];
    for shape in &SHAPES {
        let t = Instant::now();
        let routings = ch02::routings(shape, &TOKENS)?;
        let weights = weights(shape);
        eprintln!(
            "bench ch04: {}: weights generated in {:.1} s",
            shape.name,
            t.elapsed().as_secs_f64()
        );
        let layers = layers(dev, shape, &weights)?;
        drop(weights);
        let c = check_shape(&layers, shape, &routings, None, peer_outputs.as_ref())?;
        print_checks(&c);
        checks.extend(c);
        for (t, r) in &routings {
            let plan = layers.fused[0].1.plan_for(*t).map_err(|e| e.to_string())?;
            layout.push(layout_line(shape, *t, r, &plan));
        }
        let cases = cases(shape, &routings, &layers);
        session.settle(&cases)?;
        let b = crate::common::bar(cases.len(), shape.name);
        for case in &cases {
            b.set_message(format!("{} {} tokens", case.imp, case.rows));
            let at = |e: String| format!("{} {} {} tokens: {e}", case.shape, case.imp, case.rows);
            let h = match &long {
                Some(long) if call_us(dev, case).map_err(at)? > LONG_CALL_US => long,
                _ => &session.h,
            };
            let (r, s) =
                crate::cases::run_case(h, dev, case, ceilings, &session.device).map_err(at)?;
            rows.extend(r);
            steps.extend(s);
            b.inc(1);
        }
        b.finish_and_clear();
        stubs.extend(cases.iter().map(stub));
    }

    let mut failed = Vec::new();
    if let (Some(p), Some(outs)) = (&args.peers, &peer_outputs) {
        let bad = wrong_peers(&checks, outs, &SHAPES, &TOKENS);
        let peer = peers_file(p, &stubs, ceilings)?;
        for (shape, imp, why) in &bad {
            failed.push(format!("{imp} at {shape}: {why}: its rows are left out"));
        }
        rows.extend(
            peer.into_iter()
                .filter(|r| !bad.iter().any(|(s, i, _)| *s == r.shape && *i == r.imp)),
        );
    }

    let out = &args.out_dir;
    let steps_csv: String = std::iter::once(STEP_COLUMNS.to_string())
        .chain(steps.iter().map(StepRow::to_csv))
        .map(|l| l + "\n")
        .collect();
    crate::common::write(&out.join("ch04.csv"), &csv(&rows))?;
    crate::common::write(&out.join("ch04_steps.csv"), &steps_csv)?;
    crate::common::write(&out.join("ch04_layout.csv"), &(layout.join("\n") + "\n"))?;
    crate::common::write(&out.join("ch04_check.csv"), &check_csv(&checks))?;
    crate::common::write(&out.join("ch04_ceilings.csv"), &session.ceilings_csv())?;
    print!(
        "{}",
        summary(
            &rows,
            &SummaryLayout {
                shape_w: 26,
                rows_name: "tokens",
                rows_w: 6,
                imp_w: 17,
                tflops_digits: 1,
            }
        )
    );
    print!("{}", against_peers(&rows, ceilings));
    println!(
        "wrote ch04.csv, ch04_steps.csv, ch04_layout.csv, ch04_check.csv and ch04_ceilings.csv in {}{}",
        out.display(),
        if quick {
            " (--quick: not numbers to publish)"
        } else {
            ""
        }
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("PEERS WRONG:\n  {}", failed.join("\n  ")))
    }
}

/// What the chapter reads first: at each shape and T, ours (cold), its distance to the floor,
/// its achieved TB/s on touched weights and TFLOP/s, and each other implementation's time over
/// ours (cold / warm).
pub fn against_peers(rows: &[BenchRow], ceilings: &Ceilings) -> String {
    let ours = VARIANTS[0].imp;
    let others: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for r in rows {
            let skip = r.imp == ours || r.imp == "floor_probe" || r.imp == "empty_kernel";
            if !skip && !v.contains(&r.imp) {
                v.push(r.imp.clone());
            }
        }
        v
    };
    let mut s = format!(
        "{:<26} {:>6} {:>9} {:>9} {:>6} {:>6} {:>7}",
        "shape", "tokens", "ours µs", "floor µs", "×floor", "TB/s", "TFLOP/s"
    );
    for o in &others {
        s += &format!(" {:>20}", format!("{o}÷ours c/w"));
    }
    s.push('\n');
    for r in rows.iter().filter(|r| r.imp == ours) {
        s += &format!(
            "{:<26} {:>6} {:>9.2} {:>9.2} {:>6.1} {:>6.2} {:>7.1}",
            r.shape,
            r.rows,
            r.cold_median_us,
            r.floor_us,
            r.cold_median_us / r.floor_us,
            r.cold_gbs / 1e3,
            r.cold_tflops
        );
        for o in &others {
            let p = rows
                .iter()
                .find(|p| p.shape == r.shape && p.rows == r.rows && p.imp == *o);
            s += &format!(
                " {:>20}",
                p.map(|p| format!(
                    "{:.2}× / {:.2}×",
                    p.cold_median_us / r.cold_median_us,
                    p.warm_median_us / r.warm_median_us
                ))
                .unwrap_or("–".into())
            );
        }
        s.push('\n');
    }
    s += &format!(
        "(floor: one empty launch {:.2} µs + touched expert weights at {:.0} GB/s or FLOPs at {:.0} TFLOP/s)\n",
        ceilings.launch_us, ceilings.copy_gbs, ceilings.bf16_tflops
    );
    s
}

// ---------------------------------------------------------------------------------------------
// The emulator's smoke test.

/// The GPU path on the emulator at [`TINY`] and [`TINY_TOKENS`]: the layers built, every output
/// checked as the GPU run checks it (and chapter 2's loop against the CPU grouped loop too), the
/// routing file and the peers' outputs checked when given (`--export-routing F --tiny` makes
/// the file for a peer run on a CPU), then every case's boxed build run by wall clock. Writes
/// nothing: these are not GPU numbers.
fn emu_smoke(dev: &'static Device, args: &Ch04Args) -> Result<(), String> {
    eprintln!(
        "bench ch04 --quick on the emulator ({}): a smoke test of the GPU path at {}; nothing is written",
        dev.describe(),
        TINY.iter().map(|s| s.name).collect::<Vec<_>>().join(" and ")
    );
    if let Some(p) = &args.routing {
        check_routing_file(p, &TINY, &TINY_TOKENS)?;
    }
    let peers = args
        .peer_outputs
        .as_deref()
        .map(PeerOutputs::read)
        .transpose()?;
    let mut all_checks = Vec::new();
    println!(
        "{:<22} {:>6} {:<21} {:>8} {:>7} {:>10} {:>12}",
        "shape", "tokens", "impl", "launches", "BLOCK_M", "touched B", "emu ms/call"
    );
    for shape in &TINY {
        let routings = ch02::routings(shape, &TINY_TOKENS)?;
        let weights = weights(shape);
        let mut layers = layers(dev, shape, &weights)?;
        layers.cap = Some(SMOKE_VARIANT_MAX_TOKENS);
        let cpu = GroupedCpu::new(&weights, Dtype::Bf16).map_err(|e| e.to_string())?;
        let checks = check_shape(&layers, shape, &routings, Some(&cpu), peers.as_ref())?;
        print_checks(&checks);
        all_checks.extend(checks);
        for case in cases(shape, &routings, &layers) {
            // The same boxed build the GPU runner measures, so its closure is exercised too.
            let work = (case.build)(dev)?;
            let t = Instant::now();
            work.enqueue()?;
            dev.synchronize().map_err(kerr)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let (launches, bm) = if case.imp == GROUPED {
                let r = &routings.iter().find(|(t, _)| *t == case.rows).unwrap().1;
                let plan = GroupPlan::new(r, shape.experts).map_err(|e| e.to_string())?;
                (layers.grouped.launches(&plan), "–".to_string())
            } else {
                let l = &layers
                    .fused
                    .iter()
                    .find(|(v, _)| v.imp == case.imp)
                    .unwrap()
                    .1;
                let ws = l.workspace(case.rows).map_err(|e| e.to_string())?;
                (l.launches(&ws), ws.block_m().to_string())
            };
            println!(
                "{:<22} {:>6} {:<21} {:>8} {:>7} {:>10} {:>12.2}",
                shape.name, case.rows, case.imp, launches, bm, case.bytes, ms
            );
        }
    }
    if let Some(p) = &peers {
        let bad = wrong_peers(&all_checks, p, &TINY, &TINY_TOKENS);
        if !bad.is_empty() {
            return Err(format!(
                "PEERS WRONG:\n  {}",
                bad.iter()
                    .map(|(s, i, w)| format!("{i} at {s}: {w}"))
                    .collect::<Vec<_>>()
                    .join("\n  ")
            ));
        }
        println!(
            "bench ch04 --quick: the peers' outputs ({}) are ours within {:.0e}",
            p.outputs
                .iter()
                .map(|o| o.0.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", "),
            PEER_TOLERANCE
        );
    }
    println!(
        "bench ch04 --quick: the GPU path ran on the emulator; chapter 4's layer agrees with chapter 2's device loop and the CPU grouped loop"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::peer_rows;
    use crate::ch04_inputs::patterned_par;
    use ch01_router::inputs::patterned;

    #[test]
    fn the_parallel_generator_is_chapter_1s() {
        for (len, salt, scale) in [(1000, 7, 1.0), (300_000, 203, 0.0221), (5, 0, 3.0)] {
            let a = patterned(len, salt, scale);
            let b = patterned_par(len, salt, scale);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{len} {salt}"
            );
            assert_eq!(a.len(), b.len());
        }
        for shape in &TINY {
            let c = shape.config();
            assert_eq!(
                weights(shape),
                MoeWeights::patterned(&c, WEIGHT_SEED, GATE_SCALE, false)
            );
        }
    }

    #[test]
    fn floors_count_the_touched_experts_and_the_flops() {
        let one = ch02::routing(&QWEN3, 1).unwrap();
        assert_eq!(active_experts(&one), 8);
        // 8 experts' w13 [1536, 2048] and w2 [2048, 768] in bf16.
        assert_eq!(touched_bytes(&QWEN3, &one), 75_497_472.0);
        assert_eq!(
            flops(&QWEN3, 1),
            2.0 * 8.0 * (2.0 * 768.0 * 2048.0 + 2048.0 * 768.0)
        );
        assert_eq!(flops(&QWEN3, 1), QWEN3.flops(1));
        let glm = ch02::routing(&GLM, 4096).unwrap();
        // 32768 pairs over 288 experts: all of them, 7.2 GB.
        assert_eq!(active_experts(&glm), 288);
        assert_eq!(touched_bytes(&GLM, &glm), 7_247_757_312.0);
    }

    #[test]
    fn tile_owners_pad_each_expert_to_block_m() {
        let r = Routing {
            rows: 3,
            k: 2,
            ids: vec![0, 2, 0, 2, 0, 2],
            weights: vec![0.5; 6],
        };
        // Expert 0: 3 pairs, expert 1: none, expert 2: 3 pairs.
        assert_eq!(tile_owners(&r, 3, 2).len(), 4); // 2 + 0 + 2
        assert_eq!(tile_owners(&r, 3, 4).len(), 2); // 1 + 0 + 1
        assert_eq!(tile_owners(&r, 3, 0).len(), 0);
        // Tiles [0, 0, 2, 2] at BLOCK_M 2: both clusters of one expert; [0, 2] at 4: none.
        assert_eq!(paired_tiles(&tile_owners(&r, 3, 2)), 4);
        assert_eq!(paired_tiles(&tile_owners(&r, 3, 4)), 0);
        let odd = Routing {
            rows: 5,
            k: 1,
            ids: vec![0, 0, 0, 1, 1],
            weights: vec![1.0; 5],
        };
        // Tiles [0, 0, 0, 1, 1] at BLOCK_M 1: clusters [0, 0], [0, 1] and [1]; one shares.
        assert_eq!(paired_tiles(&tile_owners(&odd, 2, 1)), 2);
    }

    #[test]
    fn the_routing_file_carries_the_routings_and_the_generator() {
        let bytes = routing_file(&TINY, &TINY_TOKENS).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        for want in [
            r#""shapes":"tiny_h64_i32_e16_k4,tiny_h96_i40_e24_k8""#,
            r#""tokens":"1,8,300""#,
            r#""tiny_h96_i40_e24_k8.k":"8""#,
            r#""tiny_h64_i32_e16_k4.w13_salt":"203""#,
            r#""hidden_salt":"30000""#,
        ] {
            assert!(header.contains(want), "{want} in {header}");
        }
        // 1/√64 = 0.125 exactly.
        assert!(header.contains(r#""tiny_h64_i32_e16_k4.w13_scale_bits":"3e000000""#));
        let back =
            candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu).unwrap();
        let get = |k: &str| {
            back[k]
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap_or_else(|_| panic!("{k}"))
        };
        let s = &TINY[1];
        let w = weights(s);
        let check = get(&format!("check.{}.w2", s.name));
        assert_eq!(&check[..64], &w.w2[..64]);
        assert_eq!(&check[64..], &w.w2[w.w2.len() - 64..]);
        let h = hidden(s, 300);
        let check = get(&format!("check.{}.hidden.300", s.name));
        assert_eq!(&check[..64], &h[..64]);
        assert_eq!(&check[64..], &h[h.len() - 64..]);
        let r = ch02::routing(s, 8).unwrap();
        assert_eq!(get(&format!("topk_weights.{}.8", s.name)), r.weights);
        let ids: Vec<i32> = back[&format!("topk_ids.{}.8", s.name)]
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(ids, r.ids.iter().map(|&i| i as i32).collect::<Vec<_>>());
        assert_eq!(back.len(), 2 * (2 + 3 * 3));
    }

    /// A peers' output file as the peer writes it: `out.IMPL.SHAPE.T` in bf16.
    fn outputs_file(outs: &[(&str, &str, usize, Vec<f32>)]) -> Vec<u8> {
        let map: std::collections::HashMap<String, candle_core::Tensor> = outs
            .iter()
            .map(|(imp, shape, t, v)| {
                let x =
                    candle_core::Tensor::from_vec(v.clone(), v.len(), &candle_core::Device::Cpu)
                        .unwrap()
                        .to_dtype(candle_core::DType::BF16)
                        .unwrap();
                (format!("out.{imp}.{shape}.{t}"), x)
            })
            .collect();
        let p = std::env::temp_dir().join(format!("moe-bench-ch04-{}.st", std::process::id()));
        candle_core::safetensors::save(&map, &p).unwrap();
        let b = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        b
    }

    #[test]
    fn the_gpu_path_runs_on_the_emulator_and_catches_a_wrong_peer() {
        let dev = Device::emu();
        let shape = &TINY[0];
        let routings = ch02::routings(shape, &[8]).unwrap();
        let layers = layers(dev, shape, &weights(shape)).unwrap();
        let (_, ours) = fused_work(
            &layers.fused[0].1,
            shape,
            8,
            &routings[0].1,
            layers.fused[0].0,
        )
        .unwrap();
        let mut wrong = ours.clone();
        wrong[3] += 10.0;
        let file = outputs_file(&[
            ("torch_grouped_mm", shape.name, 8, ours.clone()),
            ("torch_loop", shape.name, 8, wrong),
        ]);
        let peers = PeerOutputs::parse(&file, "o.st").unwrap();
        let checks = check_shape(&layers, shape, &routings, None, Some(&peers)).unwrap();
        let find = |imp: &str| checks.iter().find(|c| c.imp == imp).unwrap();
        assert!(find("fused").ok() && find("torch_grouped_mm").ok());
        assert!(!find("torch_loop").ok());
        assert!(
            find("torch_grouped_mm").relative() < 1e-2,
            "bf16 rounding only"
        );
        let bad = wrong_peers(&checks, &peers, &TINY[..1], &[8]);
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].1, "torch_loop");
        // A T without its output is a wrong peer too.
        let bad = wrong_peers(&checks, &peers, &TINY[..1], &[8, 1]);
        assert!(bad
            .iter()
            .any(|b| b.1 == "torch_grouped_mm" && b.2.contains("no output at 1")));
        let text = check_csv(&checks);
        assert!(text.starts_with(CHECK_HEADER));
        assert!(text.lines().any(|l| l
            .starts_with(&format!("{},8,torch_loop,fused,", shape.name))
            && l.ends_with(",0")));
    }

    #[test]
    fn the_smoke_test_runs() {
        emu_smoke(Device::emu(), &quick_args(PathBuf::new(), None)).unwrap();
    }

    /// `bench ch04 --quick`'s arguments, with `--tuned` when given.
    fn quick_args(out_dir: PathBuf, tuned: Option<PathBuf>) -> Ch04Args {
        Ch04Args {
            out_dir,
            peers: None,
            routing: None,
            peer_outputs: None,
            quick: true,
            export_routing: None,
            tiny: false,
            tuned,
        }
    }

    #[test]
    fn a_tuned_table_that_cannot_be_used_is_a_typed_error() {
        let dir = std::env::temp_dir().join(format!("bench-ch04-tuned-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (empty, bad) = (dir.join("empty.csv"), dir.join("bad.csv"));
        std::fs::write(&empty, "# no rows\n").unwrap();
        std::fs::write(&bad, "hidden,tokens\n1,2\n").unwrap();
        let args = |p: PathBuf| quick_args(dir.clone(), Some(p));
        // Each fails before any table is put in use (which would change this process's plans).
        let missing = run(&args(dir.join("missing.csv"))).unwrap_err();
        assert!(
            missing.starts_with("--tuned ") && missing.contains("missing.csv"),
            "{missing}"
        );
        let e = run(&args(empty)).unwrap_err();
        assert!(e.ends_with("the table has no rows"), "{e}");
        let e = run(&args(bad)).unwrap_err();
        assert!(e.starts_with("--tuned ") && e.contains("header"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn peers_get_the_floor_of_our_case_and_the_summary_reads_them() {
        let dev = Device::emu();
        let shape = &TINY[0];
        let routings = ch02::routings(shape, &TINY_TOKENS).unwrap();
        let layers = layers(dev, shape, &weights(shape)).unwrap();
        let cases: Vec<Case> = cases(shape, &routings, &layers).iter().map(stub).collect();
        // The emulator runs the sm_90a variants too.
        let here = VARIANTS
            .iter()
            .filter(|v| !v.needs_sm90a || dev.runs_hopper())
            .count();
        assert_eq!(cases.len(), TINY_TOKENS.len() * (here + 1));
        assert!(cases.iter().filter(|c| c.steps).count() == 0, "stubs");
        let ceilings = Ceilings {
            launch_us: 4.0,
            copy_gbs: 4000.0,
            bf16_tflops: 600.0,
        };
        let text = format!(
            "chapter,shape,impl,rows,launches,device,cold_us,warm_us\n\
             ch04,{n},torch_grouped_mm,8,12,H200,30 10 20,5 6\n",
            n = shape.name
        );
        let peers = peer_rows(&text, "s.csv", &cases, &ceilings).unwrap();
        let ours = cases.iter().find(|c| c.rows == 8).unwrap();
        assert_eq!(peers[0].floor_us, ceilings.floor_us(ours.bytes, ours.flops));
        let mut mine = peers[0].clone();
        (mine.imp, mine.cold_median_us, mine.warm_median_us) = ("fused".into(), 10.0, 2.0);
        let s = against_peers(&[mine, peers[0].clone()], &ceilings);
        assert!(s.contains("2.00× / 2.75×"), "{s}");
    }
}
