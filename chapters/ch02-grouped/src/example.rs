//! The chapter's main, as a library: `examples/ch02/` parses the command line and calls [`run`].
//!
//! Without a checkpoint it builds two small layers (Qwen3-like, and DeepSeek-V3-like with groups,
//! a selection bias, routed scaling and a shared expert), runs each through the three
//! implementations in bf16 and f32, and prints how the pairs were grouped, what the device
//! launched, and each implementation's error against the literal loop. With `--checkpoint` it
//! loads a real MoE layer instead and runs the reader's hidden states through it.
//!
//! stdout is the same on every backend except the measured errors, printed in `⟨ ⟩`: cuBLAS,
//! the emulator's reference GEMM and candle sum in different orders, so those numbers depend on
//! the machine. The snapshot test, `tools/steps check` and the GPU run compare every character
//! outside `⟨ ⟩` (see `moe_tools::snap::same_output`); the tests check the numbers inside
//! against the tolerances of [`crate::compare`].

use crate::checkpoint::{self, CheckpointError, LoadOptions};
use crate::compare::{check_output, output_error, Tolerance};
use crate::config::{Dtype, MoeConfig, SharedExpert};
use crate::device::GroupedDevice;
use crate::error::MoeError;
use crate::grouped::GroupedCpu;
use crate::io;
use crate::layer::MoeLayer;
use crate::literal::LiteralLayer;
use crate::plan::GroupPlan;
use crate::weights::MoeWeights;
use ch01_router::inputs::patterned;
use ch01_router::{Grouping, RouterConfig};
use moe_kernels::{record_launches, Device};
use std::fmt;
use std::io::Write;
use std::path::PathBuf;

/// What `--checkpoint` asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointOptions {
    pub dir: PathBuf,
    /// `hidden` [T, H] f32 or bf16; without it, 4 patterned tokens.
    pub input: Option<PathBuf>,
    /// Where to write `out` [T, H] f32.
    pub output: Option<PathBuf>,
    pub dtype: Dtype,
    /// Which MoE layer (default: the first).
    pub layer: Option<usize>,
    /// Also run the f64 literal loop and print the error against it.
    pub check: bool,
}

/// Why a `--checkpoint` run ([`run_checkpoint_with`]) stopped, typed: chapter 4's example
/// returns it as is; this chapter's [`run`] returns its text. Every variant names the file, the
/// field or the check at fault.
#[derive(Clone, Debug, PartialEq)]
pub enum ExampleError {
    /// The layer refused its weights or its input, or the device failed.
    Layer(MoeError),
    /// The checkpoint, or an `--input` or `--output` file, could not be used.
    Checkpoint(CheckpointError),
    /// `--input` names no file.
    NoInput(PathBuf),
    /// `--input` names a folder.
    InputIsFolder(PathBuf),
    /// `--input`'s `hidden` has another width than the layer's hidden size.
    HiddenSize {
        path: PathBuf,
        found: usize,
        expected: usize,
    },
    /// An output outside its tolerance, or runs that must give the same bits and do not.
    Check(String),
    /// stdout could not be written.
    Stdout(String),
}

impl fmt::Display for ExampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExampleError::Layer(e) => write!(f, "{e}"),
            ExampleError::Checkpoint(e) => write!(f, "{e}"),
            ExampleError::InputIsFolder(path) => {
                write!(f, "{}: is a folder, not a file (--input)", path.display())
            }
            ExampleError::NoInput(path) => write!(f, "{}: no such file (--input)", path.display()),
            ExampleError::HiddenSize {
                path,
                found,
                expected,
            } => write!(
                f,
                "{}: `hidden` has {found} columns, but the layer's hidden size is {expected}",
                path.display()
            ),
            ExampleError::Check(what) => write!(f, "{what}"),
            ExampleError::Stdout(why) => write!(f, "stdout: {why}"),
        }
    }
}

impl std::error::Error for ExampleError {}

impl From<MoeError> for ExampleError {
    fn from(e: MoeError) -> Self {
        ExampleError::Layer(e)
    }
}
impl From<moe_kernels::KernelError> for ExampleError {
    fn from(e: moe_kernels::KernelError) -> Self {
        ExampleError::Layer(MoeError::Kernel(e))
    }
}
impl From<CheckpointError> for ExampleError {
    fn from(e: CheckpointError) -> Self {
        ExampleError::Checkpoint(e)
    }
}

// ANCHOR: row_error
/// A `--checkpoint` run's check against the f64 literal loop, row by row: for each token, the
/// norm of the difference over the norm of the literal loop's row, `‖got_t − want_t‖₂ /
/// ‖want_t‖₂`; the worst row is reported. Each row is its own measurement, so the number does not
/// grow with the token count, as the largest element over the output's rms does (2.2e-2 at 50
/// tokens, 5.6e-2 at 20,000, of a layer whose every row is as accurate as the next).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowError {
    /// The worst row's `‖got − want‖ / ‖want‖` (0 where both are 0; infinite where only `want`
    /// is).
    pub worst: f64,
    /// Which row.
    pub row: usize,
    /// Rows compared: those finite on both sides.
    pub rows: usize,
}

/// The largest accepted [`RowError::worst`] for a layer computing in `dtype`.
///
/// Derivation, for bf16 (unit roundoff u = 2⁻⁸: 8 significant bits, rounded to nearest). The
/// literal loop takes the same bf16 inputs and weights, so the difference is what the layer
/// rounds on the way (chapter 2's list, [`crate::compare`]): each expert's `gate | up` and its
/// activation `a_j = silu(g_j)·u_j`, to bf16. One `a_j` thus carries at most three roundings:
/// `u_j`'s (relative u), `a_j`'s own (u), and `g_j`'s passed through silu, amplified by
/// `g·silu'(g)/silu(g) = 1 + g(1 − σ(g)) ≤ 1.28` where `g ≥ 0` (where `g < 0`, `|silu(g)| ≤ 0.28`
/// and `a_j` is small): `|ε_j| ≤ 3.3u`. The f32 sums add `√n·2⁻²⁴`, negligible. A row's
/// difference is `Σ_j ε_j a_j w2[:, j]` over its experts' columns (each scaled by its routing
/// weight); the ε_j are independent roundings of either sign, so its norm is about
/// `rms(ε)·(Σ_j a_j² ‖w2[:, j]‖²)^½`, and that root is `‖want_t‖` where the columns'
/// contributions do not cancel systematically (their directions are unrelated, in trained and
/// patterned weights alike). Hence `worst ≤ 3.3u = 1.3e-2`, whatever T; the tolerance is 4u = 2⁻⁶
/// (1.6e-2). Measured on the Hugging Face fixtures through chapter 2's CPU grouped loop
/// (`tests/ch02_example.rs`): 4.8e-3 to 7.2e-3 at 50 tokens, at most 9.8e-3 at 20,000 (their I
/// is 16 and k at most 4, so a row averages few roundings and the worst of many rows sits in
/// the tail; a real model's rows average thousands). An error the check must catch, one
/// expert's weights off by one place or a row 5% off, is well above it.
///
/// For f32 (u = 2⁻²⁴), the only roundings are the sums' (H terms, then I): `√(H + I)·u ≈ 6e-6`
/// at DeepSeek-V3's sizes (H 7168, I 2048); the tolerance is 2e-5.
pub fn row_tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => (2f64).powi(-6),
        Dtype::F32 => 2e-5,
    }
}

/// [`RowError`] of `got` against `want`, both `[T, h]`. Rows with a NaN or an infinity on either
/// side are left out (the caller counts where the two sides differ there,
/// [`crate::compare::output_error`]'s `nan`).
pub fn row_error(want: &[f32], got: &[f32], h: usize) -> RowError {
    assert_eq!(want.len(), got.len(), "outputs of different lengths");
    let mut e = RowError {
        worst: 0.0,
        row: 0,
        rows: 0,
    };
    for (t, (w, g)) in want.chunks(h.max(1)).zip(got.chunks(h.max(1))).enumerate() {
        if !w.iter().chain(g).all(|v| v.is_finite()) {
            continue;
        }
        e.rows += 1;
        let (mut diff, mut norm) = (0f64, 0f64);
        for (&w, &g) in w.iter().zip(g) {
            diff += (g as f64 - w as f64).powi(2);
            norm += (w as f64).powi(2);
        }
        let r = if diff == 0.0 {
            0.0
        } else {
            (diff / norm).sqrt() // infinite where `want`'s row is 0 and `got`'s is not
        };
        if r > e.worst {
            (e.worst, e.row) = (r, t);
        }
    }
    e
}

/// `Ok(error)` when every finite row of `got` is within [`row_tolerance`] of `want`'s and the
/// two have their NaNs and infinities in the same places; otherwise a message naming `what`,
/// the row and the tolerance.
pub fn check_rows(
    what: &str,
    want: &[f32],
    got: &[f32],
    h: usize,
    dtype: Dtype,
) -> Result<RowError, String> {
    if want.len() != got.len() {
        return Err(format!(
            "{what}: {} outputs, expected {}",
            got.len(),
            want.len()
        ));
    }
    let nan = output_error(want, got).nan;
    if nan > 0 {
        return Err(format!(
            "{what}: {nan} outputs are NaN or infinite where the expected are finite, or the reverse"
        ));
    }
    let e = row_error(want, got, h);
    let tol = row_tolerance(dtype);
    if e.worst > tol {
        return Err(format!(
            "{what}: row {} differs from the literal loop's by {:.3e} of its norm, above the \
             tolerance {tol:.1e} ({dtype})",
            e.row, e.worst
        ));
    }
    Ok(e)
}
// ANCHOR_END: row_error

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: std::fmt::Arguments) -> Result<(), String> {
    out.write_fmt(s).map_err(|e| e.to_string())
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs the example: the tour, or (with `checkpoint`) a reader's checkpoint.
pub fn run(
    checkpoint: Option<&CheckpointOptions>,
    device: &'static Device,
    out: Out,
) -> Result<(), String> {
    match checkpoint {
        Some(opts) => run_checkpoint(opts, device, out),
        None => tour(device, out),
    }
}

/// The tour's two layers.
pub fn tour_layers() -> Vec<(&'static str, MoeWeights)> {
    let qwen = MoeConfig {
        hidden: 256,
        intermediate: 128,
        experts: 16,
        router: RouterConfig::qwen3(4),
        shared: None,
    };
    let deepseek = MoeConfig {
        hidden: 256,
        intermediate: 96,
        experts: 32,
        router: RouterConfig {
            k: 4,
            grouping: Some(Grouping {
                n_group: 4,
                topk_group: 2,
            }),
            ..RouterConfig::deepseek_v3()
        },
        shared: Some(SharedExpert {
            intermediate: 96,
            gated: false,
        }),
    };
    vec![
        (
            "Qwen3-like: softmax, top-4 of 16",
            MoeWeights::patterned(&qwen, 21, 0.125, false),
        ),
        (
            "DeepSeek-V3-like: sigmoid + bias, 2 of 4 groups, top-4 of 32, scaling 2.5, a shared expert",
            MoeWeights::patterned(&deepseek, 22, 0.125, true),
        ),
    ]
}

/// `shared expert I 96`, `gated shared expert I 96` or `no shared expert`.
fn shared_text(s: Option<SharedExpert>) -> String {
    match s {
        None => "no shared expert".into(),
        Some(s) => format!(
            "{}shared expert I {}",
            if s.gated { "gated " } else { "" },
            s.intermediate
        ),
    }
}

/// `launched` as `1 gather + 9 GEMM + ...`, runs of the same launch counted.
fn launch_summary(launched: &[String]) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for l in launched {
        let short = match l.as_str() {
            "blas::linear" => "GEMM".to_string(),
            s => s
                .rsplit("::")
                .next()
                .unwrap_or(s)
                .trim_start_matches("ch02_")
                .to_string(),
        };
        match parts.last_mut() {
            Some((name, n)) if *name == short => *n += 1,
            _ => parts.push((short, 1)),
        }
    }
    let list: Vec<String> = parts.iter().map(|(n, c)| format!("{c} {n}")).collect();
    format!("{} = {} launches", list.join(" + "), launched.len())
}

// ANCHOR: tour
fn tour(device: &'static Device, out: Out) -> Result<(), String> {
    const TOKENS: usize = 6;
    say!(
        out,
        "Chapter 2: experts, the layer, and the loop grouped by expert"
    );
    say!(out, "");
    for (title, weights) in tour_layers() {
        let c = &weights.config;
        say!(out, "== {title}");
        say!(
            out,
            "H {} I {} E {} k {}; w13 [E, 2I, H] and w2 [E, H, I] hold {:.1} M parameters",
            c.hidden,
            c.intermediate,
            c.experts,
            c.router.k,
            (c.w13_len() + c.w2_len()) as f64 / 1e6
        );
        let hidden = patterned(TOKENS * c.hidden, 23, 1.0);
        for dtype in [Dtype::Bf16, Dtype::F32] {
            let literal = LiteralLayer::new(&weights, dtype).map_err(err)?;
            let oracle = literal.forward(&hidden).map_err(err)?;
            let plan = GroupPlan::new(&oracle.routing, c.experts).map_err(err)?;
            if dtype == Dtype::Bf16 {
                for t in 0..2 {
                    let ids: Vec<String> = oracle
                        .routing
                        .row_ids(t)
                        .iter()
                        .map(|e| e.to_string())
                        .collect();
                    let ws: Vec<String> = oracle
                        .routing
                        .row_weights(t)
                        .iter()
                        .map(|w| format!("{w:.3}"))
                        .collect();
                    say!(
                        out,
                        "token {t}: experts {} weights {}",
                        ids.join(" "),
                        ws.join(" ")
                    );
                }
                let runs: Vec<String> = plan
                    .active_experts()
                    .iter()
                    .map(|&e| format!("{e}:{}", plan.count(e)))
                    .collect();
                say!(
                    out,
                    "{} pairs grouped by expert (expert:pairs): {}",
                    plan.pairs(),
                    runs.join(" ")
                );
            }
            let cpu = GroupedCpu::new(&weights, dtype).map_err(err)?;
            let dev = GroupedDevice::new(device, &weights, dtype).map_err(err)?;
            let ws = dev.workspace(&oracle.routing).map_err(err)?;
            let x = device.upload(&hidden).map_err(err)?;
            let y = device.alloc::<f32>(hidden.len()).map_err(err)?;
            let (r, launched) = record_launches(|| dev.enqueue_experts(&ws, &x, &y));
            r.map_err(err)?;
            let got_dev = y.to_vec().map_err(err)?;
            let got_cpu = cpu.experts(&hidden, &oracle.routing).map_err(err)?;
            let tol = Tolerance::vs_oracle(dtype);
            let e_cpu = check_output("grouped on the CPU", &oracle.out, &got_cpu, tol)?;
            let e_dev = check_output("grouped on the device", &oracle.out, &got_dev, tol)?;
            say!(
                out,
                "{dtype}: device launches {}",
                launch_summary(&launched)
            );
            say!(
                out,
                "{dtype}: error against the literal loop, max |diff| / rms: grouped CPU ⟨{:.1e}⟩, grouped device ⟨{:.1e}⟩ (tolerance {:.0e})",
                e_cpu.relative,
                e_dev.relative,
                tol.0
            );
        }
        say!(out, "");
    }
    say!(
        out,
        "Numbers in ⟨…⟩ are measured on this machine: the GEMMs sum in another order on each backend, so they differ in the last digits (see --help)."
    );
    say!(
        out,
        "Chapter 4 replaces the per-expert GEMMs with one kernel that serves every active expert."
    );
    Ok(())
}
// ANCHOR_END: tour

fn run_checkpoint(
    opts: &CheckpointOptions,
    device: &'static Device,
    out: Out,
) -> Result<(), String> {
    run_checkpoint_with(
        opts,
        out,
        "the device layer",
        |w| GroupedDevice::new(device, w, opts.dtype),
        |_, rows, launched| {
            Ok(format!(
                "{rows} tokens in {}: {}",
                opts.dtype,
                launch_summary(launched)
            ))
        },
    )
    .map_err(|e| match e {
        ExampleError::Stdout(why) => why,
        e => e.to_string(),
    })
}

/// A `--checkpoint` run of a device layer, this chapter's or a later one's: the files it reads
/// and writes checked, the layer loaded and described, the reader's hidden states (or 4
/// patterned tokens) run through `new_layer`'s layer, its routing of the first tokens printed,
/// its output written, and (with `check`) its error against the f64 literal loop on the same
/// routing. `ran` says what the layer did for `rows` tokens, from the launches it made
/// (`launched`); `what` names the layer in a failed check.
pub fn run_checkpoint_with<L: MoeLayer>(
    opts: &CheckpointOptions,
    out: &mut dyn Write,
    what: &str,
    new_layer: impl FnOnce(&MoeWeights) -> Result<L, MoeError>,
    ran: impl FnOnce(&L, usize, &[String]) -> Result<String, MoeError>,
) -> Result<(), ExampleError> {
    let mut say =
        |line: &str| writeln!(out, "{line}").map_err(|e| ExampleError::Stdout(e.to_string()));
    // The files the run reads and writes, before the (possibly long) load.
    if let Some(path) = &opts.output {
        io::check_output_path(path, opts.input.as_deref(), &opts.dir)?;
    }
    if let Some(path) = &opts.input {
        if !path.is_file() {
            return Err(if path.is_dir() {
                ExampleError::InputIsFolder(path.clone())
            } else {
                ExampleError::NoInput(path.clone())
            });
        }
    }
    let loaded = checkpoint::load(
        &opts.dir,
        &LoadOptions {
            layer: opts.layer,
            progress: true,
        },
    )?;
    let w = &loaded.weights;
    let c = &w.config;
    say(&format!(
        "{}: layer {}, {} ({}, {} weights): H {} I {} E {} k {}, {}",
        opts.dir.display(),
        loaded.layer,
        loaded.family,
        match loaded.storage {
            checkpoint::Storage::PerExpert => "one tensor per expert",
            checkpoint::Storage::Fused => "fused experts",
        },
        loaded.file_dtype,
        c.hidden,
        c.intermediate,
        c.experts,
        c.router.k,
        shared_text(c.shared)
    ))?;
    let (hidden, rows) = match &opts.input {
        Some(path) => {
            let (hidden, rows, h) = io::read_hidden(path)?;
            if h != c.hidden {
                return Err(ExampleError::HiddenSize {
                    path: path.clone(),
                    found: h,
                    expected: c.hidden,
                });
            }
            (hidden, rows)
        }
        None => (patterned(4 * c.hidden, 23, 1.0), 4),
    };
    let layer = new_layer(w)?;
    let (fwd, launched) = record_launches(|| layer.forward(&hidden));
    let fwd = fwd?;
    if rows == 0 {
        say("no tokens in the input: nothing to run")?;
    } else {
        say(&ran(&layer, rows, &launched)?)?;
    }
    if let Some(note) = non_finite_outputs(&fwd.out, &hidden) {
        say(&note)?;
    }
    for t in 0..rows.min(4) {
        let ids: Vec<String> = fwd
            .routing
            .row_ids(t)
            .iter()
            .map(|e| e.to_string())
            .collect();
        say(&format!("token {t}: experts {}", ids.join(" ")))?;
    }
    // The output first: a check that fails must not cost the reader the output.
    if let Some(path) = &opts.output {
        io::write_out(path, &fwd.out, rows, c.hidden)?;
        say(&format!(
            "wrote `out` [{rows}, {}] f32 to {}",
            c.hidden,
            path.display()
        ))?;
    }
    if opts.check && rows == 0 {
        say("nothing to check: no outputs")?;
    } else if opts.check {
        // The f64 literal loop on the same routing, with the weights rounded as the layer holds
        // them: only one more host copy of the layer (a device layer keeps none).
        let dtype = layer.dtype();
        let lit = LiteralLayer::new(w, dtype)?;
        let want = lit.experts(&hidden, &fwd.routing)?;
        say(&literal_error_line(&want, &fwd.out, c.hidden, dtype))?;
        check_rows(what, &want, &fwd.out, c.hidden, dtype).map_err(|m| {
            let written = if opts.output.is_some() {
                " (the output was written)"
            } else {
                ""
            };
            ExampleError::Check(format!("{m}{written}"))
        })?;
    }
    Ok(())
}

/// The line a checkpoint run prints for its output against the literal loop's `want`: the worst
/// row's error over its norm ([`row_error`]), and with non-finite outputs the finite rows it was
/// taken over ([`check_rows`] then fails if the two sides are non-finite in different places).
/// Chapters 4 and 6 print the same line.
pub fn literal_error_line(want: &[f32], got: &[f32], h: usize, dtype: Dtype) -> String {
    let e = row_error(want, got, h);
    let rows = got.len() / h.max(1);
    let over = if e.rows < rows {
        format!(" over the {} finite rows", e.rows)
    } else {
        String::new()
    };
    format!(
        "error against the literal loop on the same routing: ⟨{:.1e}⟩ of the row's norm at the worst row{over} (tolerance {:.1e})",
        e.worst,
        row_tolerance(dtype)
    )
}

/// What a checkpoint run says when outputs are NaN or infinite, and why: the weights were
/// checked finite at load, so either the input holds non-finite values, or it is finite and the
/// layer's arithmetic overflowed (hidden states near f32's largest value); `None` when every
/// output is finite.
pub fn non_finite_outputs(out: &[f32], hidden: &[f32]) -> Option<String> {
    let bad = out.iter().filter(|v| !v.is_finite()).count();
    if bad == 0 {
        return None;
    }
    let bad_in = hidden.iter().filter(|v| !v.is_finite()).count();
    Some(if bad_in > 0 {
        let values = if bad_in == 1 { "value" } else { "values" };
        format!("{bad} outputs are NaN or infinite: the input holds {bad_in} non-finite {values}")
    } else {
        let largest = hidden.iter().fold(0f32, |m, v| m.max(v.abs()));
        format!(
            "{bad} outputs are NaN or infinite: the input and the weights are finite, so the \
             layer's arithmetic overflowed (the largest |hidden| is {largest:e})"
        )
    })
}
