//! Chapter 5's cases: the fused router pair along the row axis, at chapter 1's two shapes (the
//! router article's GLM-like router, hidden 4096, 288 experts, k = 8, sigmoid + bias; and
//! Qwen3-30B-A3B's, hidden 2048, 128 experts, k = 8, softmax), at 1, 2, 4, 6, 8, 12, 16, 32, 64,
//! 96, 128 to 4096 by powers of two, and 8192 rows. One table of implementations ([`impls`]), each measured the same way:
//!
//! | impl | what one call is | bytes of its floor |
//! |---|---|---|
//! | `tiny_gemm` | the tiny GEMM alone, in the form the pair runs (CUDA cores up to 7 rows, tensor cores from 8): bf16 hidden and gate in, fp32 logits out | hidden and gate read (bf16), logits written |
//! | `tiny_gemm_fma`, `tiny_gemm_tc` | the same, each form at every row count | the same |
//! | `fused_router` | the fused kernel alone, on logits already on the device, in the form the pair runs (`form_for`: for sigmoid scores without groups the screened form up to 8 rows and past 512, a block per row between; for the others a block per row up to 512 rows, else a warp per row) | logits and bias read, ids and weights written |
//! | `fused_router_warp`, `fused_router_block`, `fused_router_screen` | the same, each form at every row count (the screened form runs the one-warp router for softmax) | the same |
//! | `pair` | the tiny GEMM + the fused kernel ([`FusedRouter`]) | the router's: hidden and gate (bf16) and bias read, ids and weights written |
//! | `pair_fma`, `pair_tc` | the same, with the tiny GEMM in each form at every row count | the same |
//! | `blas_fused` | cuBLAS's bf16 → fp32 GEMM + the fused kernel | the router's |
//! | `blas_gemm` | cuBLAS's bf16 → fp32 GEMM alone, as `blas_fused` calls it: what any router kernel after it starts from | hidden and gate read (bf16), logits written |
//! | `chain` | chapter 1's chain of plain kernels, fp32 in | the router's |
//! | `torch_5line` | the five PyTorch lines (`tools/peers/router5.py --chapter ch05`), fp32 | the router's (merged from the peer's samples) |
//! | `engines_router` | the engines' pair: cuBLAS's bf16 → fp32 GEMM (torch) + SGLang's Triton router design (`tools/peers/engines_router.py`), its ids checked against the same oracle as ours | the router's (merged from the peer's samples) |
//!
//! Beside each, the floor probe: one launch reading the case's input bytes cold, which for the
//! router is chapter 1's floor (one launch + one cold read of the gate weight, with the hidden
//! rows and the bias). Every case's output is checked before it is timed: the logits against
//! the f64 dot products of the bf16 inputs (every row up to 96 rows, 128 rows spread over a
//! prefill chunk), and the ids and weights against chapter 1's f64 oracle on the logits the case
//! computed; the pair's ids and weights must also be the fused kernel's bits on the tiny GEMM's
//! logits.
//!
//! ```text
//! bench ch05 [--peers S.csv] [--out-dir bench/results/h200] [--quick]
//!                                     (S.csv: the peers' samples, router5.py's and
//!                                     engines_router.py's merged by merge_peers.py)
//! bench ch05 --quick                  without a GPU: a smoke test on the emulator at 1, 6
//!                                     and 17 rows, writing nothing
//! ```

use crate::cases::{csv, steps_csv, summary, Case, Session, SummaryLayout, Work};
use crate::ch01::{bias, SHAPES};
use crate::common::GpuArgs;
use ch01_router::chain::{
    DeviceMatrix, DeviceRouter, FiveLineChain, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use ch01_router::literal::LiteralRouter;
use ch01_router::routing::Routing;
use ch05_fused_router::fused::{FusedTopk, RowForm};
use ch05_fused_router::tiny_gemm::GemmForm;
use ch05_fused_router::{tiny_gemm, FusedRouter, LogitsFrom};
use half::bf16;
use moe_kernels::blas::{linear, Linear};
use moe_kernels::{BackendKind, Device, DeviceBuffer};
use moe_tools::bench_row::BenchRow;
use moe_tools::figures::ch05::{
    fastest_probe, CHAIN_OVER_PAIR_MIN, FUSED_OVER_LOGITS_MAX, PAIR_OVER_PROBE_MAX,
    TINY_OVER_PROBE_MAX,
};
use std::time::Instant;

/// One decode token, 2 and 4, one request verifying 6 speculative tokens, 8 and 12 (around where
/// the tiny GEMM changes form: 6 and 8 either side of the pair's switch), the engines' tiny GEMM's
/// limit (16), past it (32, 64), 16 such requests (96), the powers of two from 128 to 4096 (where
/// the switch from the tiny GEMM to cuBLAS is chosen by measurement), a prefill chunk. The peers
/// measure at these too (`tools/peers/engines_router.py`'s ROWS is this list).
pub const ROWS: [usize; 17] = [
    1, 2, 4, 6, 8, 12, 16, 32, 64, 96, 128, 256, 512, 1024, 2048, 4096, 8192,
];
/// The emulator's smoke test: one row, six, and one past a 16-row block.
const EMU_ROWS: [usize; 3] = [1, 6, 17];
/// The PyTorch peer's implementation: in the book's table, not measured here (its rows are merged
/// from its own samples, and take the floor of the first case at their shape and rows: the
/// pair's).
const PEER: &str = "torch_5line";

/// The implementations measured, in the order of the book's table
/// ([`moe_tools::figures::ch05::IMPLS`], one list for both), but the peer.
pub fn impls() -> impl Iterator<Item = &'static str> {
    moe_tools::figures::ch05::IMPLS
        .into_iter()
        .filter(|&imp| imp != PEER)
}

/// `(read, written)` bytes of one implementation's floor at `rows` rows of shape `s` (see the
/// module's table).
fn floor_bytes(s: &crate::ch01::Shape, rows: usize, imp: &str) -> (f64, f64) {
    let (t, h, e, k) = (rows, s.hidden, s.experts, (s.config)().k);
    let bias = if s.bias { 4 * e } else { 0 };
    let (r, w) = match imp {
        "tiny_gemm" | "tiny_gemm_fma" | "tiny_gemm_tc" | "blas_gemm" => {
            (2 * (t * h + e * h), 4 * t * e)
        }
        "fused_router" | "fused_router_warp" | "fused_router_block" | "fused_router_screen" => {
            (4 * t * e + bias, 8 * t * k)
        }
        _ => (2 * (t * h + e * h) + bias, 8 * t * k),
    };
    (r as f64, w as f64)
}

/// One measured input: a shape's gate weight, bias and `rows` hidden rows, all exactly bf16
/// values (the chain reads the same numbers in fp32).
struct Input {
    shape: &'static str,
    config: RouterConfig,
    rows: usize,
    hidden: usize,
    experts: usize,
    hidden_states: Vec<f32>, // [T, H]
    gate: Vec<f32>,          // [E, H]
    bias: Option<Vec<f32>>,  // [E]
}

fn round_bf16(v: Vec<f32>) -> Vec<f32> {
    v.into_iter().map(|x| bf16::from_f32(x).to_f32()).collect()
}

impl Input {
    fn new(s: &crate::ch01::Shape, rows: usize) -> Input {
        Input {
            shape: s.name,
            config: (s.config)(),
            rows,
            hidden: s.hidden,
            experts: s.experts,
            // The same seeds as chapter 1's bench.
            hidden_states: round_bf16(patterned(rows * s.hidden, 3 + rows as u64, 1.0)),
            gate: round_bf16(patterned(s.experts * s.hidden, 1, 0.02)),
            bias: s.bias.then(|| bias(s.experts)),
        }
    }

    fn gate_shape(&self) -> GateShape {
        GateShape {
            rows: self.rows,
            hidden: self.hidden,
            experts: self.experts,
        }
    }

    /// The f64 dot products of the inputs (exact bf16 values) for row `t`, and the sum of the
    /// products' magnitudes (the scale of an fp32 sum's error).
    fn exact_logits(&self, t: usize) -> Vec<(f64, f64)> {
        let h = self.hidden;
        let x = &self.hidden_states[t * h..(t + 1) * h];
        (0..self.experts)
            .map(|e| {
                let w = &self.gate[e * h..(e + 1) * h];
                x.iter().zip(w).fold((0.0, 0.0), |(s, a), (&p, &q)| {
                    let v = p as f64 * q as f64;
                    (s + v, a + v.abs())
                })
            })
            .collect()
    }

    /// The rows whose logits are checked: every row up to 96, 128 spread over a larger batch.
    fn checked_rows(&self) -> Vec<usize> {
        if self.rows <= 96 {
            (0..self.rows).collect()
        } else {
            (0..128).map(|i| i * self.rows / 128).collect()
        }
    }

    /// `logits` [T, E] against the exact dot products: within 1e-6 of each sum's size.
    fn check_logits(&self, what: &str, logits: &[f32]) -> Result<(), String> {
        for t in self.checked_rows() {
            for (e, (exact, size)) in self.exact_logits(t).into_iter().enumerate() {
                let got = logits[t * self.experts + e] as f64;
                if (got - exact).abs() > 1e-6 * size.max(1e-30) {
                    return Err(format!(
                        "{} {what} rows {}: logit [{t}, {e}] is {got}, the exact dot product {exact}",
                        self.shape, self.rows
                    ));
                }
            }
        }
        Ok(())
    }

    /// `got` against chapter 1's f64 oracle on `logits`.
    fn check_routing(&self, what: &str, logits: &[f32], got: &Routing) -> Result<(), String> {
        let oracle = LiteralRouter {
            config: self.config.clone(),
        }
        .route_rows(logits, self.rows, self.experts, self.bias.as_deref())
        .map_err(|e| e.to_string())?;
        let name = format!("{} {what} rows {}", self.shape, self.rows);
        let exact = check_routing(&name, &oracle, got, Tolerance::OWN_LOGITS)?;
        // Rows without a clear cut were checked too, against the cut (any expert at it may be
        // chosen). Random inputs give a few such rows by chance (at 128 experts the 8th and 9th
        // softmax scores lie within 1e-5 in a few percent of rows): only inputs where most rows
        // tie would make the check say little.
        if exact * 2 < self.rows {
            return Err(format!(
                "{name}: only {exact} of {} rows had a clear cut",
                self.rows
            ));
        }
        Ok(())
    }
}

/// The device buffers of one input: bf16 and fp32 copies, the bias, fp32 logits and outputs.
struct Buffers {
    hidden16: DeviceBuffer<bf16>,
    gate16: DeviceBuffer<bf16>,
    hidden32: DeviceBuffer<f32>,
    gate32: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    logits: DeviceBuffer<f32>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
}

impl Buffers {
    fn new(dev: &'static Device, i: &Input) -> Result<Buffers, String> {
        let e = |e: moe_kernels::KernelError| e.to_string();
        let to16 = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
        let k = i.config.k;
        Ok(Buffers {
            hidden16: dev.upload(&to16(&i.hidden_states)).map_err(e)?,
            gate16: dev.upload(&to16(&i.gate)).map_err(e)?,
            hidden32: dev.upload(&i.hidden_states).map_err(e)?,
            gate32: dev.upload(&i.gate).map_err(e)?,
            bias: i
                .bias
                .as_deref()
                .map(|b| dev.upload(b))
                .transpose()
                .map_err(e)?,
            logits: dev.alloc(i.rows * i.experts).map_err(e)?,
            ids: dev.alloc(i.rows * k).map_err(e)?,
            weights: dev.alloc(i.rows * k).map_err(e)?,
        })
    }

    fn outputs(&self) -> RouterOutputs<'_> {
        RouterOutputs {
            ids: &self.ids,
            weights: &self.weights,
        }
    }

    fn routing(&self, rows: usize, k: usize) -> Result<Routing, String> {
        ch01_router::chain::download(rows, k, &self.ids, &self.weights).map_err(|e| e.to_string())
    }
}

/// What one implementation queues.
enum Imp {
    /// The tiny GEMM in the form given (for `tiny_gemm`, the pair's form at the row count).
    TinyGemm(std::sync::Arc<moe_kernels::Module>, GemmForm),
    Fused(FusedTopk),
    /// The pair, or cuBLAS + the fused kernel.
    Pair(FusedRouter),
    /// cuBLAS's GEMM alone (`blas_gemm`).
    Blas(&'static Device),
    Chain(FiveLineChain),
}

/// One implementation's call on one input, ready to be captured.
struct RouterWork {
    imp: Imp,
    rows: usize,
    hidden: usize,
    experts: usize,
    b: Buffers,
}

impl Work for RouterWork {
    fn enqueue(&self) -> Result<(), String> {
        let b = &self.b;
        let r = match &self.imp {
            Imp::TinyGemm(m, form) => tiny_gemm::enqueue_as(
                *form,
                m,
                &b.hidden16,
                &b.gate16,
                &b.logits,
                self.rows,
                self.hidden,
                self.experts,
            ),
            Imp::Fused(topk) => topk.enqueue(&b.logits, b.bias.as_ref(), &b.outputs()),
            Imp::Blas(dev) => linear(
                dev,
                Linear {
                    rows: self.rows,
                    in_features: self.hidden,
                    out_features: self.experts,
                },
                &b.hidden16.as_view(),
                &b.gate16.as_view(),
                &b.logits.as_view(),
                false,
            )
            .map_err(Into::into),
            Imp::Pair(pair) => pair.enqueue(
                &GateInputs {
                    hidden: DeviceMatrix::Bf16(&b.hidden16),
                    weight: DeviceMatrix::Bf16(&b.gate16),
                    bias: b.bias.as_ref(),
                },
                &b.outputs(),
            ),
            Imp::Chain(chain) => chain.enqueue(
                &GateInputs {
                    hidden: DeviceMatrix::F32(&b.hidden32),
                    weight: DeviceMatrix::F32(&b.gate32),
                    bias: b.bias.as_ref(),
                },
                &b.outputs(),
            ),
        };
        r.map_err(|e| e.to_string())
    }
}

/// Builds `imp` on `input`, runs it once outside any graph and checks what it computed (see the
/// module docs); returns the work ready to be timed.
fn build(dev: &'static Device, i: &Input, imp: &str) -> Result<RouterWork, String> {
    let err = |e: ch01_router::chain::DeviceRouterError| e.to_string();
    let (cfg, shape, bias) = (&i.config, i.gate_shape(), i.bias.as_deref());
    let tiny = dev.load(&tiny_gemm::KERNELS).map_err(|e| e.to_string())?;
    let imp_of = match imp {
        "tiny_gemm" => Imp::TinyGemm(tiny.clone(), tiny_gemm::form_for(i.rows)),
        "tiny_gemm_fma" => Imp::TinyGemm(tiny.clone(), GemmForm::CudaCores),
        "tiny_gemm_tc" => Imp::TinyGemm(tiny.clone(), GemmForm::TensorCores),
        "fused_router" => {
            Imp::Fused(FusedTopk::new(dev, cfg, i.rows, i.experts, bias).map_err(err)?)
        }
        "fused_router_warp" | "fused_router_block" | "fused_router_screen" => {
            let form = match imp {
                "fused_router_warp" => RowForm::WarpPerRow,
                "fused_router_block" => RowForm::BlockPerRow,
                _ => RowForm::Screened,
            };
            let topk = FusedTopk::with_form(dev, cfg, i.rows, i.experts, bias, form);
            Imp::Fused(topk.map_err(err)?)
        }
        "pair" => Imp::Pair(FusedRouter::new(dev, cfg, shape, bias).map_err(err)?),
        "pair_fma" | "pair_tc" => {
            let form = if imp == "pair_fma" {
                GemmForm::CudaCores
            } else {
                GemmForm::TensorCores
            };
            let pair = FusedRouter::new(dev, cfg, shape, bias).map_err(err)?;
            Imp::Pair(pair.with_gemm_form(form))
        }
        "blas_fused" => Imp::Pair(
            FusedRouter::with_logits(dev, cfg, shape, bias, LogitsFrom::Blas).map_err(err)?,
        ),
        "blas_gemm" => Imp::Blas(dev),
        "chain" => Imp::Chain(FiveLineChain::new(dev, cfg, shape, bias).map_err(err)?),
        other => return Err(format!("no implementation `{other}`")),
    };
    let work = RouterWork {
        imp: imp_of,
        rows: i.rows,
        hidden: i.hidden,
        experts: i.experts,
        b: Buffers::new(dev, i)?,
    };
    // The fused kernel alone, and the chain's check, read the tiny GEMM's logits: computed
    // here, outside the timed work.
    if matches!(work.imp, Imp::Fused(_) | Imp::Chain(_)) {
        let b = &work.b;
        tiny_gemm::enqueue(
            &tiny,
            &b.hidden16,
            &b.gate16,
            &b.logits,
            i.rows,
            i.hidden,
            i.experts,
        )
        .map_err(err)?;
    }
    work.enqueue()?;
    check(dev, i, imp, &work)?;
    Ok(work)
}

/// Checks what `work` computed on its first run.
fn check(dev: &'static Device, i: &Input, imp: &str, work: &RouterWork) -> Result<(), String> {
    let e = |e: moe_kernels::KernelError| e.to_string();
    let logits = match &work.imp {
        Imp::Pair(pair) => pair.logits().to_vec().map_err(e)?,
        _ => work.b.logits.to_vec().map_err(e)?,
    };
    i.check_logits(imp, &logits)?;
    if matches!(work.imp, Imp::TinyGemm(..) | Imp::Blas(_)) {
        return Ok(());
    }
    let got = work.b.routing(i.rows, i.config.k)?;
    i.check_routing(imp, &logits, &got)?;
    if imp.starts_with("pair") {
        // The pair's outputs are the fused kernel's bits on the tiny GEMM's logits.
        let alone = ch05_fused_router::route_logits_fused(
            dev,
            &i.config,
            i.rows,
            i.experts,
            &logits,
            i.bias.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        let bits = |r: &Routing| r.weights.iter().map(|w| w.to_bits()).collect::<Vec<_>>();
        if alone.ids != got.ids || bits(&alone) != bits(&got) {
            return Err(format!(
                "{} pair rows {}: not the fused kernel's bits on its own logits",
                i.shape, i.rows
            ));
        }
    }
    Ok(())
}

/// The measured cases: every implementation at every input; the pair with its per-kernel
/// breakdown.
fn cases(rows: &[usize]) -> Vec<Case> {
    let mut v = Vec::new();
    for s in &SHAPES {
        for imp in impls() {
            for &t in rows {
                let (read, written) = floor_bytes(s, t, imp);
                let flops = if imp.starts_with("fused_router") {
                    0.0
                } else {
                    2.0 * (t * s.hidden * s.experts) as f64
                };
                let shape = s.name;
                v.push(Case {
                    chapter: "ch05",
                    shape,
                    imp,
                    rows: t,
                    bytes: read + written,
                    read_bytes: read,
                    flops,
                    steps: imp == "pair",
                    build: Box::new(move |dev: &'static Device| {
                        let s = SHAPES.iter().find(|s| s.name == shape).expect("a shape");
                        Ok(Box::new(build(dev, &Input::new(s, t), imp)?) as Box<dyn Work>)
                    }),
                });
            }
        }
    }
    v
}

pub fn run(args: &GpuArgs) -> Result<(), String> {
    let quick = args.quick || crate::cases::quick_from_env();
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    match dev.kind() {
        BackendKind::Cuda => gpu(dev, args, quick),
        BackendKind::Emu if quick => emu_smoke(dev),
        BackendKind::Emu => Err(format!(
            "bench ch05 measures on the GPU, and the backend is the emulator ({why}); \
             --quick (or MOE_BENCH_QUICK=1) runs a smoke test of the same path on the emulator"
        )),
    }
}

fn gpu(dev: &'static Device, args: &GpuArgs, quick: bool) -> Result<(), String> {
    let session = Session::start(dev, quick)?;
    eprintln!("{}", session.describe());
    let cases = cases(&ROWS);
    let (rows, steps) = session.run_all("ch05", "rows", &cases, args.peers.as_deref())?;
    let out = &args.out_dir;
    crate::common::write(&out.join("ch05.csv"), &csv(&rows))?;
    crate::common::write(&out.join("ch05_steps.csv"), &steps_csv(&steps))?;
    crate::common::write(&out.join("ch05_ceilings.csv"), &session.ceilings_csv())?;
    print!(
        "{}",
        summary(
            &rows,
            &SummaryLayout {
                shape_w: 20,
                rows_name: "rows",
                rows_w: 5,
                imp_w: 13,
                tflops_digits: 2,
            }
        )
    );
    // The targets from the numbers as written (three decimals), the ones the book's facts are
    // made from, so that the log and the book round a ratio the same way.
    let written = moe_tools::bench_row::parse_csv(&csv(&rows), "ch05.csv")?;
    print!("{}", targets(&written));
    println!(
        "wrote ch05.csv, ch05_steps.csv and ch05_ceilings.csv in {}{}",
        out.display(),
        if quick {
            " (--quick: not numbers to publish)"
        } else {
            ""
        }
    );
    Ok(())
}

/// The issue's targets, read off the rows (printed, not enforced: the numbers are the result
/// either way): the tiny GEMM within 1.05× of the router's floor probe at 1 row; the pair at
/// most 1.4× of it at 1 row; the fused router alone at 8192 rows of the GLM-like shape within
/// 2× of its own probe (a cold read of its logits); the pair at least 3× faster than chapter 1's
/// chain at every row count up to 96.
pub fn targets(rows: &[BenchRow]) -> String {
    let cold = |shape: &str, t: u64, imp: &str| {
        rows.iter()
            .find(|r| r.shape == shape && r.rows == t && r.imp == imp)
            .map(|r| r.cold_median_us)
    };
    // A case's floor probe: the fastest probe that read its input bytes, as the book takes it.
    let probe_of = |shape: &str, t: u64, imp: &str| {
        let s = SHAPES.iter().find(|s| s.name == shape)?;
        fastest_probe(rows, shape, t, floor_bytes(s, t as usize, imp).0)
    };
    let mut s = String::new();
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    for sh in SHAPES {
        let n = sh.name;
        if let (Some(g), Some(p), Some(f)) = (
            cold(n, 1, "tiny_gemm"),
            cold(n, 1, "pair"),
            probe_of(n, 1, "pair"),
        ) {
            s += &format!(
                "bench ch05: {n}: 1 row: tiny GEMM {:.2}× the floor probe (target ≤ {TINY_OVER_PROBE_MAX}: {}), pair {:.2}× (target ≤ {PAIR_OVER_PROBE_MAX}: {})\n",
                g / f,
                verdict(g / f <= TINY_OVER_PROBE_MAX),
                p / f,
                verdict(p / f <= PAIR_OVER_PROBE_MAX)
            );
        }
        let worst = ROWS
            .iter()
            .filter(|&&t| t <= 96)
            .filter_map(|&t| Some(cold(n, t as u64, "chain")? / cold(n, t as u64, "pair")?))
            .fold(f64::INFINITY, f64::min);
        if worst.is_finite() {
            s += &format!(
                "bench ch05: {n}: the pair at least {CHAIN_OVER_PAIR_MIN}× faster than the chain up to 96 rows (cold): worst {worst:.2}×: {}\n",
                verdict(worst >= CHAIN_OVER_PAIR_MIN)
            );
        }
    }
    let glm = SHAPES[0].name;
    if let (Some(f), Some(p)) = (
        cold(glm, 8192, "fused_router"),
        probe_of(glm, 8192, "fused_router"),
    ) {
        s += &format!(
            "bench ch05: {glm}: fused router alone at 8192 rows {:.2}× a cold read of its logits (target ≤ {FUSED_OVER_LOGITS_MAX}: {})\n",
            f / p,
            verdict(f / p <= FUSED_OVER_LOGITS_MAX)
        );
    }
    s
}

/// Every case built and checked on the emulator at [`EMU_ROWS`], exactly as the GPU run builds
/// and checks it, and timed by wall clock. Writes nothing: these are not GPU numbers.
fn emu_smoke(dev: &'static Device) -> Result<(), String> {
    eprintln!(
        "bench ch05 --quick on the emulator ({}): a smoke test of the GPU path at {} rows; nothing is written",
        dev.describe(),
        EMU_ROWS.map(|t| t.to_string()).join(", ")
    );
    println!(
        "{:<20} {:>5} {:<13} {:>12}",
        "shape", "rows", "impl", "emu ms/call"
    );
    for case in cases(&EMU_ROWS) {
        // The same boxed build the GPU runner measures, so its closure is exercised too.
        let work = (case.build)(dev)?;
        let t = Instant::now();
        work.enqueue()?;
        dev.synchronize().map_err(|e| e.to_string())?;
        println!(
            "{:<20} {:>5} {:<13} {:>12.1}",
            case.shape,
            case.rows,
            case.imp,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    println!("bench ch05 --quick: every implementation ran on the emulator and matches the oracle");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{peer_rows, Ceilings};

    #[test]
    fn the_gpu_path_runs_on_the_emulator() {
        emu_smoke(Device::emu()).unwrap();
    }

    /// The targets as the bench prints them from the committed CSV carry the ratios the book
    /// quotes (the facts file, generated from the same CSV and checked by `tools/plot --check`),
    /// rounded the same way.
    #[test]
    fn targets_from_the_committed_csv_are_the_books_ratios() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let rows =
            moe_tools::bench_row::parse_csv(&read("bench/results/h200/ch05.csv"), "ch05").unwrap();
        let printed = targets(&rows);
        let facts = read("book/src/figures/ch05-facts.md");
        let fact = |name: &str| {
            let start = format!("ANCHOR: {name}\n");
            let at = facts
                .find(&start)
                .unwrap_or_else(|| panic!("no fact {name}"))
                + start.len();
            facts[at..].lines().next().unwrap().to_string()
        };
        for (shape, s) in [("glm", SHAPES[0].name), ("qwen3", SHAPES[1].name)] {
            for want in [
                format!(
                    "{s}: 1 row: tiny GEMM {}×",
                    fact(&format!("{shape}_1_tiny_over_probe"))
                ),
                format!(
                    "pair {}× (target",
                    fact(&format!("{shape}_1_pair_over_probe"))
                ),
                format!("worst {}×", fact(&format!("{shape}_chain_over_pair_min"))),
            ] {
                assert!(printed.contains(&want), "{want:?} not in:\n{printed}");
            }
        }
        let want = format!("8192 rows {}×", fact("glm_8192_fused_over_logits_probe"));
        assert!(printed.contains(&want), "{want:?} not in:\n{printed}");
    }

    #[test]
    fn floors_and_peers() {
        let cases = cases(&[1, 6]);
        assert_eq!(cases.len(), SHAPES.len() * impls().count() * 2);
        // Every line of the book's table is measured here but the peer's (which is one of them).
        assert_eq!(impls().count() + 1, moe_tools::figures::ch05::IMPLS.len());
        // The router reads the bf16 gate weight (288 × 4096 × 2 bytes), one hidden row and the
        // bias, and writes 8 ids and 8 weights.
        let glm = &SHAPES[0];
        assert_eq!(
            floor_bytes(glm, 1, "pair"),
            ((2 * (4096 + 288 * 4096) + 4 * 288) as f64, 64.0)
        );
        assert_eq!(
            floor_bytes(glm, 1, "fused_router"),
            ((4 * 288 + 4 * 288) as f64, 64.0)
        );
        let ceilings = Ceilings {
            launch_us: 2.0,
            copy_gbs: 4000.0,
            bf16_tflops: 600.0,
        };
        let text = "chapter,shape,impl,rows,launches,device,cold_us,warm_us\n\
                    ch05,glm_h4096_e288_k8,torch_5line,6,9,H200,30 10 20,5 6\n";
        let rows = peer_rows(text, "s.csv", &cases, &ceilings).unwrap();
        let pair = cases
            .iter()
            .find(|c| c.imp == "pair" && c.rows == 6 && c.shape == SHAPES[0].name)
            .unwrap();
        // The peer's floor is the pair's: the router's bytes.
        assert_eq!(rows[0].floor_us, ceilings.floor_us(pair.bytes, pair.flops));
        assert_eq!(rows[0].bytes, pair.bytes);
        assert_eq!(rows[0].cold_median_us, 20.0);
    }

    #[test]
    fn the_engines_peer_measures_at_the_benchs_rows() {
        // tools/peers/engines_router.py keeps its own copy of ROWS: the same list.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../peers/engines_router.py");
        let py = std::fs::read_to_string(path).unwrap();
        let line = py.lines().find(|l| l.starts_with("ROWS = [")).unwrap();
        let theirs: Vec<usize> = line["ROWS = [".len()..line.len() - 1]
            .split(", ")
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(theirs, ROWS);
        // Every one of its rows finds its case, the powers of two from 128 to 4096 among them.
        let cases = cases(&ROWS);
        let ceilings = Ceilings {
            launch_us: 2.0,
            copy_gbs: 4000.0,
            bf16_tflops: 600.0,
        };
        let head = "chapter,shape,impl,rows,launches,device,cold_us,warm_us\n";
        let line =
            |t: usize| format!("ch05,qwen3_h2048_e128_k8,engines_router,{t},2,H200,9 11 10,8\n");
        let text: String = std::iter::once(head.to_string())
            .chain(ROWS.iter().map(|&t| line(t)))
            .collect();
        let rows = peer_rows(&text, "e.csv", &cases, &ceilings).unwrap();
        assert_eq!(rows.len(), ROWS.len());
        assert!([128, 256, 512, 1024, 2048, 4096]
            .iter()
            .all(|t| ROWS.contains(t)));
        // A row count the bench does not measure has no case: refused.
        assert!(peer_rows(&(head.to_string() + &line(100)), "e.csv", &cases, &ceilings).is_err());
    }

    #[test]
    fn targets_read_the_rows() {
        let row = |imp: &str, t: u64, cold: f64, bytes: f64| BenchRow {
            samples: 3,
            bytes,
            ..BenchRow::flat("ch05", SHAPES[0].name, imp, t, cold)
        };
        let glm = &SHAPES[0];
        let rows = vec![
            row("tiny_gemm", 1, 2.6, 100.0),
            row("pair", 1, 4.0, 100.0),
            row("floor_probe", 1, 2.0, floor_bytes(glm, 1, "tiny_gemm").0),
            row("floor_probe", 1, 2.7, floor_bytes(glm, 1, "pair").0),
            row("floor_probe", 1, 2.5, floor_bytes(glm, 1, "pair").0),
            // A third case reading the pair's bytes: its probe is a repeat; the fastest counts.
            row("floor_probe", 1, 2.6, floor_bytes(glm, 1, "pair").0),
            row("chain", 1, 16.0, 100.0),
            row("fused_router", 8192, 9.0, 50.0),
            row(
                "floor_probe",
                8192,
                5.0,
                floor_bytes(glm, 8192, "fused_router").0,
            ),
        ];
        let s = targets(&rows);
        // The tiny GEMM against the router's floor (its gate weight and hidden rows, and the bias).
        assert!(
            s.contains("tiny GEMM 1.04× the floor probe (target ≤ 1.05: met)"),
            "{s}"
        );
        assert!(s.contains("pair 1.60× (target ≤ 1.4: MISSED)"), "{s}");
        assert!(s.contains("worst 4.00×: met"), "{s}");
        assert!(
            s.contains("1.80× a cold read of its logits (target ≤ 2: met)"),
            "{s}"
        );
    }
}
