//! Chapter 10: the batch decides the kernel, and what the deterministic mode costs.
//!
//! 1. `ch10_batch.csv`: 64 probe tokens through chapter 6's layer and through the deterministic
//!    mode at batch sizes 1 to 8,192 (below 64 the probes in batches of that size; from 64 the
//!    first B tokens of one set, the probes first): how many probes change their expert set, and
//!    how many change any output bit, against the same probe in a batch of 1.
//! 2. `ch10.csv`: `layer` (chapter 6's) and `layer_deterministic` timed at chapter 4's token
//!    counts on both shapes, in the same session: the mode's cost along T.
//!
//! ```text
//! tools/bench/run ch10 [--out-dir D] [--quick]
//! ```

use crate::cases::{self, Case, Work, WorkFn};
use crate::ch06::{self, Shape};
use crate::common::{write, GpuArgs};
use ch02_grouped::{MoeError, MoeLayer};
use ch10_precision::deterministic::deterministic;
use half::bf16;
use moe_kernels::{BackendKind, Device};
use std::fmt::Write as _;

/// The batch axis of `ch10_batch.csv`.
pub const BATCHES: [usize; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 512, 1024, 4096, 8192];
const TINY_BATCHES: [usize; 4] = [1, 2, 8, 40];
/// Probe tokens (the first of every batch from 64 on).
const PROBES: usize = 64;
const TINY_PROBES: usize = 8;

/// One probe's sorted expert set and its output row as bits.
type Probe = (Vec<u32>, Vec<u32>);

/// The probes' (sorted expert sets, output rows as bits) in batches of `b`.
fn probe(
    layer: &dyn MoeLayer,
    x: &[f32],
    h: usize,
    k: usize,
    probes: usize,
    b: usize,
) -> Result<Vec<Probe>, MoeError> {
    let mut v = Vec::with_capacity(probes);
    let mut run = |rows: &[f32], take: usize| -> Result<(), MoeError> {
        let out = layer.forward(rows)?;
        for t in 0..take {
            let mut ids = out.routing.ids[t * k..(t + 1) * k].to_vec();
            ids.sort_unstable();
            let bits = out.out[t * h..(t + 1) * h]
                .iter()
                .map(|x| x.to_bits())
                .collect();
            v.push((ids, bits));
        }
        Ok(())
    };
    if b < probes {
        for c in (0..probes).step_by(b) {
            let end = (c + b).min(probes);
            run(&x[c * h..end * h], end - c)?;
        }
    } else {
        run(&x[..b * h], probes)?;
    }
    Ok(v)
}

/// `ch10_batch.csv`'s rows for one shape: both layers along the batch axis.
fn batch_rows(
    dev: &'static Device,
    shape: &Shape,
    batches: &[usize],
    probes: usize,
) -> Result<String, String> {
    let (h, k) = (shape.hidden, shape.k);
    let most = *batches.iter().max().unwrap();
    let x: Vec<f32> = ch06::hidden(dev, shape, most)?
        .to_vec()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(bf16::to_f32)
        .collect();
    let e = |e: MoeError| e.to_string();
    let plain = ch06::new_layer(dev, shape)?;
    let det = deterministic(ch06::new_layer(dev, shape)?).map_err(e)?;
    let mut csv = String::new();
    for (name, layer) in [
        ("layer", &plain as &dyn MoeLayer),
        ("layer_deterministic", &det as &dyn MoeLayer),
    ] {
        let alone = probe(layer, &x, h, k, probes, 1).map_err(e)?;
        for &b in batches {
            let got = probe(layer, &x, h, k, probes, b).map_err(e)?;
            let sets = got.iter().zip(&alone).filter(|(g, a)| g.0 != a.0).count();
            let bits = got.iter().zip(&alone).filter(|(g, a)| g.1 != a.1).count();
            writeln!(csv, "{},{name},{b},{probes},{sets},{bits}", shape.name).unwrap();
            eprintln!(
                "bench ch10: {} {name} batch {b}: {sets} of {probes} probes changed experts, {bits} output bits",
                shape.name
            );
        }
    }
    Ok(csv)
}

fn layer_case(shape: &'static Shape, t: usize, det: bool, (bytes, flops): (f64, f64)) -> Case {
    Case {
        chapter: "ch10",
        shape: shape.name,
        imp: if det { "layer_deterministic" } else { "layer" },
        rows: t,
        bytes,
        read_bytes: bytes,
        flops,
        steps: false,
        build: Box::new(move |dev| {
            let e = |e: MoeError| e.to_string();
            let x = ch06::hidden(dev, shape, t)?;
            let out = dev
                .alloc::<f32>(t * shape.hidden)
                .map_err(|e| e.to_string())?;
            let layer = ch06::new_layer(dev, shape)?;
            Ok(if det {
                let l = deterministic(layer).map_err(e)?;
                let ws = l.workspace(t).map_err(e)?;
                Box::new(WorkFn(move || l.enqueue(&ws, &x, &out).map_err(e))) as Box<dyn Work>
            } else {
                let ws = layer.workspace(t).map_err(e)?;
                Box::new(WorkFn(move || layer.enqueue(&ws, &x, &out).map_err(e)))
            })
        }),
    }
}

pub fn run(args: &GpuArgs) -> Result<(), String> {
    let quick = args.quick || cases::quick_from_env();
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    let (shapes, tokens, batches, probes): (&'static [Shape], &[usize], &[usize], usize) = match dev
        .kind()
    {
        BackendKind::Cuda => (&ch06::SHAPES, &ch06::TOKENS, &BATCHES, PROBES),
        BackendKind::Emu if quick => (&ch06::TINY, &ch06::TINY_TOKENS, &TINY_BATCHES, TINY_PROBES),
        BackendKind::Emu => return Err(cases::emulator_refusal("ch10", &why)),
    };
    let mut batch_csv = String::from("shape,layer,batch,probes,set_changed,bits_changed\n");
    let mut cases = Vec::new();
    for shape in shapes {
        batch_csv += &batch_rows(dev, shape, batches, probes)?;
        for &t in tokens {
            let floor = ch06::layer_floor(dev, shape, t)?;
            cases.push(layer_case(shape, t, false, floor));
            cases.push(layer_case(shape, t, true, floor));
        }
    }
    if dev.kind() == BackendKind::Emu {
        print!("{batch_csv}");
    } else {
        write(&args.out_dir.join("ch10_batch.csv"), &batch_csv)?;
    }
    cases::time_or_smoke(dev, quick, "ch10", "tokens", &cases, &args.out_dir)
}
