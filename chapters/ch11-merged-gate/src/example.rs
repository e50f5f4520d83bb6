//! The chapter's main, as a library: `examples/ch11.rs` calls [`run`].
//!
//! It shows radix select on one row step by step (the host's literal loop), the kernel against
//! chapter 5's fused router on every named regime, the front of a Kimi K3 layer in its separate
//! and merged forms at [`TOUR_ROWS`] rows, and how many of those rows the bf16-output variant
//! moves. Everything on stdout is the same on both backends except the values in `⟨ ⟩`, which
//! depend on the library GEMM (cuBLAS or the emulator's reference) and are checked by the tests.

use crate::front::{bias_in, FrontInputs, KIMI_BIAS_RANGE, KIMI_K3};
use crate::host::{rows_with_other_sets, run_bf16, run_merged, run_separate};
use crate::merged::describe;
use crate::radix::{order, radix_select_row, route_logits_radix};
use ch01_router::inputs::patterned;
use ch01_router::regimes::{regime, REGIMES};
use ch05_fused_router::route_logits_fused;
use half::bf16;
use moe_kernels::Device;
use std::io::Write;

/// Rows of the Kimi K3 front the example runs (few: the emulator multiplies 4,480 × 7,168 per
/// row).
pub const TOUR_ROWS: usize = 2;

/// Random Kimi-like rows whose passes the example counts (on the host).
pub const PASS_ROWS: usize = 1000;

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: std::fmt::Arguments) -> Result<(), String> {
    out.write_fmt(s).map_err(|e| e.to_string())
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

/// The absolute difference two bf16 roundings of the same dot product may show beyond one bf16
/// step: two fp32 sums of the same products in different orders differ by some ulps of their
/// partial sums (of magnitude a few units here, an ulp 2^-22), which near a result of zero is many
/// bf16 steps of the result, but far below 2^-16.
pub const SUM_ORDER_TOL: f32 = 1.0 / 65536.0;

/// How two bf16 results of the same products compare: how many differ, and how many differ by
/// more than one bf16 step and more than [`SUM_ORDER_TOL`] (none, when the two are roundings of
/// fp32 sums that differ only in their order).
pub fn bf16_apart(a: &[bf16], b: &[bf16]) -> (usize, usize) {
    let step = |x: bf16, y: bf16| {
        let o = |v: bf16| {
            let u = v.to_bits() as i32;
            if u & 0x8000 != 0 {
                -(u & 0x7fff)
            } else {
                u
            }
        };
        (o(x) - o(y)).unsigned_abs()
    };
    let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
    let outside = a
        .iter()
        .zip(b)
        .filter(|(&x, &y)| step(x, y) > 1 && (x.to_f32() - y.to_f32()).abs() > SUM_ORDER_TOL)
        .count();
    (differ, outside)
}

/// Runs the tour, writing it to `out`.
pub fn run(device: &'static Device, out: Out) -> Result<(), String> {
    let e = |e: ch01_router::chain::DeviceRouterError| e.to_string();
    say!(out, "Chapter 11: a gate merged into the GEMM in front\n");
    // 1. One row by hand: 12 keys, three of them equal at the cut.
    say!(out, "radix select on one row (the host's literal loop):");
    let keys = [
        0.61f32, 0.75, 0.52, 0.75, 0.75, 0.13, 0.98, -0.2, 0.75, 0.40, 0.87, 0.02,
    ];
    let ordered: Vec<u32> = keys.iter().map(|&k| order(k)).collect();
    let (ids, passes) = radix_select_row(&ordered, 4);
    say!(
        out,
        "  keys {}",
        keys.iter()
            .map(|k| format!("{k:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    say!(
        out,
        "  top 4: experts {} after {passes} passes (of the four 0.75s, the lowest ids 1 3)",
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );

    // How many passes rows like Kimi K3's take: a score in (0.25, 0.75) (a sigmoid's middle,
    // without a transcendental, so that every platform prints the same) plus a bias in the
    // article's range.
    let (rows, width) = (PASS_ROWS, KIMI_K3.experts);
    let x = patterned(rows * width, 12, 1.0);
    let bias = bias_in(width, KIMI_BIAS_RANGE, 13);
    let mut count = [0usize; 7];
    for t in 0..rows {
        let ordered: Vec<u32> = (0..width)
            .map(|j| order(0.5 + 0.25 * x[t * width + j] + bias[j]))
            .collect();
        count[radix_select_row(&ordered, KIMI_K3.k).1] += 1;
    }
    say!(
        out,
        "  passes on {rows} random Kimi-like rows (16 of 896):\n    {}",
        (0..count.len())
            .filter(|&p| count[p] > 0)
            .map(|p| format!("{p} passes: {} rows", count[p]))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // 2. The kernel against chapter 5's on every regime.
    say!(
        out,
        "\nradix_topk against chapter 5's fused router, the same fp32 logits:"
    );
    for name in REGIMES {
        let r = regime(name).expect("a named regime");
        let logits = r.logits_f32();
        let b = r.bias.as_deref();
        let radix =
            route_logits_radix(device, &r.config, r.rows, r.experts, &logits, b).map_err(e)?;
        let fused =
            route_logits_fused(device, &r.config, r.rows, r.experts, &logits, b).map_err(e)?;
        let same_ids = radix.ids == fused.ids;
        let same_w = radix
            .weights
            .iter()
            .zip(&fused.weights)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        say!(
            out,
            "  {name:30} {:3} rows, {:3} experts, k {:2}: ids {}, weights {}",
            r.rows,
            r.experts,
            r.k,
            if same_ids { "same" } else { "DIFFER" },
            if same_w { "same bits" } else { "DIFFER" }
        );
    }

    // 3. The Kimi K3 front, separate and merged.
    let shape = KIMI_K3;
    let config = crate::front::kimi_config(shape.k);
    let inputs = FrontInputs::random(shape, TOUR_ROWS, 11);
    say!(out, "\nthe front of a Kimi K3 layer, {}:", describe(shape));
    say!(out, "  router: {config}");
    let sep = run_separate(device, &config, shape, &inputs).map_err(e)?;
    let (mer, _) = run_merged(device, &config, shape, &inputs).map_err(e)?;
    // The kernels' names without their families (`ch05_tiny_gemm::tiny_gemm_r2`).
    let names = |v: &[String]| {
        v.iter()
            .map(|n| n.rsplit("::").next().unwrap_or(n).to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    say!(
        out,
        "  separate launches {}: {}",
        sep.launches.len(),
        names(&sep.launches)
    );
    say!(
        out,
        "  merged launches {}: {}",
        mer.launches.len(),
        names(&mer.launches)
    );
    for t in 0..TOUR_ROWS {
        let ids = mer.routing.row_ids(t);
        say!(
            out,
            "  row {t}: experts {}",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let same_ids = sep.routing.ids == mer.routing.ids;
    let same_w = sep
        .routing
        .weights
        .iter()
        .zip(&mer.routing.weights)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    say!(
        out,
        "  merged against separate: ids {}, weights {}",
        if same_ids { "same" } else { "DIFFER" },
        if same_w { "same bits" } else { "DIFFER" }
    );
    let (differ, outside) = bf16_apart(&sep.proj, &mer.proj);
    let by = if outside == 0 {
        "each by 1 bf16 step or < 2^-16".to_string()
    } else {
        format!("{outside} by more than 1 step and 2^-16")
    };
    say!(
        out,
        "  projection [{TOUR_ROWS}, {}] bf16: ⟨{differ}⟩ differ from separate's, {by}",
        shape.proj
    );

    // 4. The bf16-output variant.
    let rounded = run_bf16(device, &config, shape, &inputs).map_err(e)?;
    say!(
        out,
        "\nthe bf16-output variant (the logits rounded to bf16 before the selection):"
    );
    say!(
        out,
        "  ⟨{}⟩ of {TOUR_ROWS} rows select another set of experts than the merged form",
        rows_with_other_sets(&mer.routing, &rounded)
    );
    Ok(())
}
