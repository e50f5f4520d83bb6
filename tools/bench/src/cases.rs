//! The benchmark as a table: each chapter lists its [`Case`]s (what to build, which shape and
//! rows, the bytes and FLOPs of its floor), and one runner measures every case the same way,
//! with the per-kernel breakdown and a floor probe beside each, into typed rows
//! ([`moe_tools::bench_row`]). Chapter code carries no benchmark code.

use moe_kernels::measure::{Harness, Measurement};
use moe_kernels::Device;
use moe_tools::bench_row::{BenchRow, StepRow};

/// A piece of work built for one case: queues one call (launches only, so a graph can capture
/// it).
pub trait Work {
    fn enqueue(&self) -> Result<(), String>;
}

/// Builds a case's work on a device.
pub type Build = Box<dyn Fn(&'static Device) -> Result<Box<dyn Work>, String>>;

/// One measured case: an implementation at one shape and row count.
pub struct Case {
    pub chapter: &'static str,
    pub shape: &'static str,
    pub imp: &'static str,
    pub rows: usize,
    /// The fewest bytes the work must move (each input read once, each output written once).
    pub bytes: f64,
    /// Of those, the bytes it must read: what the floor probe reads.
    pub read_bytes: f64,
    pub flops: f64,
    /// Also time each prefix of its launches (the per-kernel table).
    pub steps: bool,
    pub build: Build,
}

/// What the floor of every case is computed from.
#[derive(Clone, Copy, Debug)]
pub struct Ceilings {
    /// One empty launch, cold median, µs.
    pub launch_us: f64,
    pub copy_gbs: f64,
    pub bf16_tflops: f64,
}

impl Ceilings {
    /// One launch plus the larger of the bytes at the copy bandwidth and the FLOPs at the bf16
    /// matrix rate.
    pub fn floor_us(&self, bytes: f64, flops: f64) -> f64 {
        self.launch_us + (bytes / (self.copy_gbs * 1e3)).max(flops / (self.bf16_tflops * 1e6))
    }
}

/// A [`BenchRow`] from a measurement.
pub fn row(
    chapter: &str,
    shape: &str,
    imp: &str,
    rows: usize,
    m: &Measurement,
    floor_us: f64,
    bytes: f64,
    flops: f64,
    device: &str,
) -> BenchRow {
    BenchRow {
        chapter: chapter.into(),
        shape: shape.into(),
        imp: imp.into(),
        rows: rows as u64,
        launches: m.launches as u32,
        cold_median_us: m.cold.median_us,
        cold_p10_us: m.cold.p10_us,
        cold_p90_us: m.cold.p90_us,
        warm_median_us: m.warm.median_us,
        warm_p10_us: m.warm.p10_us,
        warm_p90_us: m.warm.p90_us,
        floor_us,
        bytes,
        flops,
        cold_gbs: 0.0,
        cold_tflops: 0.0,
        samples: m.cold.samples as u64,
        device: device.into(),
    }
    .with_rates()
}

/// Measures one case: the work (with its steps when asked), then one launch reading the case's
/// input bytes cold (`floor_probe`). Returns the rows and the step rows.
pub fn run_case(
    h: &Harness,
    dev: &'static Device,
    case: &Case,
    ceilings: &Ceilings,
    device: &str,
) -> Result<(Vec<BenchRow>, Vec<StepRow>), String> {
    let work = (case.build)(dev)?;
    let floor = ceilings.floor_us(case.bytes, case.flops);
    let mut steps = Vec::new();
    let whole = if case.steps {
        let (whole, prefixes) = h
            .measure_steps(|| work.enqueue().map_err(BenchError))
            .map_err(|e| e.0)?;
        let (mut prev_cold, mut prev_warm) = (0.0, 0.0);
        for p in prefixes {
            steps.push(StepRow {
                chapter: case.chapter.into(),
                shape: case.shape.into(),
                rows: case.rows as u64,
                step: p.step as u32,
                kernel: p.kernel.clone(),
                prefix_cold_us: p.prefix.cold.median_us,
                prefix_warm_us: p.prefix.warm.median_us,
                cold_us: p.prefix.cold.median_us - prev_cold,
                warm_us: p.prefix.warm.median_us - prev_warm,
            });
            (prev_cold, prev_warm) = (p.prefix.cold.median_us, p.prefix.warm.median_us);
        }
        whole
    } else {
        h.measure(|| work.enqueue().map_err(BenchError))
            .map_err(|e| e.0)?
    };
    let probe = h
        .read_probe(case.read_bytes as usize)
        .map_err(|e| e.to_string())?;
    Ok((
        vec![
            row(
                case.chapter,
                case.shape,
                case.imp,
                case.rows,
                &whole,
                floor,
                case.bytes,
                case.flops,
                device,
            ),
            row(
                case.chapter,
                case.shape,
                "floor_probe",
                case.rows,
                &probe,
                floor,
                case.read_bytes,
                0.0,
                device,
            ),
        ],
        steps,
    ))
}

/// A work's error as the harness carries it (the harness's own errors convert into it).
pub struct BenchError(pub String);

impl From<moe_kernels::KernelError> for BenchError {
    fn from(e: moe_kernels::KernelError) -> Self {
        BenchError(e.to_string())
    }
}
