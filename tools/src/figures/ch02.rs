//! Chapter 2's generated files: the experts of one MoE layer (our loop grouped by expert,
//! cuBLAS per expert) beside Hugging Face's two experts paths in PyTorch (the eager per-expert
//! loop, and the default one on `grouped_mm`), from
//! `bench/results/h200/ch02.csv` (the figure, the table, the quoted numbers), and the CPU loops
//! from `bench/results/cpu/ch02.csv` (their quoted numbers).
//!
//! Until the GPU run's CSV is committed, the group makes the CPU numbers alone and says so on
//! stderr; once any of the GPU files is committed, a missing CSV is an error.

use super::facts::Facts;
use super::svg::{shapes, Figure, Marker, Series};
use super::tables::fmt_us;
use super::{find, read, Generated};
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

const GPU_CSV: &str = "bench/results/h200/ch02.csv";
const CEILINGS_CSV: &str = "bench/results/h200/ch02_ceilings.csv";
const CPU_CSV: &str = "bench/results/cpu/ch02.csv";
const SVG: &str = "book/src/figures/ch02-grouped.svg";
const TABLE: &str = "book/src/figures/ch02-grouped-table.md";
const FACTS: &str = "book/src/figures/ch02-facts.md";
const CPU_FACTS: &str = "book/src/figures/ch02-cpu-facts.md";

/// The implementations, in the order they are drawn and listed.
const OURS: &str = "grouped";
const LOOP: &str = "torch_loop";
const GMM: &str = "torch_grouped_mm";
const PROBE: &str = "floor_probe";

/// The group's files, generated from the repository at `root`.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let mut out = Vec::new();
    if root.join(GPU_CSV).exists() {
        let rows = parse_csv(&read(root, GPU_CSV)?, GPU_CSV)?;
        let ceilings = Table::parse(&read(root, CEILINGS_CSV)?, CEILINGS_CSV)?;
        out.push(Generated {
            path: SVG.into(),
            content: render_svg(&rows),
        });
        out.push(Generated {
            path: TABLE.into(),
            content: table(&rows),
        });
        out.push(Generated {
            path: FACTS.into(),
            content: facts(&rows, &ceilings)?.render("Chapter 2's numbers"),
        });
    } else {
        super::no_gpu_csv_yet(
            root,
            "ch02",
            GPU_CSV,
            &[SVG, TABLE, FACTS],
            "bench",
            "ch02.csv and ch02_ceilings.csv",
            "the figure, the table and the GPU numbers are left out, the CPU numbers are made",
        )?;
    }
    let cpu = Table::parse(&read(root, CPU_CSV)?, CPU_CSV)?;
    out.push(Generated {
        path: CPU_FACTS.into(),
        content: cpu_facts(&cpu)?.render("Chapter 2's CPU numbers"),
    });
    Ok(out)
}

/// `qwen3_h2048_i768_e128_k8` → `(2048, 768, 128, 8)`: hidden, intermediate, experts, k.
pub fn dims(shape: &str) -> Option<(u64, u64, u64, u64)> {
    let get = |p: &str| {
        shape
            .split('_')
            .find_map(|s| s.strip_prefix(p).and_then(|n| n.parse::<u64>().ok()))
    };
    Some((get("h")?, get("i")?, get("e")?, get("k")?))
}

/// `qwen3_h2048_i768_e128_k8` → `Qwen3: hidden 2048, intermediate 768, 128 experts, k = 8`.
pub fn describe(shape: &str) -> String {
    let model = shape.split('_').next().unwrap_or(shape);
    let name = match model.strip_prefix("qwen") {
        Some(v) => format!("Qwen{v}"),
        None => model.to_string(),
    };
    match dims(shape) {
        Some((h, i, e, k)) => {
            format!("{name}: hidden {h}, intermediate {i}, {e} experts, k = {k}")
        }
        None => name,
    }
}

/// Active experts at one token count: the touched weight bytes over one expert's (bf16
/// `w13` and `w2`: `3·I·H·2` bytes). An error when they do not divide: the CSV is not what
/// this reads it as.
fn active(r: &BenchRow) -> Result<u64, String> {
    let (h, i, _, _) = dims(&r.shape).ok_or(format!("shape `{}` has no sizes", r.shape))?;
    let per = (6 * h * i) as f64;
    let n = r.bytes / per;
    if n.fract() != 0.0 {
        return Err(format!(
            "{} {} {} tokens: {} bytes is not a whole number of experts ({per} bytes each)",
            r.shape, r.imp, r.rows, r.bytes
        ));
    }
    Ok(n as u64)
}

/// Ours over `peer`, cold medians, at one shape and token count.
pub fn ratio(rows: &[BenchRow], shape: &str, n: u64, peer: &str) -> Option<f64> {
    Some(find(rows, shape, n, OURS)?.cold_median_us / find(rows, shape, n, peer)?.cold_median_us)
}

fn token_counts(rows: &[&BenchRow]) -> Vec<u64> {
    rows.iter()
        .map(|r| r.rows)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The table the chapter quotes, pivoted to fit a screen: one block per shape, one column per
/// token count; a line per implementation (`cold / warm` µs), then the floor and what it is
/// made of, the launches, and our ratios.
pub fn table(rows: &[BenchRow]) -> String {
    let rows: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    let mut s = String::new();
    for shape in shapes(&rows) {
        let here: Vec<&BenchRow> = rows.iter().filter(|r| r.shape == shape).collect();
        let counts = token_counts(&here);
        let line = |s: &mut String, label: &str, cell: &dyn Fn(u64) -> String| {
            let cells: Vec<String> = counts.iter().map(|&n| cell(n)).collect();
            let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
        };
        let at = |n: u64, imp: &str| find(&rows, &shape, n, imp);
        let _ = writeln!(
            s,
            "**{}**, bf16: µs per call, cold / warm\n",
            describe(&shape)
        );
        s += &super::tables::count_header(&counts, "token");
        let labels = [
            (OURS, "grouped (ours)"),
            (LOOP, "HF eager loop (PyTorch)"),
            (GMM, "HF `grouped_mm` (PyTorch)"),
            (PROBE, "floor probe (the weights read once, 1 launch)"),
        ];
        for (imp, label) in labels {
            if !here.iter().any(|r| r.imp == imp) {
                continue;
            }
            line(&mut s, label, &|n| {
                at(n, imp)
                    .map(|r| {
                        format!(
                            "{} / {}",
                            fmt_us(r.cold_median_us),
                            fmt_us(r.warm_median_us)
                        )
                    })
                    .unwrap_or_default()
            });
        }
        let any = |n: u64| here.iter().find(|r| r.rows == n).copied();
        line(&mut s, "floor", &|n| {
            any(n).map(|r| fmt_us(r.floor_us)).unwrap_or_default()
        });
        line(&mut s, "expert weights touched (MB)", &|n| {
            any(n)
                .map(|r| format!("{:.0}", r.bytes / 1e6))
                .unwrap_or_default()
        });
        line(
            &mut s,
            "launches: ours · eager loop · `grouped_mm`",
            &|n| {
                [OURS, LOOP, GMM]
                    .iter()
                    .map(|imp| {
                        at(n, imp)
                            .map(|r| r.launches.to_string())
                            .unwrap_or("–".into())
                    })
                    .collect::<Vec<_>>()
                    .join(" · ")
            },
        );
        line(&mut s, "ours ÷ floor (cold)", &|n| {
            at(n, OURS)
                .map(|r| format!("{:.1}×", r.cold_median_us / r.floor_us))
                .unwrap_or_default()
        });
        for (peer, label) in [
            (LOOP, "ours ÷ loop (cold)"),
            (GMM, "ours ÷ `grouped_mm` (cold)"),
        ] {
            if here.iter().any(|r| r.imp == peer) {
                line(&mut s, label, &|n| {
                    ratio(&rows, &shape, n, peer)
                        .map(|x| format!("{x:.2}×"))
                        .unwrap_or_default()
                });
            }
        }
        line(&mut s, "ours, cold: GB/s · TFLOP/s", &|n| {
            at(n, OURS)
                .map(|r| format!("{:.0} · {:.1}", r.cold_gbs, r.cold_tflops))
                .unwrap_or_default()
        });
        s.push('\n');
    }
    s
}

/// The numbers chapter 2's prose quotes from the GPU run.
pub fn facts(rows: &[BenchRow], ceilings: &Table) -> Result<Facts, String> {
    let mut f = Facts::default();
    let src = GPU_CSV;
    if let Some(r) = rows.iter().find(|r| r.imp == "empty_kernel") {
        f.add("empty_cold", fmt_us(r.cold_median_us), src);
        f.add("empty_warm", fmt_us(r.warm_median_us), src);
    }
    let copy_gbs = ceilings.num(&[], "copy_gbs")?;
    let measured: Vec<BenchRow> = rows.iter().filter(|r| r.rows > 0).cloned().collect();
    for shape in shapes(&measured) {
        let s = shape.split('_').next().unwrap_or(&shape).to_string();
        let here: Vec<&BenchRow> = measured.iter().filter(|r| r.shape == shape).collect();
        let mut vs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for n in token_counts(&here) {
            for r in here.iter().filter(|r| r.rows == n) {
                let name = match r.imp.as_str() {
                    OURS => "grouped",
                    LOOP => "loop",
                    GMM => "gmm",
                    PROBE => "probe",
                    _ => continue,
                };
                f.add(
                    format!("{s}_{n}_{name}_cold"),
                    fmt_us(r.cold_median_us),
                    src,
                );
                f.add(
                    format!("{s}_{n}_{name}_warm"),
                    fmt_us(r.warm_median_us),
                    src,
                );
                if r.imp != PROBE {
                    let key = if r.imp == OURS {
                        format!("{s}_{n}_launches")
                    } else {
                        format!("{s}_{n}_{name}_launches")
                    };
                    f.add(key, r.launches.to_string(), src);
                }
            }
            let Some(ours) = find(&measured, &shape, n, OURS) else {
                continue;
            };
            f.add(format!("{s}_{n}_floor"), fmt_us(ours.floor_us), src);
            f.add(
                format!("{s}_{n}_over_floor"),
                format!("{:.1}", ours.cold_median_us / ours.floor_us),
                src,
            );
            f.add(
                format!("{s}_{n}_touched_mb"),
                format!("{:.0}", ours.bytes / 1e6),
                src,
            );
            let active = active(ours)?;
            f.add(format!("{s}_{n}_active"), active.to_string(), src);
            // What a launch costs on average, against what one GEMM's share of the weights
            // (each active expert's bytes split over its 2 GEMMs) takes at the copy rate.
            f.add(
                format!("{s}_{n}_us_per_launch"),
                format!("{:.1}", ours.cold_median_us / ours.launches as f64),
                src,
            );
            f.add(
                format!("{s}_{n}_us_per_gemm_bytes"),
                format!(
                    "{:.1}",
                    ours.bytes / (2.0 * active as f64) / (copy_gbs * 1e3)
                ),
                src,
            );
            f.add(format!("{s}_{n}_gbs"), format!("{:.0}", ours.cold_gbs), src);
            f.add(
                format!("{s}_{n}_tflops"),
                format!("{:.1}", ours.cold_tflops),
                src,
            );
            for (k, (peer, name)) in [(LOOP, "loop"), (GMM, "gmm")].into_iter().enumerate() {
                if let Some(x) = ratio(&measured, &shape, n, peer) {
                    f.add(format!("{s}_{n}_vs_{name}"), format!("{x:.2}"), src);
                    vs[k].push(x);
                }
            }
        }
        for (k, name) in ["loop", "gmm"].into_iter().enumerate() {
            if !vs[k].is_empty() {
                let lo = vs[k].iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = vs[k].iter().cloned().fold(0.0, f64::max);
                f.add(format!("{s}_vs_{name}_min"), format!("{lo:.2}"), src);
                f.add(format!("{s}_vs_{name}_max"), format!("{hi:.2}"), src);
            }
        }
    }
    let tflops = ceilings.num(&[], "bf16_tflops")?;
    let gbs = ceilings.num(&[], "copy_gbs")?;
    f.add("bf16_tflops", format!("{tflops:.0}"), CEILINGS_CSV);
    f.add("copy_gbs", format!("{gbs:.0}"), CEILINGS_CSV);
    Ok(f)
}

/// A time in ms with about three significant digits.
fn fmt_ms(v: f64) -> String {
    fmt_us(v) // the same rounding: the unit is the caller's
}

/// The numbers the prose quotes from the CPU comparison: per shape (`small`, `medium`), each
/// loop's median, the speed-up, the sizes; the machine.
pub fn cpu_facts(t: &Table) -> Result<Facts, String> {
    let mut f = Facts::default();
    let src = CPU_CSV;
    let mut shapes: Vec<String> = Vec::new();
    for rec in t.records() {
        if !shapes.contains(&rec("shape")) {
            shapes.push(rec("shape"));
        }
    }
    for shape in &shapes {
        let s = shape.split('_').next().unwrap_or(shape);
        let ms = |imp: &str| t.num(&[("shape", shape), ("impl", imp)], "median_ms");
        let (literal, grouped) = (ms("literal")?, ms("grouped-cpu")?);
        f.add(format!("cpu_{s}_literal_ms"), fmt_ms(literal), src);
        f.add(format!("cpu_{s}_grouped_ms"), fmt_ms(grouped), src);
        f.add(
            format!("cpu_{s}_speedup"),
            format!("{:.1}", literal / grouped),
            src,
        );
        for (col, key) in [
            ("tokens", "tokens"),
            ("hidden", "hidden"),
            ("intermediate", "intermediate"),
            ("experts", "experts"),
            ("k", "k"),
            ("active_experts", "active"),
            ("samples", "samples"),
        ] {
            f.add(
                format!("cpu_{s}_{key}"),
                t.get(&[("shape", shape), ("impl", "literal")], col)?,
                src,
            );
        }
    }
    f.add("cpu_threads", t.get(&[], "threads")?, src);
    f.add("cpu_host", t.get(&[], "host")?, src);
    Ok(f)
}

// ---------------------------------------------------------------------------------------------
// SVG: one panel per shape, µs per call against tokens, log-log.

/// How an implementation is drawn: color, marker, legend label (Okabe–Ito colors, as chapter
/// 1's figure).
fn style(imp: &str) -> Series {
    let (color, marker, label) = match imp {
        OURS => (
            "#0072b2",
            Marker::Circle,
            "grouped: our loop grouped by expert, one cuBLAS GEMM per expert",
        ),
        LOOP => (
            "#d55e00",
            Marker::Square,
            "torch_loop: Hugging Face's eager per-expert loop, in PyTorch",
        ),
        GMM => (
            "#cc79a7",
            Marker::Triangle,
            "torch_grouped_mm: Hugging Face's default experts path (grouped_mm), in PyTorch",
        ),
        _ => (
            "#009e73",
            Marker::Triangle,
            "floor_probe: one launch reading the touched weights cold",
        ),
    };
    Series {
        imp: imp.to_string(),
        color,
        marker,
        label: label.to_string(),
    }
}

/// Draws the figure: for each implementation the cold median (solid, markers, p10–p90
/// whiskers) and the warm median (dashed); the floor dotted. Every polyline carries `class`
/// (`cold`, `warm`, `floor`), `data-shape` and, for timings, `data-impl`. The floor probe is in
/// the table, not here: it sits on the floor line.
pub fn render_svg(rows: &[BenchRow]) -> String {
    let rows: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.rows > 0 && r.imp != PROBE)
        .collect();
    Figure {
        panel_w: 560.0,
        panel_h: 340.0,
        left: 66.0,
        title: "MoE experts: µs per call against tokens",
        notes: &[
            "The same routings and weight shapes for all three, bf16; both axes logarithmic.",
            "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
            "Warm: back-to-back copies in one graph, divided by their number.",
        ],
        panel_title: |shape| format!("{}, bf16", describe(shape)),
        x_label: "tokens routed, log scale",
        series: [OURS, LOOP, GMM]
            .into_iter()
            .filter(|i| rows.iter().any(|r| r.imp == *i))
            .map(style)
            .collect(),
        floor_label:
            "floor: one launch + weights touched at copy bw, or FLOPs at bf16 rate (dotted)",
        floor_from: OURS,
    }
    .render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::header;

    const SHAPE: &str = "qwen3_h2048_i768_e128_k8";
    const TOKENS: [u64; 5] = [1, 8, 64, 512, 4096];

    /// Active experts of the synthetic run: 8, 52, 125, then all 128.
    fn active_at(t: u64) -> u64 {
        match t {
            1 => 8,
            8 => 52,
            64 => 125,
            _ => 128,
        }
    }

    /// A cold median with known ratios: ours 1.5× the floor, the loop 3× ours up to 64 tokens
    /// and 2× above, `_grouped_mm` 0.8× ours.
    fn cold(imp: &str, t: u64) -> f64 {
        let floor = floor(t);
        match imp {
            OURS => 1.5 * floor,
            LOOP if t <= 64 => 4.5 * floor,
            LOOP => 3.0 * floor,
            GMM => 1.2 * floor,
            _ => 1.1 * floor,
        }
    }

    fn floor(t: u64) -> f64 {
        4.0 + active_at(t) as f64 * 9_437_184.0 / 4190e3
    }

    fn gpu_csv(with_gmm: bool) -> String {
        let mut s = header() + "\n";
        s += "ch02,none,empty_kernel,0,1,4.1,3.5,4.4,0.62,0.61,0.65,4.1,0,0,0,0,200,NVIDIA_H200\n";
        for t in TOKENS {
            for imp in [OURS, LOOP, GMM, PROBE] {
                if imp == GMM && !with_gmm {
                    continue;
                }
                let c = cold(imp, t);
                let launches = match imp {
                    OURS => 3 + 2 * active_at(t),
                    LOOP => 1 + 6 * active_at(t),
                    GMM => 6,
                    _ => 1,
                };
                let bytes = (active_at(t) * 6 * 2048 * 768) as f64;
                let flops = 6.0 * (t * 8 * 2048 * 768) as f64;
                s += &BenchRow {
                    chapter: "ch02".into(),
                    shape: SHAPE.into(),
                    imp: imp.into(),
                    rows: t,
                    launches: launches as u32,
                    cold_median_us: c,
                    cold_p10_us: c * 0.95,
                    cold_p90_us: c * 1.1,
                    warm_median_us: c * 0.7,
                    warm_p10_us: c * 0.69,
                    warm_p90_us: c * 0.71,
                    floor_us: floor(t),
                    bytes,
                    flops: if imp == PROBE { 0.0 } else { flops },
                    cold_gbs: 0.0,
                    cold_tflops: 0.0,
                    samples: 200,
                    device: "NVIDIA_H200".into(),
                }
                .with_rates()
                .to_csv();
                s.push('\n');
            }
        }
        s
    }

    const CEILINGS: &str =
        "bf16_tflops,copy_gbs,empty_cold_us,empty_warm_us,device\n687.8,4189.9,4.128,0.618,NVIDIA_H200\n";
    const CPU: &str = "shape,impl,tokens,hidden,intermediate,experts,k,dtype,active_experts,median_ms,min_ms,max_ms,samples,threads,host\n\
        small_h256_i128_e16_k4,literal,16,256,128,16,4,bf16,16,4.581,4.557,4.631,5,2,AMD EPYC\n\
        small_h256_i128_e16_k4,grouped-cpu,16,256,128,16,4,bf16,16,1.743,1.704,2.130,5,2,AMD EPYC\n\
        medium_h1024_i512_e64_k8,literal,128,1024,512,64,8,bf16,64,1304.332,1297.896,1345.465,5,2,AMD EPYC\n\
        medium_h1024_i512_e64_k8,grouped-cpu,128,1024,512,64,8,bf16,64,69.464,64.520,90.746,5,2,AMD EPYC\n";

    /// A repository of CSVs in a fresh temporary folder (tests never write into the tree).
    fn repo(name: &str, gpu: Option<&str>) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("moe-tools-ch02-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bench/results/h200")).unwrap();
        std::fs::create_dir_all(d.join("bench/results/cpu")).unwrap();
        std::fs::write(d.join(CPU_CSV), CPU).unwrap();
        if let Some(g) = gpu {
            std::fs::write(d.join(GPU_CSV), g).unwrap();
            std::fs::write(d.join(CEILINGS_CSV), CEILINGS).unwrap();
        }
        d
    }

    fn content<'a>(files: &'a [Generated], path: &str) -> &'a str {
        &files.iter().find(|g| g.path == path).unwrap().content
    }

    #[test]
    fn the_group_from_a_synthetic_run() {
        let root = repo("full", Some(&gpu_csv(true)));
        let files = generate(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, [SVG, TABLE, FACTS, CPU_FACTS]);

        let svg = content(&files, SVG);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        for imp in [OURS, LOOP, GMM] {
            for class in ["cold", "warm"] {
                let key = format!(r#"class="{class}" data-shape="{SHAPE}" data-impl="{imp}""#);
                assert_eq!(svg.matches(&key).count(), 1, "{key}");
            }
        }
        assert_eq!(svg.matches(r#"class="floor""#).count(), 1);
        assert!(!svg.contains(r#"data-impl="floor_probe""#));
        assert_eq!(svg.matches(r#"class="whisker""#).count(), 3 * 5);
        assert!(svg.contains("Qwen3: hidden 2048, intermediate 768, 128 experts, k = 8, bf16"));

        let md = content(&files, TABLE);
        assert!(
            md.contains("| ours ÷ floor (cold) | 1.5× | 1.5× | 1.5× | 1.5× | 1.5× |"),
            "{md}"
        );
        assert!(
            md.contains("| ours ÷ loop (cold) | 0.33× | 0.33× | 0.33× | 0.50× | 0.50× |"),
            "{md}"
        );
        assert!(
            md.contains("| ours ÷ `grouped_mm` (cold) | 1.25× |"),
            "{md}"
        );
        assert!(
            md.contains("| expert weights touched (MB) | 75 | 491 | 1180 | 1208 | 1208 |"),
            "{md}"
        );
        assert!(
            md.contains("| launches: ours · eager loop · `grouped_mm` | 19 · 49 · 6 |"),
            "{md}"
        );
        for line in md.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(line.matches('|').count(), 7, "6 columns: {line}");
        }

        let facts = content(&files, FACTS);
        for (name, value) in [
            ("qwen3_1_active", "8"),
            ("qwen3_64_active", "125"),
            ("qwen3_1_launches", "19"),
            ("qwen3_1_loop_launches", "49"),
            ("qwen3_512_vs_loop", "0.50"),
            ("qwen3_vs_loop_min", "0.33"),
            ("qwen3_vs_loop_max", "0.50"),
            ("qwen3_8_vs_gmm", "1.25"),
            ("qwen3_4096_over_floor", "1.5"),
            ("qwen3_1_touched_mb", "75"),
            ("bf16_tflops", "688"),
            ("empty_cold", "4.10"),
        ] {
            assert!(
                facts.contains(&format!("ANCHOR: {name}\n{value}\nANCHOR_END: {name}\n")),
                "{name} = {value} in\n{facts}"
            );
        }
        let cpu = content(&files, CPU_FACTS);
        assert!(cpu.contains("ANCHOR: cpu_medium_speedup\n18.8\n"), "{cpu}");
        assert!(
            cpu.contains("ANCHOR: cpu_small_literal_ms\n4.58\n"),
            "{cpu}"
        );
        assert!(cpu.contains("ANCHOR: cpu_medium_active\n64\n"), "{cpu}");
    }

    #[test]
    fn a_missing_peer_leaves_its_cells_empty() {
        let rows = parse_csv(&gpu_csv(false), "x.csv").unwrap();
        assert_eq!(ratio(&rows, SHAPE, 8, GMM), None);
        let md = table(&rows);
        assert!(!md.contains("grouped_mm` (cold)"), "{md}");
        assert!(md.contains("| 19 · 49 · – |"), "{md}");
        let svg = render_svg(&rows);
        assert!(!svg.contains(GMM), "{svg}");
    }

    #[test]
    fn without_the_gpu_csv_only_the_cpu_numbers() {
        let root = repo("cpu", None);
        let files = generate(&root).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, CPU_FACTS);
        // Once a GPU file is committed, its CSV may not go missing.
        std::fs::create_dir_all(root.join("book/src/figures")).unwrap();
        std::fs::write(root.join(FACTS), "x").unwrap();
        let e = generate(&root).unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            e.contains("ch02-facts.md exist but bench/results/h200/ch02.csv does not"),
            "{e}"
        );
    }

    #[test]
    fn shapes_and_bytes_read_back() {
        assert_eq!(dims(SHAPE), Some((2048, 768, 128, 8)));
        assert_eq!(dims("toy"), None);
        let rows = parse_csv(&gpu_csv(true), "x.csv").unwrap();
        let r = find(&rows, SHAPE, 8, OURS).unwrap();
        assert_eq!(active(r), Ok(52));
        let mut odd = r.clone();
        odd.bytes += 1.0;
        assert!(active(&odd).unwrap_err().contains("not a whole number"));
    }
}
