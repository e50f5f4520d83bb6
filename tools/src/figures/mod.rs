//! Every generated file of the book, made from what is committed: figures and tables from the
//! CSVs under `bench/results/`, the numbers the prose quotes ([`facts`]), an example's output
//! from its snapshot, and the tree of files. `tools/plot` writes them into `book/src/figures/`;
//! `tools/steps check` writes them into a temporary folder and fails when any committed one
//! differs, so a page can never quote a number its CSV does not hold.

pub mod ch02;
pub mod ch03;
pub mod ch04;
pub mod ch05;
pub mod ch06;
pub mod ch07;
pub mod ch08;
pub mod ch09;
pub mod ch10;
pub mod ch11;
pub mod ch12;
pub mod emu_hopper;
pub mod equality;
pub mod facts;
pub mod spec;
pub mod svg;
pub mod tables;

use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use facts::{thousands, Facts};
use std::path::{Path, PathBuf};

/// One generated file: where it goes (relative to the repository root) and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub path: String,
    pub content: String,
}

/// What a figure module writes to `out` until `csv` is committed: one marked line that starts
/// `*Not measured yet:` and ends with `how` (the command that makes the CSV, and what `tools/plot`
/// then makes of it), and a note on stderr naming `what` says so.
pub fn not_measured_yet(out: &str, csv: &str, what: &str, how: &str) -> Generated {
    eprintln!("plot: no {csv} yet: {what} says \"not measured yet\"");
    Generated {
        path: out.into(),
        content: format!("*Not measured yet: `{csv}` is not committed. {how}*\n"),
    }
}

/// The groups of generated files, by the page that uses them.
pub const GROUPS: [&str; 14] = [
    "runtime", "primer", "ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09",
    "ch10", "ch11", "ch12",
];

/// A committed file of the repository at `root`, as text.
fn read(root: &Path, rel: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(rel)).map_err(|e| format!("cannot read {rel}: {e}"))
}

/// The short name of a shape: `glm_h4096_e288_k8` → `glm`.
fn short(shape: &str) -> &str {
    shape.split('_').next().unwrap_or(shape)
}

/// The page's name of a shape, from its short name (`qwen3` → `Qwen3-30B-A3B`).
fn title(s: &str) -> &str {
    match s {
        "qwen3" => "Qwen3-30B-A3B",
        "glm" => "GLM-like",
        other => other,
    }
}

/// The bench row of `imp` at `n` rows (tokens) of `shape`.
fn find<'a>(rows: &'a [BenchRow], shape: &str, n: u64, imp: &str) -> Option<&'a BenchRow> {
    rows.iter()
        .find(|r| r.shape == shape && r.rows == n && r.imp == imp)
}

/// The token counts measured at `shape`, ascending (the empty launch's rows, at 0, left out).
fn token_counts(rows: &[BenchRow], shape: &str) -> Vec<u64> {
    rows.iter()
        .filter(|r| r.shape == shape && r.rows > 0)
        .map(|r| r.rows)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A GPU's name as the pages give it, from a CSV's `device` column: `NVIDIA_H100_80GB_HBM3` (or
/// with spaces, as `bench ch11 --flips` writes it) → `H100`, `NVIDIA_H200` → `H200` (the first
/// word after the vendor's).
pub fn gpu_name(device: &str) -> String {
    let d = device
        .strip_prefix("NVIDIA_")
        .or_else(|| device.strip_prefix("NVIDIA "))
        .unwrap_or(device);
    d.split(['_', ' ']).next().unwrap_or(d).to_string()
}

/// The one GPU that every device in `devices` names, for a figure or a page that sets their
/// measurements side by side: an error naming `what` if they come from two machines, or from none.
pub fn one_gpu<'a>(
    devices: impl IntoIterator<Item = &'a str>,
    what: &str,
) -> Result<String, String> {
    let names: std::collections::BTreeSet<String> = devices.into_iter().map(gpu_name).collect();
    let mut it = names.iter();
    match (it.next(), it.next()) {
        (Some(one), None) => Ok(one.clone()),
        (None, _) => Err(format!("{what}: no measurement names its device")),
        _ => Err(format!(
            "{what}: measurements from more than one GPU ({}) would be set side by side; retake \
             them on one",
            names.into_iter().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Text made safe inside SVG.
fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The files of one group (`ch01`, `runtime`), generated from the repository at `root`.
pub fn generate(root: &Path, group: &str) -> Result<Vec<Generated>, String> {
    match group {
        "ch01" => ch01(root),
        "ch02" => {
            let mut v = ch02::generate(root)?;
            v.extend(example_and_tree(root, 2)?);
            Ok(v)
        }
        "ch03" => {
            let mut v = ch03::generate(root)?;
            v.extend(example_and_tree(root, 3)?);
            Ok(v)
        }
        // The GPU run's figures, table and facts; the page's example and tree join them with
        // the page (`example_and_tree(root, 4)`, once its snapshot exists).
        "ch04" => {
            let mut v = ch04::generate(root)?;
            v.extend(example_and_tree(root, 4)?);
            Ok(v)
        }
        // The GPU run's figure, table and facts (none until `ch05.csv` is committed), with the
        // page's example and tree.
        "ch05" => {
            let mut v = ch05::generate(root)?;
            v.extend(example_and_tree(root, 5)?);
            Ok(v)
        }
        "ch06" => ch06::generate(root),
        // The full-size decode step's breakdown and what bf16 changes, with the example and tree.
        "ch07" => ch07::generate(root),
        // The GPU run's figure, tables and facts (none until `ch08.csv` is committed), with the
        // page's example and tree.
        "ch08" => {
            let mut v = ch08::generate(root)?;
            v.extend(example_and_tree(root, 8)?);
            Ok(v)
        }
        // The same from `ch09.csv`.
        "ch09" => {
            let mut v = ch09::generate(root)?;
            v.extend(example_and_tree(root, 9)?);
            Ok(v)
        }
        // The CPU run's figure, tables and facts (ch10-flips), with the example and tree.
        "ch10" => ch10::generate(root),
        // The GPU run's figure, tables and facts, Part II's closing figure, the example and tree.
        "ch11" => ch11::generate(root),
        // The measured section from `bench ch12` on two GPUs ("not measured yet" until its CSV
        // is committed), with the example and tree.
        "ch12" => {
            let mut v = ch12::generate(root)?;
            v.extend(example_and_tree(root, 12)?);
            Ok(v)
        }
        "runtime" => Ok([runtime(root)?, emu_hopper::generate(root)?].concat()),
        "primer" => primer_example(root),
        other => Err(format!(
            "no generated files for `{other}` (groups: {})",
            GROUPS.join(", ")
        )),
    }
}

/// The primer page's example output, from its snapshot (the page includes it).
fn primer_example(root: &Path) -> Result<Vec<Generated>, String> {
    let snap_rel = "tests/snapshots/primer_example__primer_example.snap";
    let body = crate::snap::strip_header(&read(root, snap_rel)?)
        .map_err(|e| format!("{snap_rel}: {e}"))?;
    // What the example printed on the H200 (`tools/gpu/run`'s examples step), measured values
    // and all: the page shows it beside the masked output.
    let h200_rel = "bench/results/h200/primer_stdout.txt";
    let h200 = read(root, h200_rel)?;
    if !h200.starts_with("A GPU in one page") {
        return Err(format!("{h200_rel}: not the primer's output"));
    }
    Ok(vec![
        Generated {
            path: "book/src/figures/gpu-primer-example.txt".into(),
            content: body,
        },
        Generated {
            path: "book/src/figures/gpu-primer-h200.txt".into(),
            content: h200,
        },
    ])
}

/// Every generated file of the book.
pub fn generate_all(root: &Path) -> Result<Vec<Generated>, String> {
    let mut all = Vec::new();
    for g in GROUPS {
        all.extend(generate(root, g)?);
    }
    Ok(all)
}

const H200: &str = "bench/results/h200";
const CPU: &str = "bench/results/cpu";

fn ch01(root: &Path) -> Result<Vec<Generated>, String> {
    let csv_rel = format!("{H200}/ch01.csv");
    let rows = parse_csv(&read(root, &csv_rel)?, &csv_rel)?;
    let plotted: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    let steps_rel = format!("{H200}/ch01_steps.csv");
    let steps = tables::parse_steps(&read(root, &steps_rel)?, &steps_rel)?;
    let mut out = vec![
        Generated {
            path: "book/src/figures/ch01-router.svg".into(),
            content: svg::render_svg(&plotted),
        },
        Generated {
            path: "book/src/figures/ch01-router-table.md".into(),
            content: tables::measurements(&rows),
        },
        Generated {
            path: "book/src/figures/ch01-router-steps.md".into(),
            content: tables::steps(&steps),
        },
    ];

    // The numbers chapter 1's prose quotes.
    let mut f = Facts::default();
    let src = csv_rel.as_str();
    for r in &rows {
        if r.imp == "empty_kernel" {
            f.add("empty_cold", tables::fmt_us(r.cold_median_us), src);
            f.add("empty_warm", tables::fmt_us(r.warm_median_us), src);
        }
    }
    for shape in svg::shapes(&plotted) {
        let s = short(&shape).to_string();
        let here: Vec<&BenchRow> = plotted.iter().filter(|r| r.shape == shape).collect();
        let launches = |imp: &str| {
            let v: Vec<u32> = here
                .iter()
                .filter(|r| r.imp == imp)
                .map(|r| r.launches)
                .collect();
            let (lo, hi) = (
                v.iter().min().copied().unwrap_or(0),
                v.iter().max().copied().unwrap_or(0),
            );
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}–{hi}")
            }
        };
        f.add(format!("{s}_chain_launches"), launches("chain"), src);
        f.add(format!("{s}_torch_launches"), launches("torch_5line"), src);
        let mut small: Vec<f64> = Vec::new();
        for r in &here {
            let n = r.rows;
            let imp = match r.imp.as_str() {
                "torch_5line" => "torch",
                "floor_probe" => "probe",
                other => other,
            };
            f.add(
                format!("{s}_{n}_{imp}_cold"),
                tables::fmt_us(r.cold_median_us),
                src,
            );
            f.add(
                format!("{s}_{n}_{imp}_warm"),
                tables::fmt_us(r.warm_median_us),
                src,
            );
            if r.imp == "chain" {
                f.add(format!("{s}_{n}_floor"), tables::fmt_us(r.floor_us), src);
                f.add(
                    format!("{s}_{n}_over_floor"),
                    format!("{:.1}", r.cold_median_us / r.floor_us),
                    src,
                );
                if let Some(x) = tables::ratio(&plotted, &shape, n, "chain", "torch_5line") {
                    f.add(format!("{s}_{n}_ratio"), format!("{x:.2}"), src);
                    if n <= 96 {
                        small.push(x);
                    }
                }
            }
        }
        if !small.is_empty() {
            let lo = small.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = small.iter().cloned().fold(0.0, f64::max);
            f.add(format!("{s}_ratio_small_min"), format!("{lo:.2}"), src);
            f.add(format!("{s}_ratio_small_max"), format!("{hi:.2}"), src);
        }
    }
    let steps_src = steps_rel.as_str();
    for st in &steps {
        if st.rows == 1 || st.rows == 96 || st.rows == 8192 {
            let kernel = st.kernel.trim_start_matches("router_");
            f.add(
                format!("{}_{}_{}_cold", short(&st.shape), st.rows, kernel),
                format!("{:.1}", st.cold_us),
                steps_src,
            );
        }
    }
    let ceil_rel = format!("{H200}/ceilings.csv");
    let ceilings = Table::parse(&read(root, &ceil_rel)?, &ceil_rel)?;
    let tflops: f64 = ceilings.num(&[], "bf16_tflops")?;
    let gbs: f64 = ceilings.num(&[], "copy_gbs")?;
    f.add("bf16_tflops", format!("{tflops:.0}"), &ceil_rel);
    f.add("copy_gbs", format!("{gbs:.0}"), &ceil_rel);
    let ex_rel = format!("{CPU}/ch01_exercise1.csv");
    let ex = Table::parse(&read(root, &ex_rel)?, &ex_rel)?;
    f.add(
        "ex1_changed",
        thousands(ex.num(&[], "changed")? as u64),
        &ex_rel,
    );
    f.add("ex1_rows", thousands(ex.num(&[], "rows")? as u64), &ex_rel);
    f.add("ex1_experts", ex.get(&[], "experts")?, &ex_rel);
    out.push(Generated {
        path: "book/src/figures/ch01-facts.md".into(),
        content: f.render("Chapter 1's numbers"),
    });

    out.extend(example_and_tree(root, 1)?);
    Ok(out)
}

/// Chapter `n`'s page shows its example's output, from the example's snapshot (exactly what
/// the test checks), and the files it adds.
pub fn example_and_tree(root: &Path, n: u32) -> Result<Vec<Generated>, String> {
    let snap_rel = format!("tests/snapshots/ch{n:02}_example__ch{n:02}_example.snap");
    let body = crate::snap::strip_header(&read(root, &snap_rel)?)
        .map_err(|e| format!("{snap_rel}: {e}"))?;
    let files = crate::tree::git_files(root)?;
    Ok(vec![
        Generated {
            path: format!("book/src/figures/ch{n:02}-example.txt"),
            content: body,
        },
        Generated {
            path: format!("book/src/figures/ch{n:02}-tree.txt"),
            content: crate::tree::render(&files, n, "moe-from-scratch"),
        },
    ])
}

fn runtime(root: &Path) -> Result<Vec<Generated>, String> {
    let mut f = Facts::default();
    let libm_rel = format!("{H200}/libm.csv");
    let libm = Table::parse(&read(root, &libm_rel)?, &libm_rel)?;
    for func in ["expf", "sigmoid_expf", "logf"] {
        let key = func.trim_end_matches("_expf");
        let inputs = libm.num(&[("function", func)], "inputs")?;
        let differ = libm.num(&[("function", func)], "differ")?;
        f.add(format!("{key}_inputs"), thousands(inputs as u64), &libm_rel);
        f.add(format!("{key}_differ"), thousands(differ as u64), &libm_rel);
        f.add(
            format!("{key}_differ_pct"),
            format!("{:.0}", 100.0 * differ / inputs),
            &libm_rel,
        );
        f.add(
            format!("{key}_max_ulps"),
            libm.get(&[("function", func)], "max_ulps")?,
            &libm_rel,
        );
        f.add(
            format!("{key}_lo"),
            libm.get(&[("function", func)], "lo")?,
            &libm_rel,
        );
        f.add(
            format!("{key}_hi"),
            libm.get(&[("function", func)], "hi")?,
            &libm_rel,
        );
    }

    let tc_rel = format!("{H200}/tensor_core_model.csv");
    let tc = Table::parse(&read(root, &tc_rel)?, &tc_rel)?;
    let (mut outputs, mut differ, mut families) = (0u64, 0u64, 0);
    let mut worst_alternative = (String::new(), 0u64, 0u64);
    for rec in tc.records() {
        let n: u64 = rec("outputs").parse().unwrap_or(0);
        let d: u64 = rec("differ").parse().unwrap_or(0);
        if rec("model") == "extra=2 RZ block=16" {
            outputs += n;
            differ += d;
            families += 1;
        }
        // The closest other model on random tiles: what a plausible guess would get wrong.
        if rec("family") == "uniform" && rec("model") != "extra=2 RZ block=16" {
            let better = worst_alternative.0.is_empty() || d < worst_alternative.1;
            if better {
                worst_alternative = (rec("model"), d, n);
            }
        }
    }
    f.add("mma_families", families.to_string(), &tc_rel);
    f.add("mma_outputs", thousands(outputs), &tc_rel);
    f.add("mma_differ", thousands(differ), &tc_rel);
    f.add("mma_next_model", worst_alternative.0.clone(), &tc_rel);
    f.add("mma_next_differ", thousands(worst_alternative.1), &tc_rel);
    f.add("mma_next_outputs", thousands(worst_alternative.2), &tc_rel);
    f.add(
        "mma_next_differ_pct",
        format!(
            "{:.0}",
            100.0 * worst_alternative.1 as f64 / worst_alternative.2.max(1) as f64
        ),
        &tc_rel,
    );
    let rne = tc.num(
        &[("family", "uniform"), ("model", "extra=2 RNE block=16")],
        "differ",
    )?;
    f.add("mma_rne_uniform_differ", thousands(rne as u64), &tc_rel);

    // Warpgroup MMA against the same model, one k-step at a time (tools/gpu/probes/wgmma_tc_probe.cu).
    let wg_rel = format!("{H200}/wgmma_tc_model.csv");
    let wg = Table::parse(&read(root, &wg_rel)?, &wg_rel)?;
    let (mut wg_cases, mut wg_outputs, mut wg_differ, mut wg_rows) = (0u64, 0u64, 0u64, 0);
    let mut shapes: Vec<String> = Vec::new();
    for rec in wg.records() {
        wg_cases += rec("cases")
            .parse::<u64>()
            .map_err(|e| format!("{wg_rel}: cases: {e}"))?;
        wg_outputs += rec("outputs")
            .parse::<u64>()
            .map_err(|e| format!("{wg_rel}: outputs: {e}"))?;
        wg_differ += rec("differ")
            .parse::<u64>()
            .map_err(|e| format!("{wg_rel}: differ: {e}"))?;
        wg_rows += 1;
        if !shapes.contains(&rec("shape")) {
            shapes.push(rec("shape"));
        }
    }
    if wg_rows == 0 {
        return Err(format!("{wg_rel}: no rows"));
    }
    f.add("wgmma_tc_cases", thousands(wg_cases), &wg_rel);
    f.add("wgmma_tc_outputs", thousands(wg_outputs), &wg_rel);
    f.add("wgmma_tc_differ", thousands(wg_differ), &wg_rel);
    f.add("wgmma_tc_shapes", shapes.join(" and "), &wg_rel);

    let emu_rel = format!("{CPU}/emu_gemm.csv");
    let emu = Table::parse(&read(root, &emu_rel)?, &emu_rel)?;
    for rec in emu.records() {
        let name = format!(
            "emu_{}_{}",
            rec("build"),
            rec("kernel").trim_start_matches("router_")
        );
        f.add(format!("{name}_gflops"), rec("gflops"), &emu_rel);
    }
    // The speed-up of each kernel, after over before (the same machine, one table).
    for rec in emu.records().filter(|r| r("build") == "after") {
        let kernel = rec("kernel");
        let after = emu.num(&[("build", "after"), ("kernel", &kernel)], "gflops")?;
        let before = emu.num(&[("build", "before"), ("kernel", &kernel)], "gflops")?;
        f.add(
            format!("emu_speedup_{}", kernel.trim_start_matches("router_")),
            format!("{:.1}", after / before),
            &emu_rel,
        );
    }
    let flush_rel = format!("{H200}/flush.csv");
    let flush = Table::parse(&read(root, &flush_rel)?, &flush_rel)?;
    for rec in flush.records() {
        let name = format!("flush_{}_{}", short(&rec("shape")), rec("rows"));
        f.add(
            format!("{name}_read"),
            rec("cold_read_flush_us"),
            &flush_rel,
        );
        f.add(
            format!("{name}_write"),
            rec("cold_write_flush_us"),
            &flush_rel,
        );
        f.add(
            format!("{name}_extra"),
            rec("write_minus_read_us"),
            &flush_rel,
        );
    }
    Ok(vec![Generated {
        path: "book/src/figures/runtime-facts.md".into(),
        content: f.render("The runtime page's numbers"),
    }])
}

/// What a group does while its GPU CSV is not committed yet: none of the files made from it may
/// be committed either (they could not be regenerated: an error naming them), and stderr says
/// what is left out. `stage` names the stage of `tools/gpu/run` that writes it (bench, tests),
/// `copy` the CSVs to copy back from the GPU run, `left_out` what is
/// not made without them.
pub(crate) fn no_gpu_csv_yet(
    root: &Path,
    group: &str,
    csv: &str,
    made_from_it: &[&str],
    stage: &str,
    copy: &str,
    left_out: &str,
) -> Result<(), String> {
    let committed: Vec<&str> = made_from_it
        .iter()
        .copied()
        .filter(|p| root.join(p).exists())
        .collect();
    if !committed.is_empty() {
        return Err(format!(
            "{} exist but {csv} does not: they cannot be regenerated",
            committed.join(", ")
        ));
    }
    eprintln!(
        "plot: {group}: no {csv} yet (tools/gpu/run … {stage} makes it on the GPU machine; copy \
         {copy} back): {left_out}"
    );
    Ok(())
}

/// Writes `files` under `dir` (the repository root, or a temporary folder), creating folders.
pub fn write_all(dir: &Path, files: &[Generated]) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    for g in files {
        let p = dir.join(&g.path);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        std::fs::write(&p, &g.content).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        written.push(p);
    }
    Ok(written)
}

/// The generated files whose committed copy under `root` differs from `files` (or is missing).
pub fn stale(root: &Path, files: &[Generated]) -> Vec<(String, String)> {
    files
        .iter()
        .filter_map(|g| {
            let committed = std::fs::read_to_string(root.join(&g.path)).ok();
            match committed {
                Some(c) if c == g.content => None,
                Some(c) => Some((
                    g.path.clone(),
                    crate::diff::unified(
                        &c,
                        &g.content,
                        &format!("{} (committed)", g.path),
                        "regenerated",
                        20,
                    ),
                )),
                None => Some((g.path.clone(), "missing: run tools/plot".to_string())),
            }
        })
        .collect()
}

#[cfg(test)]
mod gpu_tests {
    use super::{gpu_name, one_gpu};

    #[test]
    fn gpu_names_from_the_device_column() {
        assert_eq!(gpu_name("NVIDIA_H100_80GB_HBM3"), "H100");
        assert_eq!(gpu_name("NVIDIA_H200"), "H200");
        assert_eq!(gpu_name("H200"), "H200");
        assert_eq!(gpu_name("NVIDIA H100 80GB HBM3"), "H100");
    }

    #[test]
    fn one_gpu_refuses_two_machines_and_none() {
        assert_eq!(one_gpu(["NVIDIA_H200", "H200"], "x"), Ok("H200".into()));
        let e = one_gpu(["NVIDIA_H200", "NVIDIA_H100_80GB_HBM3"], "Part II").unwrap_err();
        assert!(e.contains("Part II") && e.contains("H100, H200"), "{e}");
        assert!(one_gpu([], "y").unwrap_err().contains("no measurement"));
    }
}
