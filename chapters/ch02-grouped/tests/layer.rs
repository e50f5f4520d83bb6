//! The three implementations of the layer on every regime, both compute types and every backend
//! (the emulator always, the GPU with `--include-ignored` on a GPU machine), against the f64
//! oracle; the small kernels against host arithmetic, bit for bit; launch counts; determinism;
//! and every error a user can provoke.

use ch01_router::{RouterConfig, RouterError, Routing};
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::{check_layer, oracle, regime_text};
use ch02_grouped::device::{GroupedDevice, KERNELS};
use ch02_grouped::regimes::{regime, REGIMES};
use ch02_grouped::{Dtype, GroupPlan, GroupedCpu, MoeError, MoeLayer, MoeWeights};
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{args, record_launches, Device, KernelArg, LaunchConfig};

const DTYPES: [Dtype; 2] = [Dtype::F32, Dtype::Bf16];

// ANCHOR: every_regime
/// The one test body: on every regime, in f32 and bf16, the CPU grouped loop and the device
/// grouped loop against the literal oracle, and the oracle's text against the snapshot.
fn grouped_layers_match_the_oracle_on_every_regime(dev: &'static Device) {
    let mut worst = Vec::new();
    for name in REGIMES {
        let r = regime(name).unwrap();
        for dtype in DTYPES {
            let o = oracle(&r, dtype);
            let cpu = GroupedCpu::new(&r.weights, dtype).unwrap();
            let gpu = GroupedDevice::new(dev, &r.weights, dtype).unwrap();
            for layer in [&cpu as &dyn MoeLayer, &gpu] {
                let (e, f) = check_layer(&r, &o, layer).unwrap_or_else(|e| panic!("{e}"));
                worst.push((e.relative.max(f.relative), *name, layer.name(), dtype));
            }
            // Each implementation checks the next: the device against the CPU grouped loop, which
            // rounds at the same places.
            let (c, g) = (
                cpu.experts(&r.hidden, &o.routing).unwrap(),
                gpu.experts(&r.hidden, &o.routing).unwrap(),
            );
            let e = check_output(
                &format!("{name} {dtype}: device vs CPU"),
                &c,
                &g,
                Tolerance::between(dtype),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            worst.push((e.relative, *name, "device-vs-cpu", dtype));
            insta::with_settings!({ prepend_module_to_snapshot => false }, {
                insta::assert_snapshot!(format!("ch02_{name}_{dtype}"), regime_text(&r, dtype, &o));
            });
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for dtype in DTYPES {
        for what in ["grouped-cpu", "grouped-device", "device-vs-cpu"] {
            let w = worst.iter().find(|w| w.3 == dtype && w.2 == what).unwrap();
            eprintln!(
                "largest relative error, {what} in {dtype}: {:.2e} ({})",
                w.0, w.1
            );
        }
    }
}
// ANCHOR_END: every_regime

/// Every regime sends its pairs where its name says.
fn regimes_do_what_their_names_say(_dev: &'static Device) {
    let plan = |name: &str| {
        let r = regime(name).unwrap();
        let o = oracle(&r, Dtype::F32);
        GroupPlan::new(&o.routing, r.weights.config.experts).unwrap()
    };
    assert_eq!(plan("all_to_one_expert").active_experts(), vec![5]);
    let many = plan("tiny_batch_many_empty_experts");
    assert!(many.active_experts().len() <= 12);
    let imb = plan("imbalanced_routing");
    let mut counts: Vec<usize> = (0..16).map(|e| imb.count(e)).collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    assert!(
        counts[0] + counts[1] + counts[2] >= imb.pairs() / 2,
        "{counts:?}"
    );
    assert_eq!(plan("empty_batch").pairs(), 0);
}

/// The device layer launches exactly: (the shared expert's,) gather, one GEMM per active expert,
/// SwiGLU, one GEMM per active expert, combine — and nothing for an empty batch.
fn launches_are_three_plus_two_per_active_expert(dev: &'static Device) {
    for name in [
        "tiny_batch_many_empty_experts",
        "all_to_one_expert",
        "gated_shared_expert",
        "empty_batch",
    ] {
        let r = regime(name).unwrap();
        for dtype in DTYPES {
            let layer = GroupedDevice::new(dev, &r.weights, dtype).unwrap();
            let o = oracle(&r, dtype);
            let ws = layer.workspace(&o.routing).unwrap();
            let x = dev.upload(&r.hidden).unwrap();
            let out = dev.alloc::<f32>(r.hidden.len()).unwrap();
            let (res, launched) = record_launches(|| layer.enqueue_experts(&ws, &x, &out));
            res.unwrap();
            let active = ws.plan().active_experts().len();
            let g = |s: &str| format!("ch02_grouped::ch02_{s}_{dtype}");
            let mut want = Vec::new();
            if r.rows > 0 {
                if let Some(s) = r.weights.config.shared {
                    if dtype == Dtype::Bf16 {
                        want.push(g("gather"));
                    }
                    want.extend([
                        "blas::linear".to_string(),
                        g("swiglu"),
                        "blas::linear".to_string(),
                    ]);
                    if s.gated {
                        want.push("blas::linear".to_string());
                    }
                }
                want.push(g("gather"));
                want.extend(std::iter::repeat_n("blas::linear".to_string(), active));
                want.push(g("swiglu"));
                want.extend(std::iter::repeat_n("blas::linear".to_string(), active));
                want.push("ch02_grouped::ch02_combine".to_string());
            }
            assert_eq!(launched, want, "{name} {dtype}");
            assert_eq!(layer.launches(ws.plan()), want.len(), "{name} {dtype}");
        }
    }
}

/// Same input, same bits: no float atomics anywhere in the device layer.
fn device_layer_is_deterministic(dev: &'static Device) {
    let r = regime("large_prefill").unwrap();
    for dtype in DTYPES {
        let layer = GroupedDevice::new(dev, &r.weights, dtype).unwrap();
        let first = layer.forward(&r.hidden).unwrap();
        for _ in 0..3 {
            let again = layer.forward(&r.hidden).unwrap();
            assert_eq!(again.routing, first.routing);
            assert_same_bits(&format!("large_prefill {dtype}"), &again.out, &first.out);
        }
    }
}

fn bits(v: &[half::bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The three kernels against host arithmetic, bit for bit: the gather copies (and rounds to
/// bf16 like `half`), SwiGLU's sigmoid against the emulator's own build of the kernel (on the
/// GPU: the emulator and the GPU agree), the combine against `f32::mul_add` in slot order.
fn small_kernels_match_the_host_bit_for_bit(dev: &'static Device) {
    let m = dev.load(&KERNELS).unwrap();
    let (t, h, k, p, i) = (5usize, 70usize, 3usize, 15usize, 33usize);
    let hidden = ch01_router::inputs::patterned(t * h, 7, 3.0);
    let token_of: Vec<i32> = (0..p as i32).map(|s| (s * 7) % t as i32).collect();
    let hb = dev.upload(&hidden).unwrap();
    let tb = dev.upload(&token_of).unwrap();
    // gather
    let xs32 = dev.alloc::<f32>(p * h).unwrap();
    let xs16 = dev.alloc::<half::bf16>(p * h).unwrap();
    let cfg = LaunchConfig::blocks(p as u32, 256);
    m.launch(
        "ch02_gather_f32",
        cfg,
        &args![&hb, &tb, &xs32, p as i32, h as i32],
    )
    .unwrap();
    m.launch(
        "ch02_gather_bf16",
        cfg,
        &args![&hb, &tb, &xs16, p as i32, h as i32],
    )
    .unwrap();
    let want32: Vec<f32> = token_of
        .iter()
        .flat_map(|&tok| hidden[tok as usize * h..(tok as usize + 1) * h].to_vec())
        .collect();
    let want16: Vec<half::bf16> = want32.iter().map(|&x| half::bf16::from_f32(x)).collect();
    assert_same_bits("gather f32", &xs32.to_vec().unwrap(), &want32);
    assert_same_bits(
        "gather bf16",
        &bits(&xs16.to_vec().unwrap()),
        &bits(&want16),
    );

    // SwiGLU, f32: against f64 within 4 ulp of the result (silu's sigmoid, a division and two
    // products each round once); both types against the emulator's build, bit for bit.
    let gu = ch01_router::inputs::patterned(p * 2 * i, 8, 12.0);
    let swiglu = |d: &'static Device, bf16: bool| -> Vec<u32> {
        let m = d.load(&KERNELS).unwrap();
        let cfg = LaunchConfig::for_elements(p * i, 256);
        if bf16 {
            let g16: Vec<half::bf16> = gu.iter().map(|&x| half::bf16::from_f32(x)).collect();
            let (gb, a) = (
                d.upload(&g16).unwrap(),
                d.alloc::<half::bf16>(p * i).unwrap(),
            );
            m.launch("ch02_swiglu_bf16", cfg, &args![&gb, &a, p as i32, i as i32])
                .unwrap();
            a.to_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits() as u32)
                .collect()
        } else {
            let (gb, a) = (d.upload(&gu).unwrap(), d.alloc::<f32>(p * i).unwrap());
            m.launch("ch02_swiglu_f32", cfg, &args![&gb, &a, p as i32, i as i32])
                .unwrap();
            a.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
        }
    };
    let got: Vec<f32> = swiglu(dev, false).into_iter().map(f32::from_bits).collect();
    for s in 0..p {
        for c in 0..i {
            let (g, u) = (gu[s * 2 * i + c] as f64, gu[s * 2 * i + i + c] as f64);
            let want = g / (1.0 + (-g).exp()) * u;
            let d = (got[s * i + c] as f64 - want).abs();
            assert!(
                d <= 4.0 * f32::EPSILON as f64 * want.abs().max(1e-30),
                "swiglu[{s},{c}]: {} vs {want}",
                got[s * i + c]
            );
        }
    }
    for bf16 in [false, true] {
        assert_same_bits(
            &format!("swiglu (bf16 {bf16}), this backend vs the emulator"),
            &swiglu(dev, bf16),
            &swiglu(Device::emu(), bf16),
        );
    }

    // The combine: without the shared expert exactly Σⱼ fmaf in slot order; with it, that sum
    // plus the shared row (exact); with a gated shared expert, the same bits as the emulator
    // and within 4 ulp of the sigmoid's f64 value.
    let y = ch01_router::inputs::patterned(p * h, 9, 2.0);
    let slot_of: Vec<i32> = (0..(t * k) as i32)
        .map(|q| (q * 4 + 1) % p as i32)
        .collect();
    let w = ch01_router::inputs::patterned(t * k, 10, 1.0);
    let shared = ch01_router::inputs::patterned(t * h, 11, 1.0);
    let gate = ch01_router::inputs::patterned(t, 12, 4.0);
    let combine = |d: &'static Device, with_shared: bool, gated: bool| -> Vec<f32> {
        let m = d.load(&KERNELS).unwrap();
        let (yb, sb, wb) = (
            d.upload(&y).unwrap(),
            d.upload(&slot_of).unwrap(),
            d.upload(&w).unwrap(),
        );
        let (shb, gb) = (d.upload(&shared).unwrap(), d.upload(&gate).unwrap());
        let out = d.alloc::<f32>(t * h).unwrap();
        let sh = if with_shared {
            KernelArg::from(&shb)
        } else {
            KernelArg::Ptr(0)
        };
        let g = if gated {
            KernelArg::from(&gb)
        } else {
            KernelArg::Ptr(0)
        };
        m.launch(
            "ch02_combine",
            LaunchConfig::for_elements(t * h, 256),
            &args![&yb, &sb, &wb, sh, g, &out, t as i32, h as i32, k as i32],
        )
        .unwrap();
        out.to_vec().unwrap()
    };
    let routed = |tok: usize, c: usize| {
        let mut acc = 0f32;
        for j in 0..k {
            acc = w[tok * k + j].mul_add(y[slot_of[tok * k + j] as usize * h + c], acc);
        }
        acc
    };
    let want: Vec<f32> = (0..t * h).map(|e| routed(e / h, e % h)).collect();
    assert_same_bits("combine", &combine(dev, false, false), &want);
    let want: Vec<f32> = (0..t * h)
        .map(|e| routed(e / h, e % h) + shared[e])
        .collect();
    assert_same_bits("combine + shared", &combine(dev, true, false), &want);
    let got = combine(dev, true, true);
    assert_same_bits(
        "combine + gated shared, this backend vs the emulator",
        &got,
        &combine(Device::emu(), true, true),
    );
    for e in 0..t * h {
        let sig = 1.0 / (1.0 + (-(gate[e / h] as f64)).exp());
        let want = routed(e / h, e % h) as f64 + shared[e] as f64 * sig;
        let d = (got[e] as f64 - want).abs();
        assert!(
            d <= 4.0 * f32::EPSILON as f64 * (want.abs() + (shared[e] as f64).abs()),
            "gated combine[{e}]: {} vs {want}",
            got[e]
        );
    }
}

/// Every error a user can provoke is a typed error naming what is wrong.
fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let r = regime("spec_decode_6rows").unwrap();
    let o = oracle(&r, Dtype::F32);
    let layers: Vec<Box<dyn MoeLayer>> = vec![
        Box::new(ch02_grouped::LiteralLayer::new(&r.weights, Dtype::F32).unwrap()),
        Box::new(GroupedCpu::new(&r.weights, Dtype::F32).unwrap()),
        Box::new(GroupedDevice::new(dev, &r.weights, Dtype::F32).unwrap()),
    ];
    for l in &layers {
        // hidden not a multiple of H
        let e = l.forward(&r.hidden[..r.hidden.len() - 1]).unwrap_err();
        assert!(matches!(e, MoeError::Shape { .. }), "{}: {e}", l.name());
        // a routing for another batch size
        let e = l.experts(&r.hidden[..128], &o.routing).unwrap_err();
        assert!(matches!(e, MoeError::Shape { .. }), "{}: {e}", l.name());
        // an id out of range
        let mut bad = o.routing.clone();
        bad.ids[9] = 64;
        let e = l.experts(&r.hidden, &bad).unwrap_err();
        assert_eq!(
            e,
            MoeError::IdOutOfRange {
                row: 1,
                slot: 1,
                id: 64,
                experts: 64
            },
            "{}",
            l.name()
        );
        // an empty batch is valid
        let empty = l.forward(&[]).unwrap();
        assert_eq!((empty.routing.rows, empty.out.len()), (0, 0));
        let e = l.experts(&[], &Routing::empty(8)).unwrap();
        assert!(e.is_empty());
    }
    // configs and weights
    let mut w: MoeWeights = r.weights.clone();
    w.config.router = RouterConfig::glm5(65);
    let e = GroupedDevice::new(dev, &w, Dtype::Bf16).err().unwrap();
    assert_eq!(
        e,
        MoeError::Router(RouterError::KTooLarge { k: 65, experts: 64 })
    );
    let mut w = r.weights.clone();
    w.w2.pop();
    let e = GroupedCpu::new(&w, Dtype::F32).err().unwrap();
    let want = w.config.w2_len();
    assert_eq!(
        e.to_string(),
        format!("w2 [E, H, I] has {} elements, expected {want}", want - 1)
    );
    let mut w = r.weights.clone();
    w.config.intermediate = 0;
    let e = ch02_grouped::LiteralLayer::new(&w, Dtype::F32)
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "config field `intermediate` is 0, expected at least 1"
    );
}

moe_kernels::backend_tests!(
    grouped_layers_match_the_oracle_on_every_regime,
    regimes_do_what_their_names_say,
    launches_are_three_plus_two_per_active_expert,
    device_layer_is_deterministic,
    small_kernels_match_the_host_bit_for_bit,
    bad_inputs_are_typed_errors,
);
