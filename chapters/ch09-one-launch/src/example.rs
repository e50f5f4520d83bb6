//! The chapter's main, as a library: `examples/ch09.rs` calls [`run`].
//!
//! It routes a few GLM-like and Qwen3 batches (at their real hidden sizes) through the one
//! launch, and for each prints the grid (blocks of the tiny GEMM, row groups), the launches
//! against chapter 6's router + chapter 3's align, and whether its logits are chapter 5's tiny
//! GEMM's and its routing and layout chapter 8's stage's on them, bit for bit. stdout is the same
//! on every backend.

use crate::router::{block_rows, kernel_for, route_one_launch};
use ch01_router::chain::GateShape;
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use ch03_align::choose_block_m;
use ch05_fused_router::tiny_gemm::{self, GemmForm};
use ch08_routing_stage::{route_stage, StageError};
use half::bf16;
use moe_kernels::Device;
use std::io::Write;

pub use ch08_routing_stage::example::ExampleError;

macro_rules! say {
    ($out:expr, $($t:tt)*) => {
        writeln!($out, $($t)*).map_err(|e| ExampleError::Stdout(e.to_string()))?
    };
}

/// The batches of the tour.
pub const TOUR_ROWS: [usize; 4] = [1, 3, 16, 40];

// ANCHOR: run
pub fn run(device: &'static Device, out: &mut dyn Write) -> Result<(), ExampleError> {
    say!(out, "Chapter 9: the whole router in one launch\n");
    for (name, config, hidden, experts, with_bias) in [
        ("GLM-like", RouterConfig::glm5(8), 4096, 288, true),
        ("Qwen3-30B-A3B", RouterConfig::qwen3(8), 2048, 128, false),
    ] {
        say!(
            out,
            "{name} (H {hidden}, {experts} experts, k = 8): bf16 hidden states and gate in, the layout out"
        );
        say!(
            out,
            "  {:>4}  {:<22} {:>12}  {:>8}  {:>10}  same bits",
            "rows",
            "kernel",
            "grid",
            "launches",
            "pair+align"
        );
        let gate = patterned(experts * hidden, 0x09a, 0.05);
        let bias: Option<Vec<f32>> = with_bias.then(|| {
            patterned(experts, 0x09b, 0.05)
                .iter()
                .map(|b| 8.0 + b)
                .collect()
        });
        for rows in TOUR_ROWS {
            let x = patterned(rows * hidden, 0x09c + rows as u64, 1.0);
            let shape = GateShape {
                rows,
                hidden,
                experts,
            };
            let bm = choose_block_m(rows * 8, experts);
            let (got, logits) =
                route_one_launch(device, &config, shape, bm, &x, &gate, bias.as_deref())?;
            // The two oracles: chapter 5's tiny GEMM (CUDA-core form), chapter 8's stage.
            let want_logits = tiny_logits(device, &x, &gate, shape)?;
            let want = route_stage(device, &config, rows, experts, bm, &logits, bias.as_deref())?;
            let same = bits(&logits) == bits(&want_logits)
                && got.routing.ids == want.routing.ids
                && bits(&got.routing.weights) == bits(&want.routing.weights)
                && got.aligned == want.aligned
                && got.counts == want.counts;
            if !same {
                return Err(ExampleError::Check(format!(
                    "{name} at {rows} rows: the one launch differs from the tiny GEMM + stage"
                )));
            }
            let groups = rows.div_ceil(block_rows(rows));
            let grid = format!("{} × {groups}", experts.div_ceil(2));
            // Chapter 6's router (its GEMM and the fused router), then chapter 3's align.
            let align = ch03_align::device::DeviceAlign::new(device, rows * 8, experts, bm)
                .map_err(StageError::from)?;
            let pair_align = 2 + align.launches();
            say!(
                out,
                "  {rows:>4}  {:<22} {grid:>12}  {:>8}  {pair_align:>10}  yes",
                kernel_for(rows, experts).unwrap_or_default(),
                1
            );
        }
        say!(out, "");
    }
    say!(
        out,
        "Each block computes two experts' logits for its row group; the last block of a row group"
    );
    say!(
        out,
        "routes it, and the last of those sorts every pair: one launch, no grid-wide barrier."
    );
    Ok(())
}
// ANCHOR_END: run

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn tiny_logits(
    device: &'static Device,
    x: &[f32],
    gate: &[f32],
    s: GateShape,
) -> Result<Vec<f32>, ExampleError> {
    let up = |v: &[f32]| {
        let b: Vec<bf16> = v.iter().map(|&f| bf16::from_f32(f)).collect();
        device.upload(&b)
    };
    let m = device.load(&tiny_gemm::KERNELS)?;
    let l = device.alloc::<f32>(s.rows * s.experts)?;
    tiny_gemm::enqueue_as(
        GemmForm::CudaCores,
        &m,
        &up(x)?,
        &up(gate)?,
        &l,
        s.rows,
        s.hidden,
        s.experts,
    )
    .map_err(StageError::from)?;
    Ok(l.to_vec()?)
}
