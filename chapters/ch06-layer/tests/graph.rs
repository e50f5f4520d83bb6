//! The whole layer captured in a CUDA graph (GPU only: the emulator has no graphs).
//!
//! The measuring harness captures what a closure queues and replays the graph; its timings are
//! thrown away here. The closure writes to a scratch output while the harness warms up (outside
//! any graph), and to the real output only while it is being captured, so the real output holds
//! what the graph's replays wrote: it must be the eager call's output, bit for bit, at a decode
//! size (tiny GEMM, decode path) and at a prefill size (cuBLAS logits, tiled path with chapter 3's
//! align), a shared expert included. A capture that met an allocation, a copy or a host
//! synchronisation would fail.

use ch02_grouped::regimes::regime;
use ch02_grouped::MoeError;
use ch04_fused_moe::Path;
use ch05_fused_router::LogitsFrom;
use ch06_layer::AssembledLayer;
use half::bf16;
use moe_kernels::measure::{Harness, Plan};
use moe_kernels::testing::assert_same_bits;
use std::cell::Cell;

#[test]
#[ignore = "needs a GPU (CUDA graphs)"]
fn the_layer_replays_from_a_cuda_graph() {
    let dev = moe_kernels::testing::cuda();
    let harness = Harness::new(
        dev,
        Plan {
            cold_samples: 3,
            warm_samples: 2,
            warm_copies: 2,
        },
    )
    .unwrap();
    for (name, rows, from, path) in [
        ("decode_1tok", 1, LogitsFrom::TinyGemm, Path::Decode),
        ("large_prefill", 256, LogitsFrom::Blas, Path::Tiled),
        (
            "gated_shared_expert",
            17,
            LogitsFrom::TinyGemm,
            Path::DecodeGrouped,
        ),
    ] {
        let r = regime(name).unwrap();
        let h = r.weights.config.hidden;
        let layer = AssembledLayer::new(dev, &r.weights)
            .unwrap()
            .with_logits(from)
            .map_experts(|e| Ok(e.with_path(path)))
            .unwrap();
        let ws = layer.workspace(rows).unwrap();
        let x: Vec<bf16> = r.hidden[..rows * h]
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect();
        let x = dev.upload(&x).unwrap();
        let eager = dev.alloc::<f32>(rows * h).unwrap();
        layer.enqueue(&ws, &x, &eager).unwrap();
        let want = eager.to_vec().unwrap();
        let scratch = dev.alloc::<f32>(rows * h).unwrap();
        let replayed = dev.upload(&vec![f32::NAN; rows * h]).unwrap();
        let calls = Cell::new(0);
        let m = harness
            .measure(|| -> Result<(), MoeError> {
                // The harness's three warm-up calls run eagerly; the captures come after.
                let out = if calls.get() < 3 { &scratch } else { &replayed };
                calls.set(calls.get() + 1);
                layer.enqueue(&ws, &x, out)
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m.launches as usize, layer.launches(&ws), "{name}");
        assert_same_bits(
            &format!("{name}: graph replay vs eager"),
            &replayed.to_vec().unwrap(),
            &want,
        );
    }
}
