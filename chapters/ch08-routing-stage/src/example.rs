//! The chapter's main, as a library: `examples/ch08.rs` calls [`run`].
//!
//! It routes three rows of the router article's toy layer through the stage and draws what
//! chapter 4 reads (the tiles and their experts, the counts, the first slots), then takes a
//! GLM-like and a Qwen3 router along the row axis: which arrangement runs, how many launches it
//! makes against chapter 5's router + chapter 3's align, and whether every bit agrees. stdout is
//! the same on every backend: only integers, launch counts and the agreement.

use crate::error::StageError;
use crate::stage::{
    arrangement_for, pair_then_align, route_stage_as, Arrangement, RoutingStage, StageOutput,
};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use ch01_router::toy;
use ch03_align::choose_block_m;
use ch03_align::device::DeviceAlign;
use moe_kernels::{record_launches, Device};
use std::fmt;
use std::io::Write;

/// What the example can fail with: the stage (its inputs or the device), a disagreement with the
/// pair + align, or stdout. Chapter 9's example fails the same ways.
#[derive(Debug)]
pub enum ExampleError {
    Stage(StageError),
    Check(String),
    Stdout(String),
}

impl fmt::Display for ExampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExampleError::Stage(e) => write!(f, "{e}"),
            ExampleError::Check(m) => write!(f, "{m}"),
            ExampleError::Stdout(m) => write!(f, "cannot write to stdout: {m}"),
        }
    }
}

impl std::error::Error for ExampleError {}

impl From<StageError> for ExampleError {
    fn from(e: StageError) -> Self {
        ExampleError::Stage(e)
    }
}

impl From<moe_kernels::KernelError> for ExampleError {
    fn from(e: moe_kernels::KernelError) -> Self {
        ExampleError::Stage(e.into())
    }
}

type Out<'a> = &'a mut dyn Write;

macro_rules! say {
    ($out:expr, $($t:tt)*) => {
        writeln!($out, $($t)*).map_err(|e| ExampleError::Stdout(e.to_string()))?
    };
}

/// The toy's three rows: its logits, then the same shifted one expert to the right twice.
pub fn toy_rows() -> Vec<f32> {
    let l = toy::logits();
    (0..3)
        .flat_map(|r| (0..8).map(move |e| l[(e + 8 - r) % 8]))
        .collect()
}

/// The row counts of the tour and the shapes it takes along them.
pub const TOUR_ROWS: [usize; 5] = [1, 6, 16, 96, 300];

fn arrangement_name(a: Arrangement) -> &'static str {
    match a {
        Arrangement::OneBlock => "one block",
        Arrangement::TwoLaunches => "two launches",
    }
}

// ANCHOR: run
/// Runs the example on `device`, writing to `out`.
pub fn run(device: &'static Device, out: Out) -> Result<(), ExampleError> {
    say!(out, "Chapter 8: the routing stage\n");
    // 1. The toy: three rows, k = 2 of 8 experts, BLOCK_M 4.
    let (config, bias, logits) = (toy::config(), toy::bias(), toy_rows());
    let (rows, experts, block_m) = (3, 8, 4);
    say!(
        out,
        "The router article's toy layer (8 experts, k = 2, sigmoid + bias), 3 rows, BLOCK_M 4:"
    );
    let (got, names) = record_launches(|| {
        route_stage_as(
            device,
            &config,
            rows,
            experts,
            block_m,
            &logits,
            Some(&bias),
            Arrangement::OneBlock,
        )
    });
    let got = got?;
    say!(
        out,
        "  the stage launches {}: {}",
        names.len(),
        short(&names)
    );
    for t in 0..rows {
        let ids = got.routing.row_ids(t);
        let w = &got.routing.weights[t * 2..t * 2 + 2];
        say!(
            out,
            "  row {t}: experts {} {} weights {:.3} {:.3} (pairs {} and {})",
            ids[0],
            ids[1],
            w[0],
            w[1],
            2 * t,
            2 * t + 1
        );
    }
    say!(out, "  the layout chapter 4 reads:");
    for line in ch03_align::text::draw(&got.aligned, rows * 2, block_m, 8).lines() {
        say!(out, "    {line}");
    }
    say!(out, "  counts per expert:  {:?}", got.counts);
    say!(
        out,
        "  first slot per expert, then the total: {:?}",
        got.offsets
    );
    let same = agrees_with_the_pair(
        device,
        &config,
        rows,
        experts,
        block_m,
        &logits,
        Some(&bias),
        &got,
    )?;
    if !same {
        return Err(ExampleError::Check(
            "the stage and chapter 5's router + chapter 3's align differ on the toy".into(),
        ));
    }
    say!(
        out,
        "  chapter 5's router + chapter 3's align: the same ids, weights and layout, bit for bit\n"
    );
    // 2. Along the row axis.
    for (name, config, e, bias) in [
        ("GLM-like", RouterConfig::glm5(8), 288, true),
        ("Qwen3-30B-A3B", RouterConfig::qwen3(8), 128, false),
    ] {
        tour(device, out, name, &config, e, bias)?;
    }
    say!(
        out,
        "The stage's arrangement: one block up to {} rows (and 512 pairs), two launches above.",
        crate::ONE_BLOCK_MAX_ROWS
    );
    Ok(())
}
// ANCHOR_END: run

fn tour(
    device: &'static Device,
    out: Out,
    name: &str,
    config: &RouterConfig,
    experts: usize,
    with_bias: bool,
) -> Result<(), ExampleError> {
    let k = config.k;
    let bias: Option<Vec<f32>> = with_bias.then(|| {
        patterned(experts, 0x0c08, 0.05)
            .iter()
            .map(|b| 8.0 + b)
            .collect()
    });
    say!(
        out,
        "{name} ({experts} experts, k = {k}), logits patterned in [-3, 3):"
    );
    say!(
        out,
        "  {:>5}  {:<13} {:>8}  {:>8}  {:>7}  same bits",
        "rows",
        "arrangement",
        "launches",
        "pair+align",
        "BLOCK_M"
    );
    for rows in TOUR_ROWS {
        let (p, bm) = (rows * k, choose_block_m(rows * k, experts));
        let logits = patterned(rows * experts, 0x0c08 + rows as u64, 3.0);
        let a = arrangement_for(rows, k);
        let stage = RoutingStage::new(device, config, rows, experts, bm, bias.as_deref())?;
        let align = DeviceAlign::new(device, p, experts, bm).map_err(StageError::from)?;
        let got = route_stage_as(
            device,
            config,
            rows,
            experts,
            bm,
            &logits,
            bias.as_deref(),
            a,
        )?;
        let same = agrees_with_the_pair(
            device,
            config,
            rows,
            experts,
            bm,
            &logits,
            bias.as_deref(),
            &got,
        )?;
        if !same {
            return Err(ExampleError::Check(format!(
                "{name} at {rows} rows: the stage and the pair + align differ"
            )));
        }
        say!(
            out,
            "  {rows:>5}  {:<13} {:>8}  {:>10}  {bm:>7}  yes",
            arrangement_name(a),
            stage.launches(),
            1 + align.launches()
        );
    }
    say!(out, "");
    Ok(())
}

/// Whether the stage's `got` is the pair + align's output on the same input, bit for bit.
#[allow(clippy::too_many_arguments)]
fn agrees_with_the_pair(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    block_m: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
    got: &StageOutput,
) -> Result<bool, StageError> {
    let (routing, aligned) = pair_then_align(device, config, rows, experts, block_m, logits, bias)?;
    let same_weights = routing.weights.len() == got.routing.weights.len()
        && (routing.weights.iter())
            .zip(&got.routing.weights)
            .all(|(x, y)| x.to_bits() == y.to_bits());
    Ok(routing.ids == got.routing.ids && same_weights && aligned == got.aligned)
}

/// Kernel names without their family: `ch08_routing_stage::stage_one_block_e128` →
/// `stage_one_block_e128`.
fn short(names: &[String]) -> String {
    names
        .iter()
        .map(|n| n.rsplit("::").next().unwrap_or(n))
        .collect::<Vec<_>>()
        .join(" ")
}
