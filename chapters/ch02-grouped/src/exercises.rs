//! Chapter 2's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with
//! `tools/steps exercises 2` (or `cargo test -p ch02-grouped --test exercises -- --ignored`).
//! The kernel of exercise 3 is in `kernels/ch02_exercises.cu`. The answers live apart, in
//! `chapters/ch02-grouped/answers/` and `kernels/answers/`; `--features answers` builds them in
//! place of these stubs.

use crate::error::MoeError;
use crate::weights::MoeWeights;
use ch01_router::Routing;
use moe_kernels::{Device, DeviceBuffer, KernelSource};

/// `kernels/ch02_exercises.cu` (the answer's version with `--features answers`).
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch02_exercises");

// ANCHOR: exercise_1
/// Exercise 1: group a routing's pairs by expert, as [`crate::plan::GroupPlan`] does: return
/// `(offsets [E + 1], token_of [T·k])`, where expert `e`'s pairs occupy slots
/// `offsets[e]..offsets[e + 1]` and, within an expert, pairs keep their order `t·k + j`.
/// Ids are in range (the caller checked).
pub fn group_by_expert(routing: &Routing, experts: usize) -> (Vec<usize>, Vec<i32>) {
    let _ = (routing, experts);
    todo!(
        "exercise 1: count, prefix-sum the counts, then place each pair at its expert's next slot"
    )
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the shared expert as one more routed expert. Return weights with `E + 1`
/// experts, where expert `E` is the (ungated) shared expert, and a routing with `k + 1` slots
/// per token, where the last slot is expert `E` with weight 1 — so that the grouped loop
/// *without* a shared expert computes the same layer. The new layer's router is never run (the
/// routing is given to [`crate::layer::MoeLayer::experts`]), but its config must still be valid:
/// `k + 1`, no groups (E + 1 experts rarely split into the same groups), a gate row and a bias
/// of 0 for expert E.
pub fn shared_as_routed(
    weights: &MoeWeights,
    routing: &Routing,
) -> Result<(MoeWeights, Routing), MoeError> {
    let _ = (weights, routing);
    todo!(
        "exercise 2: append the shared expert's w13 and w2 as expert E, and slot k of every token"
    )
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: count the pairs each expert received, on the device, with one launch of your
/// kernel `ex_count_pairs` (one thread per pair, 256 per block). `ids` `[P]` i32; returns `[E]`.
pub fn count_pairs_on_device(
    device: &'static Device,
    ids: &DeviceBuffer<i32>,
    experts: usize,
) -> Result<Vec<i32>, MoeError> {
    let _ = (device, ids, experts);
    todo!("exercise 3: zeroed counts, one launch of ex_count_pairs, download")
}
// ANCHOR_END: exercise_3
