//! Chapter 2's generated files: the experts of one MoE layer (our loop grouped by expert,
//! cuBLAS per expert) beside Hugging Face's two experts paths in PyTorch (the eager per-expert
//! loop, and the default one on `grouped_mm`), from
//! `bench/results/h200/ch02.csv` (the figure, the table, the quoted numbers), and the CPU loops
//! from `bench/results/cpu/ch02.csv` (their quoted numbers).
//!
//! Until the GPU run's CSV is committed, the group makes the CPU numbers alone and says so on
//! stderr; once any of the GPU files is committed, a missing CSV is an error.
//!
//! Two values are named functions: the active experts (the touched bytes over one expert's,
//! an error when they do not divide) and one GEMM's share of the bytes at the copy rate (it
//! reads the ceilings CSV but names the run's CSV as its source).

use super::spec::{
    self, each, fact, when, Absent, Cell, Chart, Csv, Ctx, Fmt, Item, Line, Loop, Make, Name, Over,
    Part, Pivot, Slot, Source, Style, Value,
};
use super::svg::Marker;
use super::Generated;
use std::path::Path;

/// This file, as the specs' errors name it.
const HERE: &str = "tools/src/figures/ch02.rs";
const GPU: Csv = Csv::at("bench/results/h200/ch02.csv");
const CEILINGS: Csv = Csv::at("bench/results/h200/ch02_ceilings.csv");
const CPU: Csv = Csv::at("bench/results/cpu/ch02.csv");
const SVG: &str = "book/src/figures/ch02-grouped.svg";
const TABLE: &str = "book/src/figures/ch02-grouped-table.md";
const FACTS: &str = "book/src/figures/ch02-facts.md";
const CPU_FACTS: &str = "book/src/figures/ch02-cpu-facts.md";

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

/// The figure: ours and the two PyTorch paths (the floor probe is in the table: it sits on the
/// floor line), Okabe–Ito colors as chapter 1's figure.
#[rustfmt::skip]
const DRAWN: &[Style] = &[
    Style::new("grouped", "#0072b2", Marker::Circle, "grouped: our loop grouped by expert, one cuBLAS GEMM per expert"),
    Style::new("torch_loop", "#d55e00", Marker::Square, "torch_loop: Hugging Face's eager per-expert loop, in PyTorch"),
    Style::new("torch_grouped_mm", "#cc79a7", Marker::Triangle, "torch_grouped_mm: Hugging Face's default experts path (grouped_mm), in PyTorch"),
];
const FIGURE: Chart = Chart {
    csv: &GPU,
    draw: DRAWN,
    floor_from: "grouped",
    panel_w: 560.0,
    panel_h: 340.0,
    left: 66.0,
    title: "MoE experts: µs per call against tokens",
    notes: &[
        "The same routings and weight shapes for all three, bf16; both axes logarithmic.",
        "Cold: the L2 flushed before each graph replay; marker = median, whisker = p10–p90.",
        "Warm: back-to-back copies in one graph, divided by their number.",
    ],
    panel_title: bf16_panel,
    x_label: "tokens routed, log scale",
    floor_label: "floor: one launch + weights touched at copy bw, or FLOPs at bf16 rate (dotted)",
    probes: false,
};

fn bf16_panel(shape: &str) -> String {
    format!("{}, bf16", describe(shape))
}

/// The shapes (the empty launch's row, at 0 tokens, left out), `qwen3` in facts.
const SHAPES: Loop = Loop::csv("shape", &GPU, "rows>0", "shape").named(Name::Prefix);
/// The token counts measured at a shape, ascending.
const COUNTS: Loop = Loop::csv("n", &GPU, "shape={shape}", "rows").numeric();

/// Column `col` of the run's first row matching `rows`.
const fn at(rows: &'static str, col: &'static str) -> Value {
    Value::col(&GPU, rows, col)
}
const OURS: &str = "shape={shape} rows={n} impl=grouped";
const IMP: &str = "shape={shape} rows={n} impl={imp}";
const OURS_COLD: Value = at(OURS, "cold_median_us");
const FLOOR: Value = at(OURS, "floor_us");
const OVER_FLOOR: Value = Value::Ratio(&OURS_COLD, &FLOOR);
/// Ours over a peer, cold medians.
const VS: Value = Value::Ratio(
    &OURS_COLD,
    &at("shape={shape} rows={n} impl={peer}", "cold_median_us"),
);
const VS_LOOP: Value = Value::Ratio(
    &OURS_COLD,
    &at("shape={shape} rows={n} impl=torch_loop", "cold_median_us"),
);
const VS_GMM: Value = Value::Ratio(
    &OURS_COLD,
    &at(
        "shape={shape} rows={n} impl=torch_grouped_mm",
        "cold_median_us",
    ),
);
/// The peers, as the facts name them (`qwen3_8_vs_gmm`).
const PEERS: Loop = Loop::list("peer", &["torch_loop", "torch_grouped_mm"]).named(Name::Map(&[
    ("torch_loop", "loop"),
    ("torch_grouped_mm", "gmm"),
]));

/// The table's lines, in order, and their labels.
const LINES: &[(&str, &str)] = &[
    ("grouped", "grouped (ours)"),
    ("torch_loop", "HF eager loop (PyTorch)"),
    ("torch_grouped_mm", "HF `grouped_mm` (PyTorch)"),
    (
        "floor_probe",
        "floor probe (the weights read once, 1 launch)",
    ),
];

/// The table the chapter quotes, pivoted to fit a screen: one block per shape, one column per
/// token count; a line per implementation (`cold / warm` µs), then the floor and what it is
/// made of, the launches, and our ratios (a peer's where it was measured).
#[rustfmt::skip]
const GROUPED_TABLE: Pivot = Pivot {
    line: line!(),
    blocks: Some(SHAPES.named(Name::Fn(describe))),
    block_head: "**{shape}**, bf16: µs per call, cold / warm\n\n",
    block_tail: "\n",
    rows: Loop { var: "imp", over: Over::Keys(LINES), name: Name::Map(LINES) },
    row_if: Some((&GPU, "shape={shape} impl={imp}")),
    cols: COUNTS.named(Name::Plural("token")),
    cell: Cell {
        text: "{cold} / {warm}",
        slots: &[Slot::new("cold", at(IMP, "cold_median_us"), Fmt::Us), Slot::new("warm", at(IMP, "warm_median_us"), Fmt::Us)],
    },
    extra: &[
        Line::new("floor", Cell { text: "{f}", slots: &[Slot::new("f", at("shape={shape} rows={n}", "floor_us"), Fmt::Us)] }),
        Line::new("expert weights touched (MB)", Cell {
            text: "{mb}",
            slots: &[Slot::new("mb", Value::Per(&at("shape={shape} rows={n}", "bytes"), 1e6), Fmt::Fixed(0))],
        }),
        Line::new("launches: ours · eager loop · `grouped_mm`", Cell {
            text: "{a} · {b} · {c}",
            slots: &[
                Slot::or("a", at(OURS, "launches"), Fmt::Raw, "–"),
                Slot::or("b", at("shape={shape} rows={n} impl=torch_loop", "launches"), Fmt::Raw, "–"),
                Slot::or("c", at("shape={shape} rows={n} impl=torch_grouped_mm", "launches"), Fmt::Raw, "–"),
            ],
        }),
        Line::new("ours ÷ floor (cold)", Cell { text: "{r}×", slots: &[Slot::new("r", OVER_FLOOR, Fmt::Fixed(1))] }),
        Line::new("ours ÷ loop (cold)", Cell { text: "{r}×", slots: &[Slot::new("r", VS_LOOP, Fmt::Fixed(2))] })
            .only_if(&GPU, "shape={shape} impl=torch_loop"),
        Line::new("ours ÷ `grouped_mm` (cold)", Cell { text: "{r}×", slots: &[Slot::new("r", VS_GMM, Fmt::Fixed(2))] })
            .only_if(&GPU, "shape={shape} impl=torch_grouped_mm"),
        Line::new("ours, cold: GB/s · TFLOP/s", Cell {
            text: "{g} · {t}",
            slots: &[Slot::new("g", at(OURS, "cold_gbs"), Fmt::Fixed(0)), Slot::new("t", at(OURS, "cold_tflops"), Fmt::Fixed(1))],
        }),
    ],
    missing: Some(""),
    ..Pivot::PLAIN
};

/// The implementations' short names in facts (`qwen3_1_loop_cold`).
const SHORT: &[(&str, &str)] = &[
    ("grouped", "grouped"),
    ("torch_loop", "loop"),
    ("torch_grouped_mm", "gmm"),
    ("floor_probe", "probe"),
];
/// The implementations measured at a shape and token count, in the CSV's order.
const IMPS: Loop = Loop::csv(
    "imp",
    &GPU,
    "shape={shape} rows={n} impl=grouped|torch_loop|torch_grouped_mm|floor_probe",
    "impl",
)
.named(Name::Map(SHORT));
const ACTIVE: Value = Value::named(&GPU, active);
const PER_LAUNCH: Value = Value::Ratio(&OURS_COLD, &at(OURS, "launches"));

/// The numbers chapter 2's prose quotes from the GPU run. Per shape `s` (`qwen3`) and token
/// count `n`, each implementation's `{s}_{n}_{imp}_cold` / `_warm` and launches (ours
/// `{s}_{n}_launches`); our floor, ratio to it, MB touched, active experts, µs per launch and
/// per GEMM's share of the bytes, GB/s and TFLOP/s, and our ratio to each peer
/// (`{s}_{n}_vs_loop`) with its range over the counts (`{s}_vs_loop_min`); the ceilings.
#[rustfmt::skip]
const GPU_FACTS: &[Item] = &[
    fact!(? "empty_cold", at("impl=empty_kernel", "cold_median_us"), Fmt::Us),
    fact!(? "empty_warm", at("impl=empty_kernel", "warm_median_us"), Fmt::Us),
    each!(SHAPES, [
        each!(COUNTS, [
            each!(IMPS, [
                fact!("{shape}_{n}_{imp}_cold", at(IMP, "cold_median_us"), Fmt::Us),
                fact!("{shape}_{n}_{imp}_warm", at(IMP, "warm_median_us"), Fmt::Us),
                when!("imp=grouped", [fact!("{shape}_{n}_launches", at(IMP, "launches"), Fmt::Raw)]),
                when!("imp=torch_loop|torch_grouped_mm", [fact!("{shape}_{n}_{imp}_launches", at(IMP, "launches"), Fmt::Raw)]),
            ]),
            fact!(? "{shape}_{n}_floor", FLOOR, Fmt::Us),
            fact!(? "{shape}_{n}_over_floor", OVER_FLOOR, Fmt::Fixed(1)),
            fact!(? "{shape}_{n}_touched_mb", Value::Per(&at(OURS, "bytes"), 1e6), Fmt::Fixed(0)),
            fact!(? "{shape}_{n}_active", ACTIVE, Fmt::Int),
            // What a launch costs on average, against what one GEMM's share of the weights
            // (each active expert's bytes split over its 2 GEMMs) takes at the copy rate.
            fact!(? "{shape}_{n}_us_per_launch", PER_LAUNCH, Fmt::Fixed(1)),
            fact!(? "{shape}_{n}_us_per_gemm_bytes", Value::named(&GPU, us_per_gemm_bytes), Fmt::Fixed(1)),
            fact!(? "{shape}_{n}_gbs", at(OURS, "cold_gbs"), Fmt::Fixed(0)),
            fact!(? "{shape}_{n}_tflops", at(OURS, "cold_tflops"), Fmt::Fixed(1)),
            each!(PEERS, [fact!(? "{shape}_{n}_vs_{peer}", VS, Fmt::Fixed(2))]),
        ]),
        each!(PEERS, [
            fact!(? "{shape}_vs_{peer}_min", Value::Min(&COUNTS, &VS), Fmt::Fixed(2)),
            fact!(? "{shape}_vs_{peer}_max", Value::Max(&COUNTS, &VS), Fmt::Fixed(2)),
        ]),
    ]),
    fact!("bf16_tflops", Value::col(&CEILINGS, "", "bf16_tflops"), Fmt::Fixed(0)),
    fact!("copy_gbs", Value::col(&CEILINGS, "", "copy_gbs"), Fmt::Fixed(0)),
];

/// Active experts at `{shape}` and `{n}` tokens: our touched weight bytes over one expert's
/// (bf16 `w13` and `w2`: `3·I·H·2` bytes). An error when they do not divide: the CSV is not
/// what this reads it as. The sizes are the shape's name's: a named function.
fn active(c: &Ctx) -> Result<Option<f64>, String> {
    let (shape, n) = (c.var("shape")?, c.var("n")?);
    let Some(r) = c.rows(OURS)?.into_iter().next() else {
        return Ok(None);
    };
    let (h, i, _, _) = dims(shape).ok_or(format!("shape `{shape}` has no sizes"))?;
    let per = (6 * h * i) as f64;
    let bytes = c.num(r, "bytes")?;
    let active = bytes / per;
    if active.fract() != 0.0 {
        return Err(format!(
            "{shape} grouped {n} tokens: {bytes} bytes is not a whole number of experts ({per} bytes each)"
        ));
    }
    Ok(Some(active))
}

/// One GEMM's share of the touched bytes (each active expert's split over its 2 GEMMs) at the
/// copy rate of `ch02_ceilings.csv`, in µs.
fn us_per_gemm_bytes(c: &Ctx) -> Result<Option<f64>, String> {
    let (Some(r), Some(active)) = (c.rows(OURS)?.into_iter().next(), active(c)?) else {
        return Ok(None);
    };
    let ceilings = c.with(&CEILINGS)?;
    let copy = ceilings
        .rows("")?
        .first()
        .map(|k| ceilings.num(k, "copy_gbs"))
        .ok_or(format!("{}: no row", CEILINGS.path))??;
    Ok(Some(c.num(r, "bytes")? / (2.0 * active) / (copy * 1e3)))
}

/// The numbers the prose quotes from the CPU comparison: per shape (`small`, `medium`), each
/// loop's median (ms, rounded as µs are), the speed-up, the sizes; the machine.
#[rustfmt::skip]
const CPU_NUMBERS: &[Item] = &[
    each!(Loop::csv("shape", &CPU, "", "shape").named(Name::Prefix), [
        fact!("cpu_{shape}_literal_ms", LITERAL_MS, Fmt::Us),
        fact!("cpu_{shape}_grouped_ms", GROUPED_MS, Fmt::Us),
        fact!("cpu_{shape}_speedup", Value::Ratio(&LITERAL_MS, &GROUPED_MS), Fmt::Fixed(1)),
        fact!("cpu_{shape}_tokens", literal("tokens"), Fmt::Raw),
        fact!("cpu_{shape}_hidden", literal("hidden"), Fmt::Raw),
        fact!("cpu_{shape}_intermediate", literal("intermediate"), Fmt::Raw),
        fact!("cpu_{shape}_experts", literal("experts"), Fmt::Raw),
        fact!("cpu_{shape}_k", literal("k"), Fmt::Raw),
        fact!("cpu_{shape}_active", literal("active_experts"), Fmt::Raw),
        fact!("cpu_{shape}_samples", literal("samples"), Fmt::Raw),
    ]),
    fact!("cpu_threads", Value::col(&CPU, "", "threads"), Fmt::Raw),
    fact!("cpu_host", Value::col(&CPU, "", "host"), Fmt::Raw),
];
const fn literal(col: &'static str) -> Value {
    Value::col(&CPU, "shape={shape} impl=literal", col)
}
const LITERAL_MS: Value = literal("median_ms");
const GROUPED_MS: Value = Value::col(&CPU, "shape={shape} impl=grouped-cpu", "median_ms");

/// The GPU run's figure, table and facts (none until `ch02.csv` is committed).
const GPU_GROUP: spec::Group = spec::Group {
    name: "ch02",
    spec: HERE,
    first: Source {
        csv: &GPU,
        absent: Absent::GpuRun {
            stage: "bench",
            copy: "ch02.csv and ch02_ceilings.csv",
            left_out:
                "the figure, the table and the GPU numbers are left out, the CPU numbers are made",
        },
        check: None,
    },
    reads: &[&CEILINGS],
    parts: &[Part {
        needs: &[],
        files: &[
            Make::Chart(SVG, &FIGURE),
            Make::Table(TABLE, &GROUPED_TABLE),
        ],
        facts: GPU_FACTS,
    }],
    facts: FACTS,
    facts_title: "Chapter 2's numbers",
};

/// The CPU comparison's facts, always made.
const CPU_GROUP: spec::Group = spec::Group {
    name: "ch02",
    spec: HERE,
    first: Source {
        csv: &CPU,
        absent: Absent::Never,
        check: None,
    },
    reads: &[],
    parts: &[Part {
        needs: &[],
        files: &[],
        facts: CPU_NUMBERS,
    }],
    facts: CPU_FACTS,
    facts_title: "Chapter 2's CPU numbers",
};

/// The group's files, generated from the repository at `root`.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let mut out = spec::generate(root, &GPU_GROUP)?;
    out.extend(spec::generate(root, &CPU_GROUP)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_row::{header, BenchRow};
    use crate::figures::facts::Facts;
    use crate::figures::spec::Data;

    const OURS: &str = "grouped";
    const LOOP: &str = "torch_loop";
    const GMM: &str = "torch_grouped_mm";
    const PROBE: &str = "floor_probe";
    const GPU_CSV: &str = GPU.path;
    const CEILINGS_CSV: &str = CEILINGS.path;
    const CPU_CSV: &str = super::CPU.path;

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

    const CEILINGS_TEXT: &str =
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
            std::fs::write(d.join(CEILINGS_CSV), CEILINGS_TEXT).unwrap();
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

    fn data(gpu: &str) -> Data {
        let mut d = Data::default();
        d.add(&GPU, gpu).unwrap();
        d.add(&CEILINGS, CEILINGS_TEXT).unwrap();
        d
    }

    #[test]
    fn a_missing_peer_leaves_its_cells_empty() {
        let d = data(&gpu_csv(false));
        let md = spec::pivot(&d, HERE, &GROUPED_TABLE).unwrap();
        assert!(!md.contains("grouped_mm` (cold)"), "{md}");
        assert!(md.contains("| 19 · 49 · – |"), "{md}");
        let svg = spec::chart(&d, &FIGURE).unwrap();
        assert!(!svg.contains(GMM), "{svg}");
        let mut f = Facts::default();
        spec::facts(&d, HERE, GPU_FACTS, &mut f).unwrap();
        assert_eq!(f.get("qwen3_8_vs_gmm"), None);
        assert_eq!(f.get("qwen3_8_vs_loop"), Some("0.33"));
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
        let mut f = Facts::default();
        spec::facts(&data(&gpu_csv(true)), HERE, GPU_FACTS, &mut f).unwrap();
        assert_eq!(f.get("qwen3_8_active"), Some("52"));
        // Bytes that are not a whole number of experts: an error naming the spec and the case.
        let odd = gpu_csv(true).replacen(",490733568,", ",490733569,", 1);
        assert_ne!(odd, gpu_csv(true));
        let e = spec::facts(&data(&odd), HERE, GPU_FACTS, &mut f).unwrap_err();
        assert!(e.starts_with("tools/src/figures/ch02.rs:"), "{e}");
        assert!(e.contains("not a whole number"), "{e}");
    }
}
