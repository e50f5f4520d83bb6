//! The benchmark as a table: each chapter lists its [`Case`]s (what to build, which shape and
//! rows, the bytes and FLOPs of its floor), and one runner measures every case the same way,
//! with the per-kernel breakdown and a floor probe beside each, into typed rows
//! ([`moe_tools::bench_row`]). Chapter code carries no benchmark code.

use moe_kernels::measure::{Harness, Measurement, Plan};
use moe_kernels::Device;
use moe_tools::bench_row::{header, BenchRow, StepRow, STEP_COLUMNS};
use std::path::Path;

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
#[allow(clippy::too_many_arguments)] // one argument per CSV column
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

/// How close two measurements of the first case must come (cold medians, as a share of the
/// later) for [`Session::settle`] to call the GPU settled.
pub const SETTLE_AGREE: f64 = 0.02;
/// The most measurements [`Session::settle`] discards.
pub const SETTLE_MAX: usize = 8;

/// What a chapter's GPU run measures before its cases, with the harness that measures them:
/// the empty kernel and the ceilings every floor comes from.
pub struct Session {
    pub dev: &'static Device,
    pub h: Harness,
    /// The GPU's name as the CSVs spell it (spaces as `_`).
    pub device: String,
    /// One empty launch.
    pub empty: Measurement,
    pub ceilings: Ceilings,
}

impl Session {
    /// A harness on `dev` (fewer samples when `quick`: a smoke test, not numbers to publish),
    /// then the empty kernel, the copy bandwidth and cuBLAS's bf16 rate.
    pub fn start(dev: &'static Device, quick: bool) -> Result<Session, String> {
        let plan = if quick {
            Plan::quick()
        } else {
            Plan::default()
        };
        let h = Harness::new(dev, plan).map_err(|e| e.to_string())?;
        let device = dev.name().replace(' ', "_");
        let empty = h.empty_kernel().map_err(|e| e.to_string())?;
        let ceilings = Ceilings {
            launch_us: empty.cold.median_us,
            copy_gbs: h.copy_bandwidth(1 << 30).map_err(|e| e.to_string())?,
            bf16_tflops: crate::common::bf16_rate(&h, dev)?,
        };
        Ok(Session {
            dev,
            h,
            device,
            empty,
            ceilings,
        })
    }

    /// One line for the log: the device, its measured copy bandwidth and bf16 rate, and one
    /// empty launch cold and warm.
    pub fn describe(&self) -> String {
        format!(
            "{}: copy {:.0} GB/s, bf16 cuBLAS {:.0} TFLOP/s; empty kernel cold {:.2} µs, warm {:.2} µs",
            self.dev.describe(),
            self.ceilings.copy_gbs,
            self.ceilings.bf16_tflops,
            self.empty.cold.median_us,
            self.empty.warm.median_us
        )
    }

    /// The empty kernel's row of `chapter`'s CSV (its floor is itself).
    pub fn empty_row(&self, chapter: &str) -> BenchRow {
        row(
            chapter,
            "none",
            "empty_kernel",
            0,
            &self.empty,
            self.empty.cold.median_us,
            0.0,
            0.0,
            &self.device,
        )
    }

    /// Settles the GPU before the cases: the 8192³ cuBLAS GEMM of the bf16 rate leaves it
    /// busy-hot, and the first case measured right after it came out slow: 17% in one run
    /// (31.8 µs cold against 27.2 µs for the same work measured later in that run), and chapter
    /// 8's first case, after one discarded measurement, 21% (9.15 µs cold, warm 4.49, against
    /// 7.55 and 3.31 for the same kernel on the same inputs two cases later, session 35 on an
    /// H100). So the first case is measured until two measurements in a row agree within
    /// [`SETTLE_AGREE`] (cold medians), at most [`SETTLE_MAX`] times, all discarded; stderr
    /// says how it went. The cause is not known: once the settling measurements stayed high
    /// (8.85, 8.96 µs, agreeing) and the case, built again after them, measured 7.63, so what
    /// this discards may be the first work built rather than a GPU state.
    pub fn settle(&self, cases: &[Case]) -> Result<(), String> {
        let Some(first) = cases.first() else {
            return Ok(());
        };
        let work = (first.build)(self.dev)?;
        let mut seen: Vec<f64> = Vec::new();
        for _ in 0..SETTLE_MAX {
            let m = self
                .h
                .measure(|| work.enqueue().map_err(BenchError))
                .map_err(|e| e.0)?;
            let now = m.cold.median_us;
            let steady = seen
                .last()
                .is_some_and(|&last| (now - last).abs() <= SETTLE_AGREE * now);
            seen.push(now);
            if steady {
                break;
            }
        }
        let list: Vec<String> = seen.iter().map(|x| format!("{x:.2}")).collect();
        eprintln!(
            "settle: {} {} {}, cold medians {} µs ({})",
            first.shape,
            first.imp,
            first.rows,
            list.join(", "),
            if seen.len() < SETTLE_MAX {
                "steady"
            } else {
                "not steady: the first case may read slow"
            }
        );
        Ok(())
    }

    /// Every case of `chapter` in order after settling ([`Session::settle`]), with a progress
    /// bar, then the peers' rows from `peers` (their samples file): the rows (the empty kernel's
    /// first) and the step rows. `unit` names the rows column in messages (`rows`, `tokens`).
    pub fn run_all(
        &self,
        chapter: &str,
        unit: &str,
        cases: &[Case],
        peers: Option<&Path>,
    ) -> Result<(Vec<BenchRow>, Vec<StepRow>), String> {
        let mut rows: Vec<BenchRow> = vec![self.empty_row(chapter)];
        let mut steps: Vec<StepRow> = Vec::new();
        self.settle(cases)?;
        let b = crate::common::bar(cases.len(), chapter);
        for case in cases {
            b.set_message(format!("{} {} {} {unit}", case.shape, case.imp, case.rows));
            let (r, s) = self
                .run(case)
                .map_err(|e| format!("{} {} {} {unit}: {e}", case.shape, case.imp, case.rows))?;
            rows.extend(r);
            steps.extend(s);
            b.inc(1);
        }
        b.finish_and_clear();
        if let Some(p) = peers {
            rows.extend(peers_file(p, cases, &self.ceilings)?);
        }
        Ok((rows, steps))
    }

    /// Measures one case ([`run_case`]).
    pub fn run(&self, case: &Case) -> Result<(Vec<BenchRow>, Vec<StepRow>), String> {
        run_case(&self.h, self.dev, case, &self.ceilings, &self.device)
    }

    /// The ceilings as a CSV (`ceilings.csv`, `ch02_ceilings.csv`): what the run's floors
    /// were computed from.
    pub fn ceilings_csv(&self) -> String {
        format!(
            "bf16_tflops,copy_gbs,empty_cold_us,empty_warm_us,device\n{:.1},{:.1},{:.3},{:.3},{}\n",
            self.ceilings.bf16_tflops,
            self.ceilings.copy_gbs,
            self.empty.cold.median_us,
            self.empty.warm.median_us,
            self.device
        )
    }
}

/// Is `MOE_BENCH_QUICK` set (to anything but nothing), as `tools/gpu/run` reads it?
pub fn quick_from_env() -> bool {
    std::env::var_os("MOE_BENCH_QUICK").is_some_and(|v| !v.is_empty())
}

/// The step rows as a CSV (`<chapter>_steps.csv`), header first.
pub fn steps_csv(steps: &[StepRow]) -> String {
    std::iter::once(STEP_COLUMNS.to_string())
        .chain(steps.iter().map(StepRow::to_csv))
        .map(|l| l + "\n")
        .collect()
}

/// The rows as a CSV, header first.
pub fn csv(rows: &[BenchRow]) -> String {
    std::iter::once(header())
        .chain(rows.iter().map(BenchRow::to_csv))
        .map(|l| l + "\n")
        .collect()
}

/// How a chapter's summary lays out its columns: the widths of the shape, rows and impl
/// columns, the rows column's name, the digits of TFLOP/s.
pub struct SummaryLayout {
    pub shape_w: usize,
    pub rows_name: &'static str,
    pub rows_w: usize,
    pub imp_w: usize,
    pub tflops_digits: usize,
}

/// The summary a reader reads first: each time beside its floor and its rate, a line a row.
pub fn summary(rows: &[BenchRow], layout: &SummaryLayout) -> String {
    let SummaryLayout {
        shape_w,
        rows_name,
        rows_w,
        imp_w,
        tflops_digits: td,
    } = *layout;
    let mut s = format!(
        "{:<shape_w$} {:>rows_w$} {:<imp_w$} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8}\n",
        "shape", rows_name, "impl", "cold µs", "warm µs", "floor µs", "launches", "GB/s", "TFLOP/s"
    );
    for r in rows {
        s += &format!(
            "{:<shape_w$} {:>rows_w$} {:<imp_w$} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>9.1} {:>8.td$}\n",
            r.shape,
            r.rows,
            r.imp,
            r.cold_median_us,
            r.warm_median_us,
            r.floor_us,
            r.launches,
            r.cold_gbs,
            r.cold_tflops
        );
    }
    s
}

/// The PyTorch peers' rows from their samples file at `path` ([`peer_rows`]).
pub fn peers_file(
    path: &Path,
    cases: &[Case],
    ceilings: &Ceilings,
) -> Result<Vec<BenchRow>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    peer_rows(&text, &path.display().to_string(), cases, ceilings)
}

/// The peers' rows from their samples file (`text`, read from `name`): each summarised by our
/// statistics and given the floor (bytes and FLOPs) of our case at its shape and rows.
pub fn peer_rows(
    text: &str,
    name: &str,
    cases: &[Case],
    ceilings: &Ceilings,
) -> Result<Vec<BenchRow>, String> {
    crate::peers::parse(text, name)?
        .iter()
        .map(|peer| {
            let mine = cases
                .iter()
                .find(|c| c.shape == peer.shape && c.rows == peer.rows)
                .ok_or(format!(
                    "{name}: peer row {} {} {} has no matching case",
                    peer.imp, peer.shape, peer.rows
                ))?;
            Ok(row(
                &peer.chapter,
                &peer.shape,
                &peer.imp,
                peer.rows,
                &peer.m,
                ceilings.floor_us(mine.bytes, mine.flops),
                mine.bytes,
                mine.flops,
                &peer.device,
            ))
        })
        .collect()
}

/// A work's error as the harness carries it (the harness's own errors convert into it).
pub struct BenchError(pub String);

impl From<moe_kernels::KernelError> for BenchError {
    fn from(e: moe_kernels::KernelError) -> Self {
        BenchError(e.to_string())
    }
}

/// A case's work as a closure: for a case whose work is one call on what it captured (a layer
/// and its workspace), instead of a struct or an enum per kind of layer.
pub struct WorkFn<F: Fn() -> Result<(), String>>(pub F);

impl<F: Fn() -> Result<(), String>> Work for WorkFn<F> {
    fn enqueue(&self) -> Result<(), String> {
        (self.0)()
    }
}

/// The refusal of a GPU bench on the emulator without `--quick`.
pub fn emulator_refusal(chapter: &str, why: &str) -> String {
    format!(
        "bench {chapter} measures on the GPU, and the backend is the emulator ({why}); \
         --quick (or MOE_BENCH_QUICK=1) runs a smoke test of the same cases on the emulator"
    )
}

/// The end of a chapter's bench once its cases are made. On the emulator (`--quick`): every
/// case built and run once, nothing timed or written. On the GPU: every case timed in one
/// session, `<chapter>.csv` and `<chapter>_ceilings.csv` written into `out`, the summary
/// printed.
pub fn time_or_smoke(
    dev: &'static Device,
    quick: bool,
    chapter: &'static str,
    rows_name: &'static str,
    cases: &[Case],
    out: &std::path::Path,
) -> Result<(), String> {
    if dev.kind() == moe_kernels::BackendKind::Emu {
        for c in cases {
            (c.build)(dev)?.enqueue()?;
        }
        println!(
            "bench {chapter} --quick on the emulator: {} cases built and run once ({}); nothing timed",
            cases.len(),
            dev.describe()
        );
        return Ok(());
    }
    let session = Session::start(dev, quick)?;
    eprintln!("{}", session.describe());
    let (rows, _steps) = session.run_all(chapter, rows_name, cases, None)?;
    crate::common::write(&out.join(format!("{chapter}.csv")), &csv(&rows))?;
    crate::common::write(
        &out.join(format!("{chapter}_ceilings.csv")),
        &session.ceilings_csv(),
    )?;
    let imp_w = cases.iter().map(|c| c.imp.len()).max().unwrap_or(0).max(12);
    print!(
        "{}",
        summary(
            &rows,
            &SummaryLayout {
                shape_w: 26,
                rows_name,
                rows_w: 6,
                imp_w,
                tflops_digits: 1,
            }
        )
    );
    println!(
        "wrote {chapter}.csv and {chapter}_ceilings.csv in {}{}",
        out.display(),
        if quick {
            " (--quick: not numbers to publish)"
        } else {
            ""
        }
    );
    Ok(())
}
