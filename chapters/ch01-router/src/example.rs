//! The chapter's main, as a library: `examples/ch01/` parses the command line and calls [`run`].
//!
//! Without an input file it walks through the router article's toy example on the CPU routers,
//! repeats it on the chain of plain kernels (on the GPU, or on the emulator without one), and
//! runs every named regime through the chain against the f64 oracle. With an input file it
//! routes the reader's own logits instead.
//!
//! Everything printed to stdout is the same on both backends (it is snapshotted and quoted in
//! the book); the line saying which backend ran goes to stderr.

use crate::chain::{route_logits_on_device, DeviceRouter, FiveLineChain, GateDtype, GateShape};
use crate::compare::{check_routing, Tolerance};
use crate::config::RouterConfig;
use crate::conformance::{check_every_regime, scoring_label};
use crate::literal::{LiteralRouter, RowDetail};
use crate::reference::ReferenceRouter;
use crate::regimes::RegimeInput;
use crate::routing::{Router, Routing};
use crate::{io, toy};
use moe_kernels::Device;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How to route a reader's file (the options of `--input`).
#[derive(Clone, Debug, PartialEq)]
pub struct FileOptions {
    pub config: RouterConfig,
    /// Round the bias to bf16 first, and count the rows that then pick another set of experts.
    pub bias_bf16: bool,
    /// How many rows to print.
    pub show: usize,
    /// Where to write `ids` and `weights`.
    pub output: Option<PathBuf>,
}

impl FileOptions {
    /// `--bias-bf16` needs a bias in the file (`has_bias`) to round: an error, not an option
    /// silently ignored. Chapter 5's file run asks the same.
    pub fn check_bias_bf16(&self, path: &Path, has_bias: bool) -> Result<(), String> {
        if self.bias_bf16 && !has_bias {
            return Err(format!(
                "--bias-bf16: {} has no `bias` to round",
                path.display()
            ));
        }
        Ok(())
    }
}

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: std::fmt::Arguments) -> Result<(), String> {
    out.write_fmt(s).map_err(|e| e.to_string())
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

fn list(v: impl IntoIterator<Item = String>) -> String {
    v.into_iter().collect::<Vec<_>>().join(" ")
}

fn ids_of(r: &Routing, row: usize) -> String {
    list(r.row_ids(row).iter().map(|e| e.to_string()))
}

fn weights_of(r: &Routing, row: usize) -> String {
    list(r.row_weights(row).iter().map(|w| format!("{w:.3}")))
}

/// Runs the example: the tour, or (with `input`) a reader's file, writing what it shows to
/// `out` and its notes ([`non_finite_note`]) to stderr.
pub fn run(
    input: Option<(&Path, &FileOptions)>,
    device: &'static Device,
    out: Out,
) -> Result<(), String> {
    run_with_notes(input, device, out, &mut std::io::stderr())
}

/// [`run`], with the notes written to `notes`.
pub fn run_with_notes(
    input: Option<(&Path, &FileOptions)>,
    device: &'static Device,
    out: Out,
    notes: Out,
) -> Result<(), String> {
    match input {
        Some((path, opts)) => route_file(opts, path, device, out, notes),
        None => tour(device, out),
    }
}

/// The note a file run prints on stderr when chapter 1's rule for non-finite logits fired:
/// `None` when every logit of `logits` [rows, experts] is finite. `from` says where the logits
/// came from (empty for a file of logits).
pub fn non_finite_note(logits: &[f32], experts: usize, from: &str) -> Option<String> {
    let rows = logits.len() / experts.max(1);
    let bad = logits.iter().filter(|x| !x.is_finite()).count();
    if bad == 0 {
        return None;
    }
    let bad_rows = logits
        .chunks(experts.max(1))
        .filter(|r| r.iter().any(|x| !x.is_finite()))
        .count();
    Some(format!(
        "note: {bad} of the {} logits, in {bad_rows} of the {rows} rows, are NaN or infinite{from}: \
         each scores 0 and ranks last, after every finite logit (chapter 1's rule for non-finite \
         logits)",
        logits.len()
    ))
}

// ANCHOR: toy_tour
fn toy_case(out: Out, title: &str, bias: Option<&[f32]>) -> Result<RowDetail, String> {
    let logits = toy::logits();
    let detail = LiteralRouter {
        config: toy::config(),
    }
    .route_rows(&logits, 1, 8, bias)
    .map_err(|e| e.to_string())?
    .remove(0);
    say!(out, "{title}");
    say!(
        out,
        "  rank keys: {}",
        list(detail.keys.iter().map(|k| format!("{k:.3}")))
    );
    say!(
        out,
        "  selected:  experts {} with weights {}",
        list(detail.ids.iter().map(|e| e.to_string())),
        list(detail.weights.iter().map(|w| format!("{w:.3}")))
    );
    if let Some(c) = &detail.cut {
        say!(
            out,
            "  the cut:   last selected expert {} ({:.3}), first rejected expert {} ({:.3}), gap {:.3}",
            c.last_selected.0,
            c.last_selected.1,
            c.first_rejected.0,
            c.first_rejected.1,
            c.gap
        );
    }
    Ok(detail)
}

fn tour(device: &'static Device, out: Out) -> Result<(), String> {
    say!(out, "Chapter 1: the reference router");
    say!(out, "");
    say!(
        out,
        "The router article's toy layer: 8 experts, k = 2, sigmoid scores, renormalised."
    );
    let logits = toy::logits();
    say!(
        out,
        "  logits:    {}",
        list(logits.iter().map(|x| format!("{x:.3}")))
    );
    let scores: Vec<f64> = logits
        .iter()
        .map(|&x| 1.0 / (1.0 + (-(x as f64)).exp()))
        .collect();
    say!(
        out,
        "  scores:    {}",
        list(scores.iter().map(|s| format!("{s:.3}")))
    );
    say!(out, "");
    let plain = toy_case(out, "(a) no bias: the rank key is the score", None)?;
    say!(out, "");
    let bias = toy::bias();
    say!(
        out,
        "  bias fp32: {}",
        list(bias.iter().map(|b| format!("{b:.3}")))
    );
    let fp32 = toy_case(
        out,
        "(b) with the selection bias in fp32: the key selects, the score weighs",
        Some(&bias),
    )?;
    say!(out, "");
    let bias16 = toy::bias_bf16();
    say!(
        out,
        "  bias bf16: {}",
        list(bias16.iter().map(|b| format!("{b:.3}")))
    );
    let bf16 = toy_case(
        out,
        "(c) the same bias stored in bf16: 8.03 becomes 8.000",
        Some(&bias16),
    )?;
    say!(out, "");
    // ANCHOR_END: toy_tour

    // The same three cases on the chain of plain kernels.
    let cases: [(Option<&[f32]>, &RowDetail); 3] =
        [(None, &plain), (Some(&bias), &fp32), (Some(&bias16), &bf16)];
    let mut worst = 0.0f64;
    for (b, want) in cases {
        let got = route_logits_on_device(device, &toy::config(), 1, 8, &logits, b)
            .map_err(|e| e.to_string())?;
        if got.row_ids(0) != &want.ids[..] {
            return Err(format!(
                "the kernel chain picked {:?}, the oracle {:?}",
                got.row_ids(0),
                want.ids
            ));
        }
        for (g, w) in got.row_weights(0).iter().zip(&want.weights) {
            worst = worst.max((*g as f64 - w).abs());
        }
    }
    say!(
        out,
        "The chain of plain kernels (kernels/ch01_router.cu) picks the same experts in (a), (b) and (c); \
         its weights are within {} of the f64 oracle.",
        if worst <= 1e-6 { "1e-6" } else { "1e-5 (MORE THAN 1e-6)" }
    );
    say!(out, "");

    // Every named regime through the chain, against the oracle.
    say!(out, "Every regime through the chain, against the f64 oracle (exact ids where the gap at the cut > 1e-5):");
    say!(
        out,
        "  {:<30} {:>5} {:>7} {:>3}  {:<19} {:>8}  {:>10}",
        "regime",
        "rows",
        "experts",
        "k",
        "scoring",
        "launches",
        "clear cuts"
    );
    // One check for every device router (conformance.rs); the chain's launch count is noted as
    // each regime's router is built.
    let built = std::cell::RefCell::new(Vec::new());
    let make = |dev: &'static Device, r: &RegimeInput| {
        let shape = GateShape {
            rows: r.rows,
            hidden: r.hidden,
            experts: r.experts,
        };
        let chain = FiveLineChain::new(dev, &r.config, shape, r.bias.as_deref())?;
        built.borrow_mut().push((
            r.experts,
            r.config.k,
            scoring_label(r),
            chain.launches_per_call(),
        ));
        Ok(Box::new(chain) as Box<dyn DeviceRouter>)
    };
    let results = check_every_regime(device, GateDtype::F32, &make, Tolerance::OWN_LOGITS)?;
    for (res, (experts, k, scoring, launches)) in results.iter().zip(built.borrow().iter()) {
        say!(
            out,
            "  {:<30} {:>5} {:>7} {:>3}  {:<19} {:>8}  {:>4} of {:<4} ok",
            res.name,
            res.rows,
            experts,
            k,
            scoring,
            launches,
            res.exact_rows,
            res.rows
        );
    }
    say!(out, "");
    say!(out, "Route your own logits: cargo run --example ch01 -- --input FILE.safetensors [--output OUT.safetensors] (see --help).");
    Ok(())
}

// ANCHOR: route_file
fn route_file(
    args: &FileOptions,
    path: &Path,
    device: &'static Device,
    out: Out,
    notes: Out,
) -> Result<(), String> {
    if let Some(o) = &args.output {
        if let Some(why) = io::output_problem(o, &[path]) {
            return Err(format!("--output {}: {why}", o.display()));
        }
    }
    let (logits, bias_fp32) = io::read_router_input(path).map_err(|e| e.to_string())?;
    args.check_bias_bf16(path, bias_fp32.is_some())?;
    let bias = match (&bias_fp32, args.bias_bf16) {
        (Some(b), true) => Some(
            b.to_dtype(candle_core::DType::BF16)
                .and_then(|b| b.to_dtype(candle_core::DType::F32))
                .map_err(|e| e.to_string())?,
        ),
        (b, _) => b.clone(),
    };
    let config = args.config.clone();
    let routing = ReferenceRouter {
        config: config.clone(),
    }
    .route(&logits, bias.as_ref())
    .map_err(|e| e.to_string())?;
    let (rows, experts) = logits.dims2().map_err(|e| e.to_string())?;
    let flat: Vec<f32> = logits
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .map_err(|e| e.to_string())?;
    if let Some(note) = non_finite_note(&flat, experts, "") {
        say!(notes, "{note}");
    }
    say!(
        out,
        "{}: {rows} rows of {experts} logits{}",
        path.display(),
        if bias.is_some() { ", with a bias" } else { "" }
    );
    say!(out, "router: {config}");
    for r in 0..rows.min(args.show) {
        say!(
            out,
            "  row {r}: experts {} weights {}",
            ids_of(&routing, r),
            weights_of(&routing, r)
        );
    }
    if rows > args.show {
        say!(out, "  ... {} more rows", rows - args.show);
    }
    if let (true, Some(b32)) = (args.bias_bf16, &bias_fp32) {
        // The same logits with the bias as stored (fp32): how many rows pick another set?
        let full = ReferenceRouter {
            config: config.clone(),
        }
        .route(&logits, Some(b32))
        .map_err(|e| e.to_string())?;
        let changed = (0..rows)
            .filter(|&r| {
                let (mut a, mut b) = (full.row_ids(r).to_vec(), routing.row_ids(r).to_vec());
                a.sort_unstable();
                b.sort_unstable();
                a != b
            })
            .count();
        let verb = if changed == 1 { "selects" } else { "select" };
        say!(out, "with the bias rounded to bf16, {changed} of {rows} rows {verb} a different set of experts than with the fp32 bias");
    }

    // The same logits through the kernel chain, checked against the f64 oracle.
    let flat: Vec<f32> = logits
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .map_err(|e| e.to_string())?;
    let bias_v: Option<Vec<f32>> = bias
        .as_ref()
        .map(|b| b.flatten_all().and_then(|t| t.to_vec1()))
        .transpose()
        .map_err(|e| e.to_string())?;
    let on_device =
        route_logits_on_device(device, &config, rows, experts, &flat, bias_v.as_deref())
            .map_err(|e| e.to_string())?;
    let oracle = LiteralRouter { config }
        .route_rows(&flat, rows, experts, bias_v.as_deref())
        .map_err(|e| e.to_string())?;
    let exact_ref = check_routing("reference", &oracle, &routing, Tolerance::SAME_LOGITS)?;
    let exact_dev = check_routing("kernel chain", &oracle, &on_device, Tolerance::SAME_LOGITS)?;
    let gaps: Vec<f64> = oracle
        .iter()
        .filter_map(|d| d.cut.as_ref().map(|c| c.gap))
        .collect();
    let narrow = gaps.iter().filter(|&&g| g <= 1e-5).count();
    say!(
        out,
        "checked against the f64 oracle: CPU reference exact on {exact_ref} of {rows} rows, kernel chain exact on {exact_dev}; gap at the cut <= 1e-5 on {narrow} of {rows} rows"
    );
    if let Some(min) = gaps.iter().cloned().reduce(f64::min) {
        let mut sorted = gaps.clone();
        sorted.sort_by(f64::total_cmp);
        say!(
            out,
            "gap at the cut: smallest {min:.2e}, median {:.2e}",
            sorted[sorted.len() / 2]
        );
    }
    if let Some(o) = &args.output {
        io::write_routing(o, &routing).map_err(|e| e.to_string())?;
        say!(
            out,
            "wrote ids [{rows}, {}] i32 and weights [{rows}, {}] f32 to {}",
            routing.k,
            routing.k,
            o.display()
        );
    }
    Ok(())
}
// ANCHOR_END: route_file
