//! The chapter's main, as a library: `examples/ch12.rs` calls [`run`].
//!
//! One small layer (GLM-like routing, a shared expert) spread over 2 and 4 in-process ranks on
//! one device: tensor parallelism against the one-GPU layer (the routing bit for bit, the output
//! within [`TP_TOLERANCE`]), expert parallelism (who sends how many pairs to whom, the output bit
//! for bit), the worst imbalance, DeepSeek-V3's groups bounding the ranks a token visits, and the
//! bytes each scheme moves per token at Qwen3-30B-A3B's size. In-process ranks check the
//! arithmetic, not the speed; the printout is the same on every backend.

use crate::comm::Communicator;
use crate::dispatch::ranks_bound;
use crate::error::ParallelError;
use crate::expert::ExpertParallel;
use crate::in_process::run_ranks;
use crate::tensor::{TensorParallel, TP_TOLERANCE};
use ch01_router::inputs::patterned;
use ch01_router::RouterConfig;
use ch02_grouped::compare::output_error;
use ch02_grouped::{MoeConfig, MoeError, MoeLayer, MoeWeights, SharedExpert};
use ch04_fused_moe::{FusedDevice, Path, TileConfig};
use ch06_layer::AssembledLayer;
use moe_kernels::Device;
use std::fmt;
use std::io::Write;

/// What the example can fail with: a layer or a collective, a disagreement, or stdout.
#[derive(Debug)]
pub enum ExampleError {
    Parallel(ParallelError),
    Check(String),
    Stdout(String),
}

impl fmt::Display for ExampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExampleError::Parallel(e) => write!(f, "{e}"),
            ExampleError::Check(m) => write!(f, "{m}"),
            ExampleError::Stdout(m) => write!(f, "cannot write to stdout: {m}"),
        }
    }
}

impl std::error::Error for ExampleError {}

impl<E: Into<ParallelError>> From<E> for ExampleError {
    fn from(e: E) -> Self {
        ExampleError::Parallel(e.into())
    }
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => {
        writeln!($out, $($t)*).map_err(|e| ExampleError::Stdout(e.to_string()))?
    };
}

/// The tour's tokens.
pub const TOKENS: usize = 12;

/// The tour's layer: H 64, I 32, 16 experts, GLM-like sigmoid + bias top-4, a shared expert of
/// I 48; the bias `bias(e)` per expert.
pub fn tour_layer(bias: impl Fn(usize) -> f32) -> MoeWeights {
    let config = MoeConfig {
        hidden: 64,
        intermediate: 32,
        experts: 16,
        router: RouterConfig::glm5(4),
        shared: Some(SharedExpert {
            intermediate: 48,
            gated: false,
        }),
    };
    let mut w = MoeWeights::patterned(&config, 12, 0.25, true);
    if let Some(b) = w.bias.as_mut() {
        for (e, v) in b.iter_mut().enumerate() {
            *v = bias(e);
        }
    }
    w
}

/// Chapter 4 pinned to the tiled path and the default tile, for both sides of a comparison.
fn pinned(f: FusedDevice) -> Result<FusedDevice, MoeError> {
    f.with_path(Path::Tiled).with_tile(TileConfig::DEFAULT)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

// ANCHOR: run
pub fn run(device: &'static Device, out: &mut dyn Write) -> Result<(), ExampleError> {
    say!(out, "Chapter 12: the layer across GPUs");
    say!(
        out,
        "(in-process ranks on one device: they check the arithmetic, not the speed)\n"
    );
    let w = tour_layer(|_| 0.0);
    let x = patterned(TOKENS * 64, 120, 1.0);
    say!(
        out,
        "The layer: H 64, I 32, 16 experts, sigmoid + bias top-4, a shared expert of I 48; {TOKENS} tokens\n"
    );
    tensor_tour(device, &w, &x, out)?;
    expert_tour(device, &w, &x, out)?;
    imbalance_tour(device, &x, out)?;
    groups_tour(out)?;
    bytes_tour(out)?;
    Ok(())
}
// ANCHOR_END: run

fn tensor_tour(
    dev: &'static Device,
    w: &MoeWeights,
    x: &[f32],
    out: &mut dyn Write,
) -> Result<(), ExampleError> {
    say!(
        out,
        "Tensor parallelism: each rank holds I/R columns of every expert; all hold every token"
    );
    say!(
        out,
        "  ranks  I per rank  routing = one GPU  ranks agree  within {:.0e} of one GPU",
        TP_TOLERANCE.0
    );
    let one = AssembledLayer::new(dev, w)?
        .map_experts(pinned)?
        .forward(x)?;
    for world in [2, 4] {
        let got = run_ranks(world, dev, |comm| {
            TensorParallel::new(dev, w, comm.rank(), world)?
                .map_experts(pinned)?
                .forward(comm, x)
        })
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let routing = got.iter().all(|o| o.routing == one.routing);
        let agree = got.iter().all(|o| same_bits(&o.out, &got[0].out));
        let close = output_error(&one.out, &got[0].out).relative <= TP_TOLERANCE.0;
        if !(routing && agree && close) {
            return Err(ExampleError::Check(format!(
                "tensor parallelism on {world} ranks disagrees"
            )));
        }
        say!(
            out,
            "  {world:>5}  {:>10}  {:>17}  {:>11}  {:>22}",
            32 / world,
            yes(routing),
            yes(agree),
            yes(close)
        );
    }
    say!(out, "");
    Ok(())
}

/// Each rank's tokens: rank r gets rows `splits[r]..splits[r + 1]`.
fn shares(world: usize) -> Vec<usize> {
    match world {
        2 => vec![0, 8, TOKENS],
        _ => vec![0, 6, 6, 9, TOKENS],
    }
}

fn expert_tour(
    dev: &'static Device,
    w: &MoeWeights,
    x: &[f32],
    out: &mut dyn Write,
) -> Result<(), ExampleError> {
    say!(
        out,
        "Expert parallelism: each rank holds 16/R whole experts and its own tokens"
    );
    for world in [2, 4] {
        let cut = shares(world);
        let tokens: Vec<String> = (0..world)
            .map(|r| (cut[r + 1] - cut[r]).to_string())
            .collect();
        say!(
            out,
            "  {world} ranks, tokens per rank {}; pairs sent (row: from, column: to)",
            tokens.join(" | ")
        );
        let got = ep_run(dev, w, x, world, &cut)?;
        let header: Vec<String> = (0..world).map(|r| format!("to r{r}")).collect();
        say!(out, "           {}", header.join("  "));
        for (r, (o, _)) in got.iter().enumerate() {
            let cells: Vec<String> = o.iter().map(|n| format!("{n:>5}")).collect();
            say!(out, "    from r{r}  {}", cells.join("  "));
        }
        let all = got.iter().all(|(_, same)| *same);
        say!(
            out,
            "    every rank's output = the one-GPU layer on its tokens, bit for bit: {}",
            yes(all)
        );
        if !all {
            return Err(ExampleError::Check(format!(
                "expert parallelism on {world} ranks differs"
            )));
        }
    }
    say!(out, "");
    Ok(())
}

/// Runs the layer over `world` ranks with the tokens cut at `cut`: per rank, the pairs it sent
/// to each rank and whether its output has the one-GPU layer's bits.
fn ep_run(
    dev: &'static Device,
    w: &MoeWeights,
    x: &[f32],
    world: usize,
    cut: &[usize],
) -> Result<Vec<(Vec<usize>, bool)>, ExampleError> {
    let h = w.config.hidden;
    let one = AssembledLayer::new(dev, w)?.map_experts(pinned)?;
    let got = run_ranks(world, dev, |comm| {
        let r = comm.rank();
        let mine = &x[cut[r] * h..cut[r + 1] * h];
        let o = ExpertParallel::new(dev, w, r, world)?
            .map_experts(pinned)?
            .forward(comm, mine)?;
        Ok::<_, ParallelError>((o, mine.to_vec()))
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    got.into_iter()
        .map(|(o, mine)| {
            let want = one.forward(&mine)?;
            Ok((
                o.sent,
                same_bits(&o.layer.out, &want.out) && o.layer.routing == want.routing,
            ))
        })
        .collect()
}

fn imbalance_tour(
    dev: &'static Device,
    x: &[f32],
    out: &mut dyn Write,
) -> Result<(), ExampleError> {
    say!(
        out,
        "The worst imbalance: a bias that sends every pair to experts 12-15 (rank 3 of 4)"
    );
    let w = tour_layer(|e| if e >= 12 { 10.0 } else { 0.0 });
    let got = ep_run(dev, &w, x, 4, &shares(4))?;
    let to3: usize = got.iter().map(|(s, _)| s[3]).sum();
    let others: usize = got.iter().map(|(s, _)| s[..3].iter().sum::<usize>()).sum();
    let all = got.iter().all(|(_, same)| *same);
    say!(
        out,
        "  pairs to rank 3: {to3}, to the others: {others}; none dropped, bit for bit: {}\n",
        yes(all && to3 == TOKENS * 4)
    );
    if !all {
        return Err(ExampleError::Check("the imbalanced layer differs".into()));
    }
    Ok(())
}

fn groups_tour(out: &mut dyn Write) -> Result<(), ExampleError> {
    say!(out, "The most ranks one token visits: DeepSeek-V3, 8 of 256 experts from the best 4 of 8 groups");
    say!(out, "  ranks  with groups  without");
    let v3 = RouterConfig::deepseek_v3();
    let flat = RouterConfig {
        grouping: None,
        ..v3
    };
    for world in [2, 4, 8, 16] {
        say!(
            out,
            "  {world:>5}  {:>11}  {:>7}",
            ranks_bound(&v3, 256, world),
            ranks_bound(&flat, 256, world)
        );
    }
    say!(out, "");
    Ok(())
}

// ANCHOR: bytes
/// Bytes one rank sends per token per layer (arithmetic, not a measurement): tensor parallelism's
/// all-gather of f32 outputs, `(R − 1)·H·4`; expert parallelism's pairs that leave the rank
/// (`k·(R − 1)/R` of them when the routing is uniform), each a bf16 row out, an id and a weight,
/// and an f32 row back: `6H + 8`.
fn bytes_tour(out: &mut dyn Write) -> Result<(), ExampleError> {
    let (h, k) = (2048usize, 8usize);
    say!(
        out,
        "Bytes a rank sends per token per layer, Qwen3-30B-A3B (H {h}, k {k}), uniform routing"
    );
    say!(out, "  ranks  tensor parallel  expert parallel");
    for world in [2usize, 4, 8] {
        let tp = (world - 1) * h * 4;
        let ep = k * (world - 1) * (6 * h + 8) / world;
        say!(out, "  {world:>5}  {tp:>15}  {ep:>15}");
    }
    Ok(())
}
// ANCHOR_END: bytes
