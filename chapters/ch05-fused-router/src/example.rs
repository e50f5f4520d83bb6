//! The chapter's main, as a library: `examples/ch05/` parses the command line (chapter 1's
//! options) and calls [`run`].
//!
//! Without an input file it routes the router article's toy example through the fused kernel
//! (the bias in fp32, then rounded to bf16), a GLM-like batch through the fused pair beside
//! chapter 1's chain, and every named regime through the pair against the f64 oracle. With an
//! input file it routes the reader's hidden states through the reader's gate weight.
//!
//! Everything printed to stdout is the same on both backends (it is snapshotted and quoted in
//! the book); the line saying which backend ran goes to stderr.

use crate::fused::{route_logits_fused, FusedRouter};
use crate::io::{read_gate_file, write_outputs};
use ch01_router::chain::{route_on_device, DeviceRouter, FiveLineChain, GateDtype, GateShape};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::conformance::{as_dtype, check_every_regime, scoring_label};
use ch01_router::example::{non_finite_note, FileOptions};
use ch01_router::io::output_problem;
use ch01_router::literal::LiteralRouter;
use ch01_router::reference::ReferenceRouter;
use ch01_router::regimes::{regime, RegimeInput};
use ch01_router::routing::{Router, Routing};
use ch01_router::toy;
use moe_kernels::{record_launches, Device};
use std::io::Write;
use std::path::Path;

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

fn row_line(r: &Routing, row: usize) -> String {
    format!(
        "  row {row}: experts {} weights {}",
        list(r.row_ids(row).iter().map(|e| format!("{e:3}"))),
        list(r.row_weights(row).iter().map(|w| format!("{w:.3}")))
    )
}

/// Runs the example: the tour, or (with `input`) a reader's file, writing what it shows to
/// `out` and its notes (chapter 1's [`non_finite_note`]) to stderr.
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

fn shape_of(r: &RegimeInput) -> GateShape {
    GateShape {
        rows: r.rows,
        hidden: r.hidden,
        experts: r.experts,
    }
}

// ANCHOR: toy_tour
/// The toy layer's logits through the fused kernel alone, with the bias as given; checked
/// against chapter 1's f64 oracle (the same ids).
fn toy_through_the_kernel(device: &'static Device, bias: &[f32]) -> Result<Routing, String> {
    let logits = toy::logits();
    let got = route_logits_fused(device, &toy::config(), 1, 8, &logits, Some(bias))
        .map_err(|e| e.to_string())?;
    let want = LiteralRouter {
        config: toy::config(),
    }
    .route_rows(&logits, 1, 8, Some(bias))
    .map_err(|e| e.to_string())?;
    if got.row_ids(0) != &want[0].ids[..] {
        return Err(format!(
            "the fused kernel picked {:?}, the oracle {:?}",
            got.row_ids(0),
            want[0].ids
        ));
    }
    Ok(got)
}

fn tour(device: &'static Device, out: Out) -> Result<(), String> {
    say!(out, "Chapter 5: the fused router");
    say!(out, "");
    say!(
        out,
        "The router article's toy layer (8 experts, k = 2, sigmoid + bias) through the fused kernel:"
    );
    let fp32 = toy_through_the_kernel(device, &toy::bias())?;
    let bf16 = toy_through_the_kernel(device, &toy::bias_bf16())?;
    say!(
        out,
        "  bias in fp32:         experts {} with weights {}",
        list(fp32.row_ids(0).iter().map(|e| e.to_string())),
        list(fp32.row_weights(0).iter().map(|w| format!("{w:.3}")))
    );
    say!(
        out,
        "  bias rounded to bf16: experts {} with weights {}",
        list(bf16.row_ids(0).iter().map(|e| e.to_string())),
        list(bf16.row_weights(0).iter().map(|w| format!("{w:.3}")))
    );
    say!(
        out,
        "  (expert 5's bias 8.03 becomes 8.0 in bf16, 0.03 more than the gap of 0.018 at the cut:"
    );
    say!(out, "  the kernel takes the bias, and the logits, in fp32)");
    say!(out, "");
    // ANCHOR_END: toy_tour

    // ANCHOR: glm_batch
    let r = as_dtype(
        &regime("spec_decode_6rows").expect("a listed regime"),
        GateDtype::Bf16,
    );
    say!(
        out,
        "A GLM-like batch (regime {}): {} rows, hidden {}, {} experts, k = {}, sigmoid + bias;",
        r.name,
        r.rows,
        r.hidden,
        r.experts,
        r.config.k
    );
    say!(
        out,
        "bf16 hidden states and gate weight, fp32 logits and bias."
    );
    let shape = shape_of(&r);
    let bias = r.bias.as_deref();
    let pair = FusedRouter::new(device, &r.config, shape, bias).map_err(|e| e.to_string())?;
    let (got, launched) = record_launches(|| {
        route_on_device(
            &pair,
            device,
            GateDtype::Bf16,
            &r.hidden_states,
            &r.gate_weight,
            bias,
        )
    });
    let got = got.map_err(|e| e.to_string())?;
    let chain = FiveLineChain::new(device, &r.config, shape, bias).map_err(|e| e.to_string())?;
    say!(
        out,
        "  the fused pair launches {}: {}",
        launched.len(),
        list(
            launched
                .iter()
                .map(|l| l.rsplit("::").next().unwrap_or(l).to_string())
        )
    );
    say!(
        out,
        "  chapter 1's chain launches {}: router_{{{}}}",
        chain.launches_per_call(),
        chain
            .launch_names()
            .iter()
            .map(|s| s.trim_start_matches("router_"))
            .collect::<Vec<_>>()
            .join(",")
    );
    for row in 0..r.rows {
        say!(out, "{}", row_line(&got, row));
    }
    // The pair's own logits through chapter 1's f32 reference: the same ids, and weights that
    // differ by the last bits of another summation order at most.
    let logits = pair.logits().to_vec().map_err(|e| e.to_string())?;
    let t =
        candle_core::Tensor::from_slice(&logits, (r.rows, r.experts), &candle_core::Device::Cpu)
            .map_err(|e| e.to_string())?;
    let b =
        candle_core::Tensor::from_slice(bias.unwrap_or(&[]), r.experts, &candle_core::Device::Cpu)
            .map_err(|e| e.to_string())?;
    let reference = ReferenceRouter {
        config: r.config.clone(),
    }
    .route(&t, Some(&b))
    .map_err(|e| e.to_string())?;
    let same = (0..r.rows)
        .filter(|&i| reference.row_ids(i) == got.row_ids(i))
        .count();
    let worst = got
        .weights
        .iter()
        .zip(&reference.weights)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    say!(
        out,
        "  chapter 1's f32 reference on the same logits: the same ids on {same} of {} rows, weights within {}",
        r.rows,
        if worst <= 1e-6 { "1e-6" } else { "1e-5 (MORE THAN 1e-6)" }
    );
    say!(out, "");
    // ANCHOR_END: glm_batch

    say!(
        out,
        "Every regime through the fused pair, against the f64 oracle (exact ids where the gap at the cut > 1e-5):"
    );
    say!(
        out,
        "  {:<30} {:>5} {:>7} {:>3}  {:<19} {:>13}  {:>10}",
        "regime",
        "rows",
        "experts",
        "k",
        "scoring",
        "launches",
        "clear cuts"
    );
    let built = std::cell::RefCell::new(Vec::new());
    let make = |dev: &'static Device, r: &RegimeInput| {
        let shape = shape_of(r);
        let pair = FusedRouter::new(dev, &r.config, shape, r.bias.as_deref())?;
        let chain = FiveLineChain::new(dev, &r.config, shape, r.bias.as_deref())?;
        built.borrow_mut().push((
            r.experts,
            r.config.k,
            scoring_label(r),
            pair.launch_names().len(),
            chain.launches_per_call(),
        ));
        Ok(Box::new(pair) as Box<dyn DeviceRouter>)
    };
    let results = check_every_regime(device, GateDtype::Bf16, &make, Tolerance::OWN_LOGITS)?;
    for (res, (experts, k, scoring, ours, chain)) in results.iter().zip(built.borrow().iter()) {
        say!(
            out,
            "  {:<30} {:>5} {:>7} {:>3}  {:<19} {:>13}  {:>4} of {:<4} ok",
            res.name,
            res.rows,
            experts,
            k,
            scoring,
            format!("{ours} (chain {chain})"),
            res.exact_rows,
            res.rows
        );
    }
    say!(out, "");
    say!(out, "Route your own: cargo run --example ch05 -- --input FILE.safetensors [--output OUT.safetensors] (see --help).");
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
        if let Some(why) = output_problem(o, &[path]) {
            return Err(format!("--output {}: {why}", o.display()));
        }
    }
    let f = read_gate_file(path).map_err(|e| e.to_string())?;
    let config = args.config.clone();
    let shape = GateShape {
        rows: f.rows,
        hidden: f.hidden,
        experts: f.experts,
    };
    let stored = f.bias.as_deref();
    args.check_bias_bf16(path, stored.is_some())?;
    let rounded_bias: Option<Vec<f32>> = stored.filter(|_| args.bias_bf16).map(|b| {
        b.iter()
            .map(|&x| half::bf16::from_f32(x).to_f32())
            .collect()
    });
    let bias = rounded_bias.as_deref().or(stored);
    let pair = FusedRouter::new(device, &config, shape, bias).map_err(|e| e.to_string())?;
    let routing = route_on_device(
        &pair,
        device,
        GateDtype::Bf16,
        &f.hidden_states,
        &f.gate,
        bias,
    )
    .map_err(|e| e.to_string())?;
    let logits = pair.logits().to_vec().map_err(|e| e.to_string())?;
    // A NaN or infinite hidden state or gate weight gives non-finite logits: the rule routes
    // them (they rank last), and the reader is told, on stderr.
    let from = " (from NaN or infinite hidden states or gate weights)";
    if let Some(note) = non_finite_note(&logits, f.experts, from) {
        say!(notes, "{note}");
    }
    say!(
        out,
        "{}: {} rows of hidden size {}, {} experts{}",
        path.display(),
        f.rows,
        f.hidden,
        f.experts,
        if bias.is_some() { ", with a bias" } else { "" }
    );
    if !f.rounded.is_empty() {
        say!(
            out,
            "{} {} f32 in the file: rounded to bf16, the type the tiny GEMM reads",
            f.rounded.join(" and "),
            if f.rounded.len() == 1 { "was" } else { "were" }
        );
    }
    say!(out, "router: {config}");
    for r in 0..f.rows.min(args.show) {
        say!(out, "{}", row_line(&routing, r));
    }
    if f.rows > args.show {
        say!(out, "  ... {} more rows", f.rows - args.show);
    }
    if let (Some(b32), Some(_)) = (stored, &rounded_bias) {
        // The same logits with the bias as stored (fp32): how many rows pick another set?
        let full = route_logits_fused(device, &config, f.rows, f.experts, &logits, Some(b32))
            .map_err(|e| e.to_string())?;
        let set = |r: &Routing, i: usize| {
            let mut v = r.row_ids(i).to_vec();
            v.sort_unstable();
            v
        };
        let changed = (0..f.rows)
            .filter(|&i| set(&full, i) != set(&routing, i))
            .count();
        let verb = if changed == 1 { "selects" } else { "select" };
        say!(out, "with the bias rounded to bf16, {changed} of {} rows {verb} a different set of experts than with the fp32 bias", f.rows);
    }
    // The pair's own logits through chapter 1's f64 oracle.
    let oracle = LiteralRouter { config }
        .route_rows(&logits, f.rows, f.experts, bias)
        .map_err(|e| e.to_string())?;
    let exact = check_routing("fused pair", &oracle, &routing, Tolerance::SAME_LOGITS)?;
    say!(
        out,
        "checked against the f64 oracle on the pair's own logits: exact ids on {exact} of {} rows (the others are near ties, gap at the cut <= 1e-5)",
        f.rows
    );
    if let Some(o) = &args.output {
        write_outputs(o, &logits, f.experts, &routing).map_err(|e| e.to_string())?;
        say!(
            out,
            "wrote logits [{}, {}] f32, ids [{}, {}] i32 and weights [{}, {}] f32 to {}",
            f.rows,
            f.experts,
            f.rows,
            routing.k,
            f.rows,
            routing.k,
            o.display()
        );
    }
    Ok(())
}
// ANCHOR_END: route_file
