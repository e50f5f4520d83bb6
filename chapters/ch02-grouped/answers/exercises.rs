//! Answers to chapter 2's exercises (the stubs are `src/exercises.rs`). Built in their place with
//! `--features answers`; `tools/steps check` runs the exercise tests on these.

use crate::error::MoeError;
use crate::weights::MoeWeights;
use ch01_router::Routing;
use moe_kernels::{args, Device, DeviceBuffer, KernelSource, LaunchConfig};

/// `kernels/answers/ch02_exercises.cu`.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch02_exercises");

// ANCHOR: exercise_1
/// Exercise 1: a counting sort, stable because the pairs are placed in the order they are read.
pub fn group_by_expert(routing: &Routing, experts: usize) -> (Vec<usize>, Vec<i32>) {
    let mut offsets = vec![0usize; experts + 1];
    for &e in &routing.ids {
        offsets[e as usize + 1] += 1;
    }
    for e in 0..experts {
        offsets[e + 1] += offsets[e];
    }
    let mut next = offsets.clone();
    let mut token_of = vec![0i32; routing.ids.len()];
    for (p, &e) in routing.ids.iter().enumerate() {
        token_of[next[e as usize]] = (p / routing.k) as i32;
        next[e as usize] += 1;
    }
    (offsets, token_of)
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the shared expert's `[2Is, H]` and `[H, Is]` become expert E — which needs
/// `Is = I`, since every expert of a packed `w13` has the same shape. Every token then picks it
/// last, with weight 1.
pub fn shared_as_routed(
    weights: &MoeWeights,
    routing: &Routing,
) -> Result<(MoeWeights, Routing), MoeError> {
    let c = &weights.config;
    let (Some(s), Some(sw)) = (c.shared, &weights.shared) else {
        return Err(MoeError::Config {
            field: "shared expert",
            expected: "one".into(),
            found: "none".into(),
        });
    };
    if s.intermediate != c.intermediate || s.gated {
        return Err(MoeError::Config {
            field: "shared expert intermediate",
            expected: format!("{} (the routed experts' size), ungated", c.intermediate),
            found: format!("{}, gated {}", s.intermediate, s.gated),
        });
    }
    let mut w = weights.clone();
    w.config.experts += 1;
    w.config.shared = None;
    w.shared = None;
    w.w13.extend_from_slice(&sw.w13);
    w.w2.extend_from_slice(&sw.w2);
    // The router's gate and bias gain a row for expert E; it is never routed to by them.
    w.gate.extend(std::iter::repeat_n(0.0, c.hidden));
    if let Some(b) = w.bias.as_mut() {
        b.push(0.0);
    }
    let k = routing.k + 1;
    let mut ids = Vec::with_capacity(routing.rows * k);
    let mut ws = Vec::with_capacity(routing.rows * k);
    for t in 0..routing.rows {
        ids.extend_from_slice(routing.row_ids(t));
        ids.push(c.experts as u32);
        ws.extend_from_slice(routing.row_weights(t));
        ws.push(1.0);
    }
    w.config.router.k = k;
    w.config.router.grouping = None;
    Ok((
        w,
        Routing {
            rows: routing.rows,
            k,
            ids,
            weights: ws,
        },
    ))
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: one launch, one thread per pair.
pub fn count_pairs_on_device(
    device: &'static Device,
    ids: &DeviceBuffer<i32>,
    experts: usize,
) -> Result<Vec<i32>, MoeError> {
    let m = device.load(&KERNELS)?;
    let counts = device.zeros::<i32>(experts)?;
    if !ids.is_empty() {
        m.launch(
            "ex_count_pairs",
            LaunchConfig::for_elements(ids.len(), 256),
            &args![ids, &counts, ids.len() as i32, experts as i32],
        )?;
    }
    Ok(counts.to_vec()?)
}
// ANCHOR_END: exercise_3
