//! Host in, host out: the three fronts of [`crate::merged`] on host data, and the flip rate of
//! the bf16-output variant along the row axis.

use crate::front::{to_bf16, FrontInputs, FrontShape};
use crate::merged::{Bf16Gate, FrontOutputs, MergedGate, SeparateGate};
use crate::radix::RadixForm;
use ch01_router::chain::{DeviceRouterError, RouterOutputs};
use ch01_router::config::RouterConfig;
use ch01_router::device_router::download;
use ch01_router::routing::Routing;
use half::bf16;
use moe_kernels::{record_launches, Device, DeviceBuffer};

/// What a front returned: the routing, the projection `[T, P]` in bf16, and the kernels it
/// launched.
#[derive(Clone, Debug)]
pub struct FrontResult {
    pub routing: Routing,
    pub proj: Vec<bf16>,
    pub launches: Vec<String>,
}

struct Uploaded {
    hidden: DeviceBuffer<bf16>,
    bias: DeviceBuffer<f32>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
    proj: DeviceBuffer<bf16>,
}

fn upload(
    device: &'static Device,
    shape: FrontShape,
    k: usize,
    inputs: &FrontInputs,
) -> Result<Uploaded, DeviceRouterError> {
    let t = inputs.rows;
    Ok(Uploaded {
        hidden: device.upload(&to_bf16(&inputs.hidden))?,
        bias: device.upload(&inputs.bias)?,
        ids: device.alloc(t * k)?,
        weights: device.alloc(t * k)?,
        proj: device.alloc(t * shape.proj)?,
    })
}

impl Uploaded {
    fn outputs(&self) -> FrontOutputs<'_> {
        FrontOutputs {
            ids: &self.ids,
            weights: &self.weights,
            proj: &self.proj,
        }
    }

    fn result(
        &self,
        rows: usize,
        k: usize,
        launches: Vec<String>,
    ) -> Result<FrontResult, DeviceRouterError> {
        Ok(FrontResult {
            routing: download(rows, k, &self.ids, &self.weights)?,
            proj: self.proj.to_vec()?,
            launches,
        })
    }
}

/// The separate front ([`SeparateGate`]) on `inputs`.
pub fn run_separate(
    device: &'static Device,
    config: &RouterConfig,
    shape: FrontShape,
    inputs: &FrontInputs,
) -> Result<FrontResult, DeviceRouterError> {
    run_separate_on(device, config, shape, inputs, false)
}

/// The separate front on `inputs`, on two streams when `two_streams`
/// ([`SeparateGate::on_two_streams`]).
pub fn run_separate_on(
    device: &'static Device,
    config: &RouterConfig,
    shape: FrontShape,
    inputs: &FrontInputs,
    two_streams: bool,
) -> Result<FrontResult, DeviceRouterError> {
    let mut front = SeparateGate::new(device, config, shape, inputs.rows, Some(&inputs.bias))?;
    if two_streams {
        front = front.on_two_streams();
    }
    let u = upload(device, shape, config.k, inputs)?;
    let gate = device.upload(&to_bf16(&inputs.gate))?;
    let proj_w = device.upload(&to_bf16(&inputs.proj))?;
    let (r, launches) =
        record_launches(|| front.enqueue(&u.hidden, &gate, &proj_w, Some(&u.bias), &u.outputs()));
    r?;
    u.result(inputs.rows, config.k, launches)
}

/// The merged front ([`MergedGate`]) on `inputs`; also returns the GEMM's fp32 output
/// `[T, E + P]`.
pub fn run_merged(
    device: &'static Device,
    config: &RouterConfig,
    shape: FrontShape,
    inputs: &FrontInputs,
) -> Result<(FrontResult, Vec<f32>), DeviceRouterError> {
    run_merged_as(device, config, shape, inputs, None)
}

/// [`run_merged`] with the kernel after the GEMM selecting as radix select's `form` does
/// ([`MergedGate::with_form`]), whatever the rows; `None`: as the rows pick.
pub fn run_merged_as(
    device: &'static Device,
    config: &RouterConfig,
    shape: FrontShape,
    inputs: &FrontInputs,
    form: Option<RadixForm>,
) -> Result<(FrontResult, Vec<f32>), DeviceRouterError> {
    let mut front = MergedGate::new(device, config, shape, inputs.rows, Some(&inputs.bias))?;
    if let Some(form) = form {
        front = front.with_form(form);
    }
    let u = upload(device, shape, config.k, inputs)?;
    let stacked = device.upload(&to_bf16(&inputs.stacked()))?;
    let (r, launches) =
        record_launches(|| front.enqueue(&u.hidden, &stacked, Some(&u.bias), &u.outputs()));
    r?;
    Ok((
        u.result(inputs.rows, config.k, launches)?,
        front.y().to_vec()?,
    ))
}

/// The bf16-output variant ([`Bf16Gate`]) on `inputs`: its routing.
pub fn run_bf16(
    device: &'static Device,
    config: &RouterConfig,
    shape: FrontShape,
    inputs: &FrontInputs,
) -> Result<Routing, DeviceRouterError> {
    let front = Bf16Gate::new(device, config, shape, inputs.rows, Some(&inputs.bias))?;
    let u = upload(device, shape, config.k, inputs)?;
    let stacked = device.upload(&to_bf16(&inputs.stacked()))?;
    front.enqueue(
        &u.hidden,
        &stacked,
        Some(&u.bias),
        &RouterOutputs {
            ids: &u.ids,
            weights: &u.weights,
        },
    )?;
    download(inputs.rows, config.k, &u.ids, &u.weights)
}

// ANCHOR: flips
/// How many of `rows` rows select another set of experts when the logits are rounded to bf16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlipRow {
    pub rows: usize,
    pub flipped: usize,
}

impl FlipRow {
    /// The share of rows whose set changed.
    pub fn rate(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.flipped as f64 / self.rows as f64
        }
    }
}

/// The rows of `a` and `b` whose selected sets differ (the order within a set aside).
pub fn rows_with_other_sets(a: &Routing, b: &Routing) -> usize {
    let set = |r: &Routing, t: usize| {
        let mut v = r.row_ids(t).to_vec();
        v.sort_unstable();
        v
    };
    (0..a.rows).filter(|&t| set(a, t) != set(b, t)).count()
}

/// The flip rate of the bf16-output variant along the row axis: for each T of `rows`, T random
/// rows of `shape` (weights and bias from `salt`, the same for every T) through the merged front
/// (fp32 logits) and through the bf16 variant, and the rows whose selected sets differ. Runs on
/// `device`: on the emulator, that is the CPU.
pub fn flip_rates(
    device: &'static Device,
    config: &RouterConfig,
    shape: FrontShape,
    rows: &[usize],
    salt: u64,
) -> Result<Vec<FlipRow>, DeviceRouterError> {
    rows.iter()
        .map(|&t| {
            let inputs = FrontInputs::random(shape, t, salt);
            let (fp32, _) = run_merged(device, config, shape, &inputs)?;
            let rounded = run_bf16(device, config, shape, &inputs)?;
            Ok(FlipRow {
                rows: t,
                flipped: rows_with_other_sets(&fp32.routing, &rounded),
            })
        })
        .collect()
}
// ANCHOR_END: flips
