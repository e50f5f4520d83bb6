//! The one-launch router on every backend (the emulator always, the GPU with `--include-ignored`
//! on a GPU machine): its logits are chapter 5's tiny GEMM's (CUDA-core form) bit for bit, and its
//! ids, weights, layout, counts and offsets are chapter 8's stage's on those logits, on every
//! regime of chapter 1, at the production shapes and over many row groups; the tickets left at
//! zero for the next call; one launch; every bad input a typed error; and on a GPU machine, the
//! emulator and the GPU bit for bit and one hash over 1,000 runs.

use ch01_router::chain::{DeviceRouterError, GateShape};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use ch01_router::regimes::{regime, REGIMES};
use ch03_align::choose_block_m;
use ch05_fused_router::tiny_gemm::{self, GemmForm};
use ch08_routing_stage::stage::StageOutput;
use ch08_routing_stage::{route_stage, StageError};
use ch09_one_launch::router::{block_rows, kernel_for};
use ch09_one_launch::{route_one_launch, OneLaunch};
use half::bf16;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{record_launches, Device};

/// One input: f32 hidden states and gate (the router rounds them to bf16), the bias.
struct Case {
    name: String,
    config: RouterConfig,
    shape: GateShape,
    hidden: Vec<f32>,
    gate: Vec<f32>,
    bias: Option<Vec<f32>>,
}

fn regime_cases() -> Vec<Case> {
    REGIMES
        .iter()
        .map(|n| {
            let r = regime(n).unwrap();
            Case {
                name: n.to_string(),
                config: r.config.clone(),
                shape: GateShape {
                    rows: r.rows,
                    hidden: r.hidden,
                    experts: r.experts,
                },
                hidden: r.hidden_states.clone(),
                gate: r.gate_weight.clone(),
                bias: r.bias.clone(),
            }
        })
        .collect()
}

/// The production shapes: GLM-like (H 4096, 288 experts, sigmoid + bias), Qwen3 (H 2048, 128,
/// softmax), DeepSeek-V3 (H 7168, 256, 8 groups), and the widest row the one launch takes
/// (GLM-like, 512 experts).
fn shape_case(shape: &str, rows: usize, salt: u64) -> Case {
    let (config, hidden, experts, bias) = match shape {
        "glm" => (RouterConfig::glm5(8), 4096, 288, true),
        "qwen3" => (RouterConfig::qwen3(8), 2048, 128, false),
        "deepseek_v3" => (RouterConfig::deepseek_v3(), 7168, 256, true),
        "wide" => (RouterConfig::glm5(8), 4096, 512, true),
        _ => unreachable!(),
    };
    Case {
        name: format!("{shape} × {rows}"),
        config,
        shape: GateShape {
            rows,
            hidden,
            experts,
        },
        hidden: patterned(rows * hidden, salt, 1.0),
        gate: patterned(experts * hidden, salt + 1, 0.05),
        bias: bias.then(|| {
            patterned(experts, salt + 2, 0.05)
                .iter()
                .map(|b| 8.0 + b)
                .collect()
        }),
    }
}

fn bf16s(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// Chapter 5's tiny GEMM, CUDA-core form, on the case's inputs rounded to bf16.
fn tiny_logits(dev: &'static Device, c: &Case) -> Vec<f32> {
    let GateShape {
        rows,
        hidden: h,
        experts: e,
    } = c.shape;
    let m = dev.load(&tiny_gemm::KERNELS).unwrap();
    let x = dev.upload(&bf16s(&c.hidden)).unwrap();
    let w = dev.upload(&bf16s(&c.gate)).unwrap();
    let l = dev.alloc::<f32>(rows * e).unwrap();
    tiny_gemm::enqueue_as(GemmForm::CudaCores, &m, &x, &w, &l, rows, h, e).unwrap();
    l.to_vec().unwrap()
}

fn run(dev: &'static Device, c: &Case, block_m: usize) -> (StageOutput, Vec<f32>) {
    route_one_launch(
        dev,
        &c.config,
        c.shape,
        block_m,
        &c.hidden,
        &c.gate,
        c.bias.as_deref(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", c.name))
}

// ANCHOR: same_bits
/// The one launch against its two oracles: its logits against chapter 5's tiny GEMM, and
/// everything else against chapter 8's stage on those logits.
fn check_case(dev: &'static Device, c: &Case, block_m: usize) {
    let what = format!("{} (BLOCK_M {block_m})", c.name);
    let (got, logits) = run(dev, c, block_m);
    assert_same_bits(&format!("{what}: logits"), &logits, &tiny_logits(dev, c));
    let GateShape { rows, experts, .. } = c.shape;
    let want = route_stage(
        dev,
        &c.config,
        rows,
        experts,
        block_m,
        &logits,
        c.bias.as_deref(),
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.routing.ids, want.routing.ids, "{what}: ids");
    assert_same_bits(
        &format!("{what}: weights"),
        &got.routing.weights,
        &want.routing.weights,
    );
    assert_eq!(got.aligned, want.aligned, "{what}: layout");
    assert_eq!(got.counts, want.counts, "{what}: counts");
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
}
// ANCHOR_END: same_bits

fn same_bits_as_the_tiny_gemm_and_the_stage_on_every_regime(dev: &'static Device) {
    for c in regime_cases() {
        let pairs = c.shape.rows * c.config.k;
        for block_m in [16, choose_block_m(pairs, c.shape.experts)] {
            check_case(dev, &c, block_m);
        }
    }
}

fn same_bits_at_the_production_shapes(dev: &'static Device) {
    for (shape, rows) in [
        ("glm", 1),
        ("glm", 6),
        ("glm", 16),
        ("glm", 40),
        ("qwen3", 3),
        ("qwen3", 64),
        ("deepseek_v3", 5),
    ] {
        let c = shape_case(shape, rows, 9100 + rows as u64);
        check_case(dev, &c, choose_block_m(rows * 8, c.shape.experts));
    }
}

/// The first 4 rows of each of chapter 1's regimes, each as a batch of one, and one row of
/// Qwen3's, DeepSeek-V3's, the GLM-like and the widest shape (512 experts: every word of
/// `align_one_row`), the last two with k = 8 and k = 32 (every lane a pick), at `BLOCK_M` 16 and
/// 64: one row is laid out by its own code (`align_one_row`, by the warp that routed it), checked
/// against chapter 8's stage, which sorts it as it sorts any batch of few rows.
fn same_bits_one_row_at_a_time(dev: &'static Device) {
    for c in regime_cases() {
        let h = c.shape.hidden;
        for t in 0..c.shape.rows.min(4) {
            let row = Case {
                name: format!("{} row {t}", c.name),
                config: c.config.clone(),
                shape: GateShape { rows: 1, ..c.shape },
                hidden: c.hidden[t * h..(t + 1) * h].to_vec(),
                gate: c.gate.clone(),
                bias: c.bias.clone(),
            };
            for block_m in [16, 64] {
                check_case(dev, &row, block_m);
            }
        }
    }
    for (i, shape) in ["qwen3", "deepseek_v3", "glm", "wide"]
        .into_iter()
        .enumerate()
    {
        for k in [8, 32] {
            if k == 32 && !matches!(shape, "glm" | "wide") {
                continue;
            }
            let mut c = shape_case(shape, 1, 9150 + i as u64);
            if k == 32 {
                c.config = RouterConfig::glm5(32);
            }
            c.name = format!("{} k {k}", c.name);
            for block_m in [16, 64] {
                check_case(dev, &c, block_m);
            }
        }
    }
}

/// One router called three times on two inputs gives what a fresh one gives each time: the row
/// groups' tickets and the grid's were left at zero.
fn tickets_are_clean_for_the_next_call(dev: &'static Device) {
    let (a, mut b) = (shape_case("glm", 40, 9200), shape_case("glm", 40, 9300));
    b.gate = a.gate.clone(); // one router, one gate and bias: only the hidden states change
    b.bias = a.bias.clone();
    let r = OneLaunch::new(dev, &a.config, a.shape, 16, a.bias.as_deref()).unwrap();
    let out = r.alloc_outputs(dev).unwrap();
    let w = dev.upload(&bf16s(&a.gate)).unwrap();
    let bias = dev.upload(a.bias.as_deref().unwrap()).unwrap();
    for c in [&a, &b, &a] {
        let x = dev.upload(&bf16s(&c.hidden)).unwrap();
        r.enqueue(&x, &w, Some(&bias), &out).unwrap();
        let got = ch08_routing_stage::stage::download_stage(40, 8, &out).unwrap();
        assert_eq!(got, run(dev, c, 16).0, "{}: a later call differs", c.name);
    }
}

fn one_launch_and_its_name(dev: &'static Device) {
    assert_eq!(
        [1, 2, 4, 5, 16, 17, 9000].map(block_rows),
        [1, 4, 4, 16, 16, 16, 16]
    );
    assert_eq!(kernel_for(40, 288).as_deref(), Some("one_launch_r16_e288"));
    assert_eq!(kernel_for(1, 513), None);
    let c = shape_case("qwen3", 3, 9400);
    let (out, names) = record_launches(|| run(dev, &c, 16));
    assert_eq!(names, ["ch09_one_launch::one_launch_r4_e128"]);
    assert_eq!(out.0.routing.rows, 3);
    let mut empty = shape_case("qwen3", 0, 9401);
    empty.shape.rows = 0;
    let (out, names) = record_launches(|| run(dev, &empty, 16));
    assert!(names.is_empty(), "{names:?}");
    assert!(out.0.routing.ids.is_empty() && out.0.aligned.sorted_ids.is_empty());
}

fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let c = shape_case("qwen3", 3, 9500);
    let new = |shape: GateShape, config: &RouterConfig, bias: Option<&[f32]>| {
        OneLaunch::new(dev, config, shape, 16, bias).err()
    };
    // H no multiple of 8: the tiny GEMM reads whole 16-byte slices.
    let odd = GateShape {
        hidden: 2047,
        ..c.shape
    };
    assert!(matches!(
        new(odd, &c.config, None),
        Some(StageError::Router(DeviceRouterError::NotMultiple {
            of: 8,
            got: 2047,
            ..
        }))
    ));
    // More experts than the sort's table holds; k past 32.
    let wide = GateShape {
        experts: 600,
        ..c.shape
    };
    assert!(matches!(
        new(wide, &c.config, None),
        Some(StageError::Router(DeviceRouterError::Limit {
            limit: 512,
            got: 600,
            ..
        }))
    ));
    assert!(matches!(
        new(c.shape, &RouterConfig::qwen3(33), None),
        Some(StageError::Router(DeviceRouterError::Limit {
            limit: 32,
            ..
        }))
    ));
    // Buffers of the wrong size, a bias the router was not built for.
    let r = OneLaunch::new(dev, &c.config, c.shape, 16, None).unwrap();
    let out = r.alloc_outputs(dev).unwrap();
    let x = dev.upload(&bf16s(&c.hidden)).unwrap();
    let w = dev.upload(&bf16s(&c.gate)).unwrap();
    let short = dev.upload(&bf16s(&c.hidden[..100])).unwrap();
    let e = r.enqueue(&short, &w, None, &out).unwrap_err();
    assert_eq!(
        e.to_string(),
        "hidden [T, H] has 100 elements, expected 6144"
    );
    let e = r.enqueue(&w, &x, None, &out).unwrap_err();
    assert!(e.to_string().starts_with("hidden [T, H] has 262144"), "{e}");
    let b = dev.upload(&[0.0f32; 128]).unwrap();
    let e = r.enqueue(&x, &w, Some(&b), &out).unwrap_err();
    assert!(e.to_string().contains("built without one"), "{e}");
}

moe_kernels::backend_tests!(
    same_bits_as_the_tiny_gemm_and_the_stage_on_every_regime,
    same_bits_at_the_production_shapes,
    same_bits_one_row_at_a_time,
    tickets_are_clean_for_the_next_call,
    one_launch_and_its_name,
    bad_inputs_are_typed_errors,
);

#[test]
#[ignore = "needs a GPU"]
fn emulator_and_gpu_give_the_same_bits() {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    let mut cases = regime_cases();
    cases.push(shape_case("glm", 96, 9600));
    cases.push(shape_case("deepseek_v3", 40, 9601));
    for c in &cases {
        let bm = choose_block_m(c.shape.rows * c.config.k, c.shape.experts);
        let ((got, got_logits), (want, want_logits)) = (run(gpu, c, bm), run(emu, c, bm));
        assert_eq!(got, want, "{}", c.name);
        // By bits, up to a NaN's payload: the NaN regimes' logits hold NaN, which `==` never
        // equals, and the GPU writes the canonical NaN where x86 passes an operand's payload on
        // (chapter 5's logits are compared the same way). The ids and weights above are exact.
        moe_kernels::testing::assert_same_bits_up_to_nan_payload(
            &format!("{}: logits", c.name),
            &got_logits,
            &want_logits,
        );
    }
}

// ANCHOR: deterministic
/// One hash over 1,000 runs on the GPU at 1, 96 and 8,192 rows: the last-block protocol picks
/// a different block to route and sort from run to run, never a different result.
#[test]
#[ignore = "needs a GPU"]
fn one_hash_over_1000_runs() {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};
    let gpu = moe_kernels::testing::cuda();
    for rows in [1, 96, 8192] {
        let c = shape_case("glm", rows, 9700);
        let r = OneLaunch::new(gpu, &c.config, c.shape, 16, c.bias.as_deref()).unwrap();
        let out = r.alloc_outputs(gpu).unwrap();
        let x = gpu.upload(&bf16s(&c.hidden)).unwrap();
        let w = gpu.upload(&bf16s(&c.gate)).unwrap();
        let b = gpu.upload(c.bias.as_deref().unwrap()).unwrap();
        let mut hashes = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            r.enqueue(&x, &w, Some(&b), &out).unwrap();
            let s = ch08_routing_stage::stage::download_stage(rows, 8, &out).unwrap();
            let mut h = DefaultHasher::new();
            s.routing.ids.hash(&mut h);
            s.routing
                .weights
                .iter()
                .map(|w| w.to_bits())
                .collect::<Vec<_>>()
                .hash(&mut h);
            s.aligned.sorted_ids.hash(&mut h);
            s.aligned.expert_ids.hash(&mut h);
            hashes.insert(h.finish());
        }
        assert_eq!(
            hashes.len(),
            1,
            "{rows} rows: {} different results",
            hashes.len()
        );
    }
}
// ANCHOR_END: deterministic
