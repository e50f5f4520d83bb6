//! Tests of chapter 4's generated files, on synthetic CSVs.

use super::*;
use crate::bench_row::header;

const PROBE: &str = "floor_probe";

/// Everything made from the bench's CSV, in the order [`generate`] writes it.
const FROM_GPU_CSV: [&str; 7] = [
    SVG,
    FUSION_SVG,
    RATES_SVG,
    FLOOR_SVG,
    TABLE,
    TARGETS_TABLE,
    FACTS,
];

const SHAPES: [(&str, f64, f64, f64); 2] = [
    ("qwen3_h2048_i768_e128_k8", 2048.0, 768.0, 128.0),
    ("glm_h4096_i1024_e288_k8", 4096.0, 1024.0, 288.0),
];
const TOKENS: [u64; 3] = [1, 64, 4096];

/// Active experts at T: 8 at one token, all of them from 64.
fn active(e: f64, t: u64) -> f64 {
    if t == 1 {
        8.0
    } else {
        e
    }
}

/// Ours: 10 µs + 1 µs per 64 tokens, cold; warm a quarter of it. Chapter 2's loop 3× ours,
/// torch_grouped_mm 2× ours, the loop 5× ours, the variant 1.5× ours at one token and 0.8×
/// above.
fn cold(imp: &str, t: u64) -> f64 {
    let ours = 10.0 + t as f64 / 64.0;
    ours * match imp {
        OURS => 1.0,
        GROUPED => 3.0,
        TORCH_GMM => 2.0,
        TORCH_LOOP => 5.0,
        "fused_decode" if t == 1 => 1.5,
        "fused_decode" => 0.8,
        _ => 0.5,
    }
}

fn gpu_csv(with_variant: bool) -> String {
    let mut s = header() + "\n";
    s += "ch04,none,empty_kernel,0,1,4.0,3.9,4.2,0.6,0.59,0.62,4.0,0,0,0,0,200,NVIDIA_H200\n";
    for (shape, h, i, e) in SHAPES {
        for t in TOKENS {
            let bytes = active(e, t) * 3.0 * h * i * 2.0;
            let flops = 2.0 * (t * 8) as f64 * 3.0 * h * i;
            for imp in [OURS, "fused_decode", PROBE, GROUPED, TORCH_GMM, TORCH_LOOP] {
                if imp == "fused_decode" && !with_variant {
                    continue;
                }
                let c = cold(imp, t);
                s += &BenchRow {
                    chapter: "ch04".into(),
                    shape: shape.into(),
                    imp: imp.into(),
                    rows: t,
                    launches: if imp == TORCH_LOOP { 100 } else { 6 },
                    cold_median_us: c,
                    cold_p10_us: c * 0.95,
                    cold_p90_us: c * 1.1,
                    warm_median_us: c / 4.0,
                    warm_p10_us: c / 4.1,
                    warm_p90_us: c / 3.9,
                    floor_us: 5.0,
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
    }
    s
}

fn layout_csv() -> String {
    let mut s = "shape,hidden,intermediate,experts,k,tokens,pairs,active_experts,path,block_m,tiles,paired_tiles,touched_bytes,flops\n".to_string();
    for (shape, h, i, e) in SHAPES {
        for t in TOKENS {
            // 4096 tokens: 320 tiles of 128 for 32768 pairs (80.0% of their rows used).
            let (path, bm, tiles) = match t {
                4096 => ("tiled", 128u64, 320u64),
                1 | 8 => ("decode", 0, 0),
                _ => ("tiled", 16, (8 * t).div_ceil(16) + e as u64),
            };
            s += &format!(
                "{shape},{h},{i},{e},8,{t},{},{},{path},{bm},{tiles},{},{},0\n",
                8 * t,
                active(e, t),
                tiles / 2 * 2,
                active(e, t) * 3.0 * h * i * 2.0
            );
        }
    }
    s
}

const STEPS: &str =
    "chapter,shape,rows,step,kernel,prefix_cold_us,prefix_warm_us,cold_us,warm_us\n\
     ch04,glm_h4096_i1024_e288_k8,64,3,ch04_fused_moe::fused_gemm1_swiglu,30.0,12.0,20.0,8.0\n";

const CHECK: &str = "shape,tokens,impl,against,max_abs_diff,rms_of_against,max_of_against,relative,relative_to,tolerance,ok\n\
     glm_h4096_i1024_e288_k8,1,fused,ch02_grouped,1e-6,1e-2,4e-2,1.0000e-4,rms,2.0e-3,1\n\
     glm_h4096_i1024_e288_k8,64,fused,ch02_grouped,1e-6,1e-2,4e-2,3.0000e-4,rms,2.0e-3,1\n\
     glm_h4096_i1024_e288_k8,64,torch_grouped_mm,fused,1e-6,1e-2,4e-2,5.0000e-3,max,2.0e-2,1\n";

fn repo(name: &str, gpu: Option<&str>) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("moe-tools-ch04-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("bench/results/h100")).unwrap();
    if let Some(g) = gpu {
        std::fs::write(d.join(GPU_CSV), g).unwrap();
        std::fs::write(d.join(LAYOUT_CSV), layout_csv()).unwrap();
        std::fs::write(d.join(STEPS_CSV), STEPS).unwrap();
        std::fs::write(d.join(CHECK_CSV), CHECK).unwrap();
        std::fs::write(
            d.join(CEILINGS_CSV),
            "bf16_tflops,copy_gbs,empty_cold_us,empty_warm_us,device\n680.0,4200.0,4.000,0.600,NVIDIA_H200\n",
        )
        .unwrap();
    }
    d
}

fn content<'a>(files: &'a [Generated], path: &str) -> &'a str {
    &files.iter().find(|g| g.path == path).unwrap().content
}

fn has(facts: &str, name: &str, value: &str) {
    assert!(
        facts.contains(&format!("ANCHOR: {name}\n{value}\nANCHOR_END: {name}\n")),
        "{name} = {value} in\n{facts}"
    );
}

/// The y of each point of the polyline of `imp` in panel `panel`.
fn ys(svg: &str, panel: &str, imp: &str) -> Vec<f64> {
    let key = format!(r#"class="line" data-panel="{panel}" data-impl="{imp}" points=""#);
    let line = svg
        .lines()
        .find(|l| l.contains(&key))
        .unwrap_or_else(|| panic!("{key}"));
    line.split(&key)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .split(' ')
        .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn the_ptxas_report_is_read_per_kernel() {
    let log = "ptxas info    : Compiling entry function 'fused_gemm2' for 'sm_90'\n\
               ptxas info    : Function properties for fused_gemm2\n    \
               8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n\
               ptxas info    : Used 111 registers, used 1 barriers, 16672 bytes smem\n\
               ptxas info    : Compiling entry function 'fused_gemm1_swiglu' for 'sm_90'\n\
               ptxas info    : Used 109 registers, used 1 barriers, 2048 bytes smem\n";
    let k = parse_ptxas(log).unwrap();
    assert_eq!(
        k[0],
        PtxasKernel {
            name: "fused_gemm2".into(),
            registers: 111,
            spill_bytes: 8,
            smem_bytes: 16672
        }
    );
    assert_eq!(
        (k[1].registers, k[1].spill_bytes, k[1].smem_bytes),
        (109, 0, 2048)
    );
    let t = ptxas_table(&k);
    assert!(
        t.contains(
            "| w4_k32_n1 | 109 regs · 0 B spilled · 2.0 KB | 111 regs · 8 B spilled · 16.3 KB |"
        ),
        "{t}"
    );
    assert!(parse_ptxas("nothing here").is_err());
}

#[test]
fn the_group_from_a_synthetic_run() {
    let root = repo("full", Some(&gpu_csv(true)));
    let files = generate(&root).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(paths, FROM_GPU_CSV);

    let svg = content(&files, SVG);
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    for (shape, ..) in SHAPES {
        for imp in [OURS, GROUPED, TORCH_GMM, TORCH_LOOP] {
            for class in ["cold", "warm"] {
                let key = format!(r#"class="{class}" data-shape="{shape}" data-impl="{imp}""#);
                assert_eq!(svg.matches(&key).count(), 1, "{key}");
            }
        }
    }
    assert_eq!(svg.matches(r#"class="floor""#).count(), 2);
    assert!(!svg.contains("data-impl=\"fused_decode\"") && !svg.contains("empty_kernel"));

    // The fusion figure: the variant over ours, 1.5 at one token and 0.8 above, on a
    // linear axis through 0: the points' heights are in the ratio of the values.
    let fusion = content(&files, FUSION_SVG);
    let shape = SHAPES[1].0;
    let y = ys(fusion, shape, "fused_decode");
    assert_eq!(y.len(), 3);
    let base = fusion
        .lines()
        .find(|l| l.contains(r#"class="reference""#))
        .unwrap()
        .split("y1=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .parse::<f64>()
        .unwrap();
    assert!(
        y[0] < base && y[1] > base,
        "1.5 above the line at 1, 0.8 below"
    );
    assert!(fusion.contains("data-impl=\"fused_decode_warm\""));

    // The floor figure: cold ÷ floor from the CSV's rows, on a linear axis: every point's
    // distance from the line at 1 is proportional to its ratio minus 1.
    let floor = content(&files, FLOOR_SVG);
    let rows = parse_csv(&gpu_csv(true), "ch04.csv").unwrap();
    let want: Vec<f64> = token_counts(&rows, shape)
        .into_iter()
        .filter_map(|n| find(&rows, shape, n, OURS))
        .map(|r| r.cold_median_us / r.floor_us)
        .collect();
    let y = ys(floor, shape, OURS);
    assert_eq!(y.len(), want.len());
    let one = floor
        .lines()
        .find(|l| l.contains(r#"class="reference""#))
        .and_then(|l| l.split("y1=\"").nth(1))
        .and_then(|l| l.split('"').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    let scale: Vec<f64> = (0..y.len())
        .filter(|&i| (want[i] - 1.0).abs() > 1e-3)
        .map(|i| (one - y[i]) / (want[i] - 1.0))
        .collect();
    // (Coordinates are written to 0.1 px: a few percent of a short distance.)
    assert!(
        scale.len() >= 2
            && scale
                .iter()
                .all(|k| *k > 0.0 && (k / scale[0] - 1.0).abs() < 5e-2),
        "{scale:?}"
    );
    assert!(
        !floor.contains("data-impl=\"fused_decode_swiglu\""),
        "kernel versions only"
    );

    // The targets: each verdict from the ratio the CSV gives, computed here.
    let targets = content(&files, TARGETS_TABLE);
    for r in rows
        .iter()
        .filter(|r| r.imp == OURS && r.rows > 0 && r.rows <= 512)
    {
        let over = r.cold_median_us / r.floor_us;
        let limit = if r.rows == 1 { 1.3 } else { 1.1 };
        let shown = if (over * 100.0).round() == limit * 100.0 && over != limit {
            format!("{over:.4}")
        } else {
            format!("{over:.2}")
        };
        let line = format!(
            "| {} | {} | ≤ {limit}× the floor | {shown}× the floor | {} |",
            short_title(&r.shape),
            r.rows,
            if over <= limit { "met" } else { "**missed**" }
        );
        assert!(targets.contains(&line), "{line}\n{targets}");
    }

    // The rates figure: TB/s = bytes / cold µs / 1e6, computed here from the definition.
    let rates = content(&files, RATES_SVG);
    assert_eq!(rates.matches(r#"<g class="panel""#).count(), 4);
    assert_eq!(rates.matches(r#"class="reference""#).count(), 4);
    assert!(rates.contains("copy 4.20 TB/s") && rates.contains("cuBLAS bf16 680 TFLOP/s"));
    let tbs = |t: u64| active(288.0, t) * 3.0 * 4096.0 * 1024.0 * 2.0 / cold(OURS, t) / 1e6;
    let y = ys(rates, &format!("{shape}.tbs"), OURS);
    // Heights above the axis are proportional to the values.
    let y_axis = |svg: &str| -> f64 {
        let at = svg.find(&format!(r#"data-panel="{shape}.tbs""#)).unwrap();
        let rect = svg[at..].split("<rect ").nth(1).unwrap();
        let attr = |a: &str| -> f64 {
            let v = rect.split(&format!(" {a}=\"")).nth(1).unwrap();
            v.split('"').next().unwrap().parse().unwrap()
        };
        attr("y") + attr("height")
    };
    let bottom = y_axis(rates);
    let (h1, h2) = (bottom - y[1], bottom - y[2]);
    assert!(
        ((h1 / h2) / (tbs(64) / tbs(4096)) - 1.0).abs() < 0.02,
        "{h1} {h2} {} {}",
        tbs(64),
        tbs(4096)
    );

    let md = content(&files, TABLE);
    assert!(md.contains("**GLM-like: hidden 4096, intermediate 1024, 288 experts, k = 8**, bf16: µs per call, cold / warm; one empty launch: 4.00 / 0.60\n"), "{md}");
    // Ours at 64 tokens: 11 µs cold, 2.75 warm.
    assert!(md.contains("| ours: path, fusion and tiles by the rules and the tuned table | 10.0 / 2.50 | 11.0 / 2.75 | 74.0 / 18.5 |"), "{md}");
    assert!(
        md.contains("| torch_grouped_mm ÷ ours | 2.00× / 2.00× | 2.00× / 2.00× | 2.00× / 2.00× |"),
        "{md}"
    );
    assert!(
        !md.contains("fused_decode ÷ ours"),
        "the fusion figure's: {md}"
    );
    assert!(
        md.contains("| ours, decode path forced (SwiGLU and the sum over k fused) | 15.0 / 3.76 | 8.80 / 2.20 | 59.2 / 14.8 |"),
        "{md}"
    );
    assert!(
        md.contains(
            "| active experts · path, BLOCK_M | 8 · decode | 288 · tiled, 16 | 288 · tiled, 128 |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| ours ÷ floor (cold) | 2.0× | 2.2× | 14.8× |"),
        "{md}"
    );
    let glm_tbs_64 = format!("{:.2} · ", tbs(64));
    assert!(md.contains(&glm_tbs_64), "{glm_tbs_64} in {md}");
    for line in md.lines().filter(|l| l.starts_with('|')) {
        assert_eq!(line.matches('|').count(), 5, "4 columns: {line}");
    }

    let facts = content(&files, FACTS);
    for (name, value) in [
        ("copy_gbs", "4200"),
        ("bf16_tflops", "680"),
        ("empty_cold", "4.00"),
        ("glm_t64_cold", "11.0"),
        ("glm_t64_warm", "2.75"),
        ("glm_t64_torch_loop_cold", "55.0"),
        ("glm_t64_torch_loop_launches", "100"),
        ("glm_t64_over_ours_ch02_grouped", "3.00"),
        ("glm_t1_over_ours_fused_decode", "1.50"),
        ("glm_over_ours_fused_decode_min", "0.80"),
        ("glm_over_ours_torch_grouped_mm_max", "2.00"),
        ("glm_t64_over_floor", "2.20"),
        ("glm_t64_floor", "5.00"),
        ("glm_t64_beyond_1_1_floor_us", "5.50"),
        ("glm_t1_active", "8"),
        ("glm_t4096_block_m", "128"),
        ("glm_t4096_path", "tiled"),
        ("glm_t4096_tiles", "320"),
        ("glm_t4096_rows_used_pct", "80.0"),
        ("glm_t4096_padding_pct", "20.0"),
        ("glm_t4096_paired_tiles_pct", "100"),
        ("glm_t1_path", "decode"),
        ("glm_t1_touched_mb", "201"),
        ("glm_t64_step3_gemm1_swiglu_cold", "20.0"),
        ("glm_check_fused_vs_ch02_grouped", "3.0e-4"),
        ("glm_check_torch_grouped_mm_vs_fused", "5.0e-3"),
        ("checks_ok", "yes"),
    ] {
        has(facts, name, value);
    }
    has(facts, "glm_t64_tbs", &format!("{:.2}", tbs(64)));
    let tflops = 2.0 * 64.0 * 8.0 * 3.0 * 4096.0 * 1024.0 / 11.0 / 1e6;
    has(facts, "glm_t64_tflops", &format!("{tflops:.1}"));
}

#[test]
fn without_variants_no_fusion_figure() {
    let root = repo("novariant", Some(&gpu_csv(false)));
    let files = generate(&root).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(
        paths,
        [SVG, RATES_SVG, FLOOR_SVG, TABLE, TARGETS_TABLE, FACTS]
    );
    assert!(!content(&files, TABLE).contains("fused_decode"));
}

#[test]
fn without_the_gpu_csv_nothing_until_something_is_committed() {
    let root = repo("none", None);
    assert_eq!(generate(&root).unwrap(), Vec::new());
    std::fs::create_dir_all(root.join("book/src/figures")).unwrap();
    std::fs::write(root.join(FACTS), "x").unwrap();
    let e = generate(&root).unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        e.contains("ch04-facts.md exist but bench/results/h100/ch04.csv does not"),
        "{e}"
    );
}

#[test]
fn linear_ticks_cover_the_range() {
    assert_eq!(linear_ticks(4.6), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(linear_ticks(680.0), [0.0, 200.0, 400.0, 600.0, 800.0]);
    assert_eq!(tick(0.5), "0.5");
    assert_eq!(tick(1.5), "1.5");
}

// ---- `bench ch04-tune`'s files ----------------------------------------------------------

const TUNE_SHAPES: [(&str, u64, u64, u64, u64); 2] = [
    ("qwen3_30b_a3b", 2048, 768, 128, 8),
    ("glm_h4096_i1024_e288_k8", 4096, 1024, 288, 8),
];
const TUNE_TOKENS: [u64; 4] = [1, 8, 64, 512];

/// A tile: 50 + T µs times its factor (`w4_k32_n2` pays off from 512 tokens).
fn tiled_us(config: &str, t: u64) -> f64 {
    let f = match config {
        "w4_k32_n1" => 1.2,
        "w4_k64_n1" => 1.0,
        "w4_k32_n2" if t >= 512 => 0.9,
        _ => 1.5,
    };
    f * (50.0 + t as f64)
}

/// A decode geometry: 10 µs per quarter of a token plus ten, `w2_c1` 2% faster.
fn decode_us(geometry: &str, t: u64) -> f64 {
    let f = if geometry == "w2_c1" { 0.98 } else { 1.0 };
    f * 10.0 * (1.0 + t as f64 / 4.0)
}

/// What the bench times: every tile; the decode geometries up to 16 pairs per expert.
fn tune_candidates(e: u64, k: u64, t: u64) -> Vec<(&'static str, &'static str, f64)> {
    let mut v: Vec<(&str, &str, f64)> = ["w4_k32_n1", "w4_k64_n1", "w4_k32_n2"]
        .into_iter()
        .map(|c| ("tiled", c, tiled_us(c, t)))
        .collect();
    if t * k <= 16 * e {
        v.extend(
            ["w4_c1", "w2_c1"]
                .into_iter()
                .map(|g| ("decode", g, decode_us(g, t))),
        );
    }
    v
}

/// The rule: decode `w4_c1` while T·k ≤ 4·E, else the tile `w4_k64_n1`.
fn rule(e: u64, k: u64, t: u64) -> (&'static str, &'static str, f64) {
    if t * k <= 4 * e {
        ("decode", "w4_c1", decode_us("w4_c1", t))
    } else {
        ("tiled", "w4_k64_n1", tiled_us("w4_k64_n1", t))
    }
}

/// Both files of one synthetic run; `winner` may rename a bucket's winner (a broken table).
fn tune_csvs(winner: Option<(u64, &str, &str)>) -> (String, String) {
    let mut all = "shape,hidden,intermediate,experts,k,tokens,path,config,cold_us,cold_p10_us,cold_p90_us,warm_us\n".to_string();
    let mut tuned = "# bench ch04-tune on NVIDIA H200: the fastest cold median per shape and batch bucket (tools/bench/src/ch04_tune.rs)\n\
        hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us\n".to_string();
    for (name, h, i, e, k) in TUNE_SHAPES {
        for t in TUNE_TOKENS {
            let cands = tune_candidates(e, k, t);
            for (path, config, us) in &cands {
                all += &format!(
                    "{name},{h},{i},{e},{k},{t},{path},{config},{us:.3},{:.3},{:.3},{:.3}\n",
                    us * 0.98,
                    us * 1.03,
                    us * 0.9
                );
            }
            let mut best = cands[0];
            for c in &cands {
                if c.2 < best.2 {
                    best = *c;
                }
            }
            if let Some((_, p, c)) = winner.filter(|w| w.0 == t) {
                best = *cands.iter().find(|x| x.0 == p && x.1 == c).unwrap();
            }
            let r = rule(e, k, t);
            tuned += &format!(
                "{h},{i},{e},{k},{t},{},{},{:.3},{:.3},{},{},{:.3}\n",
                best.0,
                best.1,
                best.2,
                best.2 * 0.9,
                r.0,
                r.1,
                r.2
            );
        }
    }
    (tuned, all)
}

fn tune_repo(name: &str, tuned: Option<&str>, all: Option<&str>) -> std::path::PathBuf {
    let root = repo(name, None);
    if let Some(t) = tuned {
        std::fs::write(root.join(TUNED_CSV), t).unwrap();
    }
    if let Some(a) = all {
        std::fs::write(root.join(TUNE_ALL_CSV), a).unwrap();
    }
    root
}

/// A ratio that two places would print as the limit itself gets four, so the number and
/// the verdict beside it agree to the eye.
#[test]
fn targets_near_the_line_show_four_places() {
    let row = |t: u64, cold: f64| BenchRow {
        floor_us: 100.0,
        ..BenchRow::flat("ch04", "qwen3_h2048_i768_e128_k8", OURS, t, cold)
    };
    let md = targets_table(
        &[
            row(8, 110.34),
            row(64, 109.65),
            row(512, 112.0),
            row(1, 130.0),
        ],
        680.0,
    );
    for line in [
        "| 8 | ≤ 1.1× the floor | 1.1034× the floor | **missed** |",
        "| 64 | ≤ 1.1× the floor | 1.0965× the floor | met |",
        "| 512 | ≤ 1.1× the floor | 1.12× the floor | **missed** |",
        "| 1 | ≤ 1.3× the floor | 1.30× the floor | met |",
    ] {
        assert!(md.contains(line), "{line}\n{md}");
    }
}

#[test]
fn versions_are_read_from_configuration_names() {
    for (config, v) in [
        ("w4_k32_n1", Some(1)),
        ("w8_k32_n1_m128", Some(1)),
        ("w4_k64_n1_s3", Some(2)),
        ("w4_k64_n1_s4_m32", Some(2)),
        ("w2x2_k64_n4_s3", Some(3)),
        ("w2x4_k32_n2_s4_m64", Some(3)),
        ("g2_k64_n16_s4", Some(4)),
        ("g1_k64_n8_s4_m64", Some(4)),
        ("g2_k64_n16_s4_x", Some(5)),
        ("g1_k64_n8_s3_x_w0", Some(6)),
        ("g1_k64_n8_s4_x_w0_m64", Some(6)),
        ("g2_k64_n16_s4_x_tma", Some(7)),
        ("g1_k64_n8_s3_x_w0_tma", Some(7)),
        ("g2_k64_n16_s4_x_tma_ws", Some(8)),
        ("g1_k64_n8_s4_x_tma_ws_m64", Some(8)),
        ("g2_k64_n16_s4_x_tma_ws_mc", Some(9)),
        ("g2_k64_n16_s4_x_tma_ws_ps", Some(10)),
        ("g1_k64_n8_s4_x_tma_ws_ps_m64", Some(10)),
        ("g2_k64_n16_s4_x_tma_ws_ps_dy", Some(11)),
        ("g1_k64_n8_s4_x_tma_ws_ps_dy_m64", Some(11)),
        ("gx_k64", None),
        ("decode", None),
    ] {
        assert_eq!(tile_version(config), v, "{config}");
    }
}

#[test]
fn the_versions_table_takes_each_versions_fastest_tile() {
    let c = |tokens: u64, path: &str, config: &str, us: f64| Candidate {
        shape: "qwen3_30b_a3b".into(),
        dims: (2048, 768, 128, 8),
        tokens,
        path: path.into(),
        config: config.into(),
        cold_us: us,
        cold_p10_us: us,
        cold_p90_us: us,
        warm_us: us,
    };
    let all = [
        c(64, "tiled", "w4_k64_n1", 1000.0),
        c(64, "tiled", "w4_k64_n1_s3", 400.0),
        c(64, "tiled", "w4_k64_n1_s4_m32", 380.0),
        c(64, "tiled", "w2x2_k64_n4_s3", 500.0),
        c(64, "tiled", "g2_k64_n16_s4", 800.0),
        c(64, "tiled", "g1_k64_n8_s4_x", 250.0),
        c(64, "tiled", "g1_k64_n8_s3_x_w0", 200.0),
        // A decode candidate faster than every tile is not a version of the tile.
        c(64, "decode", "w4_c1", 100.0),
    ];
    let by_version = fastest_by_version(&all);
    let shapes = [TuneShape {
        name: "qwen3_30b_a3b".into(),
        dims: (2048, 768, 128, 8),
        paths: Vec::new(),
        buckets: Vec::new(),
    }];
    let t = versions_table(&shapes, &by_version);
    assert!(t.contains("| 1: one stage | 1000 `w4_k64_n1` |"), "{t}");
    assert!(
        t.contains("| 2: stages in flight | 380 `w4_k64_n1_s4_m32` |"),
        "{t}"
    );
    assert!(
        t.contains("| 3: a grid of warps | 500 `w2x2_k64_n4_s3` |"),
        "{t}"
    );
    // 1000 / 380 and 380 / 500.
    assert!(t.contains("| version 1 ÷ version 2 | 2.63× |"), "{t}");
    assert!(t.contains("| version 2 ÷ version 3 | 0.76× |"), "{t}");
    assert!(
        t.contains("| 4: warpgroup MMA (sm_90a) | 800 `g2_k64_n16_s4` |"),
        "{t}"
    );
    // 500 / 250 and 800 / 250.
    assert!(t.contains("| version 3 ÷ version 5 | 2.00× |"), "{t}");
    assert!(t.contains("| version 4 ÷ version 5 | 3.20× |"), "{t}");
    // 250 / 200.
    assert!(t.contains("| version 5 ÷ version 6 | 1.25× |"), "{t}");
    let mut f = Facts::default();
    version_facts(&by_version, &mut f);
    let text = f.render("test");
    for (name, value) in [
        ("qwen3_t64_v2_cold", "380"),
        ("qwen3_t64_v3_config", "w2x2_k64_n4_s3"),
        ("qwen3_t64_v2_over_v3", "0.76"),
        ("qwen3_t64_v3_over_v5", "2.00"),
        ("qwen3_t64_v5_config", "g1_k64_n8_s4_x"),
        ("qwen3_t64_v5_over_v6", "1.25"),
        ("qwen3_t64_v6_config", "g1_k64_n8_s3_x_w0"),
    ] {
        assert!(
            text.contains(&format!("ANCHOR: {name}\n{value}\nANCHOR_END: {name}")),
            "{name}: {text}"
        );
    }
}

#[test]
fn the_tuning_table_and_facts_from_a_synthetic_run() {
    let (tuned, all) = tune_csvs(None);
    let root = tune_repo("tune", Some(&tuned), Some(&all));
    let files = generate(&root).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let paths: Vec<&str> = files.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(paths, [TUNE_TABLE, VERSIONS_TABLE, TUNE_FACTS]);

    // Computed here from the formulas: below 64 tokens the decode path wins (w2_c1), from
    // 64 the tile w4_k64_n1, at 512 w4_k32_n2. The rule runs decode w4_c1 up to T·k = 4E
    // (Qwen3: 64 tokens, GLM: 144), then w4_k64_n1.
    let r2 = |x: f64| format!("{x:.2}");
    let facts = content(&files, TUNE_FACTS);
    let ratio_64 = decode_us("w4_c1", 64) / tiled_us("w4_k64_n1", 64);
    let ratio_512 = tiled_us("w4_k64_n1", 512) / tiled_us("w4_k32_n2", 512);
    for (name, value) in [
        ("tune_device", "NVIDIA H200".to_string()),
        ("tune_quick", "no".into()),
        ("tune_buckets", "1, 8, 64 and 512".into()),
        ("tune_timings", (3 * 8 + 2 * 3 + 2 * 4).to_string()),
        ("qwen3_tune_t1_path", "decode".into()),
        ("qwen3_tune_t1_config", "w2_c1".into()),
        ("qwen3_tune_t1_rule_config", "w4_c1".into()),
        ("qwen3_tune_t1_ppe", "0.06".into()),
        ("qwen3_tune_t8_ppe", "0.50".into()),
        ("qwen3_tune_t64_ppe", "4.0".into()),
        ("glm_tune_t64_ppe", "1.8".into()),
        ("glm_tune_t512_ppe", "14".into()),
        (
            "qwen3_tune_t1_speedup",
            r2(decode_us("w4_c1", 1) / decode_us("w2_c1", 1)),
        ),
        ("qwen3_tune_t1_best_tiled", "w4_k64_n1".into()),
        (
            "qwen3_tune_t1_best_tiled_cold",
            fmt_us(tiled_us("w4_k64_n1", 1)),
        ),
        (
            "qwen3_tune_t1_tiled_over_decode",
            r2(tiled_us("w4_k64_n1", 1) / decode_us("w2_c1", 1)),
        ),
        ("qwen3_tune_t64_path", "tiled".into()),
        ("qwen3_tune_t64_rule_path", "decode".into()),
        ("qwen3_tune_t64_speedup", r2(ratio_64)),
        (
            "qwen3_tune_t64_decode_over_tiled",
            r2(decode_us("w2_c1", 64) / tiled_us("w4_k64_n1", 64)),
        ),
        ("qwen3_tune_t512_config", "w4_k32_n2".into()),
        ("qwen3_tune_t512_speedup", r2(ratio_512)),
        ("qwen3_tune_buckets", "4".into()),
        ("qwen3_tune_decode_last", "8".into()),
        ("qwen3_tune_decode_last_ppe", "0.50".into()),
        (
            "qwen3_tune_decode_last_tiled_over_decode",
            r2(tiled_us("w4_k64_n1", 8) / decode_us("w2_c1", 8)),
        ),
        ("qwen3_tune_tiled_first", "64".into()),
        ("qwen3_tune_tiled_first_ppe", "4.0".into()),
        (
            "qwen3_tune_tiled_first_decode_over_tiled",
            r2(decode_us("w2_c1", 64) / tiled_us("w4_k64_n1", 64)),
        ),
        ("qwen3_tune_rule_decode_last", "64".into()),
        ("qwen3_tune_rule_tiled_first", "512".into()),
        ("glm_tune_rule_decode_last", "64".into()),
        ("glm_tune_rule_tiled_first", "512".into()),
        // 1, 8 and 512 on the same path; no bucket with the same geometry or tile.
        ("qwen3_tune_path_agrees", "3".into()),
        ("qwen3_tune_choice_agrees", "0".into()),
        ("qwen3_tune_rule_tile", "w4_k64_n1".into()),
        ("qwen3_tune_rule_tile_fastest", "3".into()),
        ("qwen3_tune_tiled_buckets", "4".into()),
        (
            "qwen3_tune_decode_speedup_max",
            r2(decode_us("w4_c1", 8) / decode_us("w2_c1", 8)),
        ),
        ("qwen3_tune_speedup_max", r2(ratio_64.max(ratio_512))),
        ("qwen3_tune_speedup_max_tokens", "64".into()),
        ("qwen3_tune_speedup_max_ppe", "4.0".into()),
        ("qwen3_tune_speedup_max_config", "tiled w4_k64_n1".into()),
        ("qwen3_tune_speedup_max_rule_config", "decode w4_c1".into()),
        // GLM: decode timed at 512 tokens too (8·512 ≤ 16·288), and lost.
        ("glm_tune_t512_best_decode", "w2_c1".into()),
        (
            "glm_tune_t512_decode_over_tiled",
            r2(decode_us("w2_c1", 512) / tiled_us("w4_k32_n2", 512)),
        ),
    ] {
        has(facts, name, &value);
    }
    assert!(!facts.contains("qwen3_tune_t512_best_decode"), "{facts}");

    let md = content(&files, TUNE_TABLE);
    assert!(
        md.contains("one run of `bench ch04-tune` on the NVIDIA H200"),
        "{md}"
    );
    assert!(
        md.contains("**Qwen3-30B-A3B: H 2048, I 768, E 128, k 8**\n"),
        "{md}"
    );
    assert!(
        md.contains("**GLM-like: H 4096, I 1024, E 288, k 8**\n"),
        "{md}"
    );
    assert!(
        md.contains("| fastest: path, configuration | **decode w2_c1** | **decode w2_c1** | **tiled w4_k64_n1** | **tiled w4_k32_n2** |"),
        "{md}"
    );
    assert!(
        md.contains("| the rule alone: path, configuration | decode w4_c1 | decode w4_c1 | decode w4_c1 | tiled w4_k64_n1 |"),
        "{md}"
    );
    let rule_row = format!(
        "| the rule ÷ the fastest | {}× | {}× | {}× | {}× |",
        r2(decode_us("w4_c1", 1) / decode_us("w2_c1", 1)),
        r2(decode_us("w4_c1", 8) / decode_us("w2_c1", 8)),
        r2(ratio_64),
        r2(ratio_512)
    );
    assert!(md.contains(&rule_row), "{rule_row} in {md}");
    // The winner at 512 tokens with its p10–p90.
    let w = tiled_us("w4_k32_n2", 512);
    let cell = format!(
        "| {} ({}–{}) |\n",
        fmt_us(w),
        fmt_us(w * 0.98),
        fmt_us(w * 1.03)
    );
    assert!(md.contains(&cell), "{cell} in {md}");
    let qwen3 = md.split("**GLM-like").next().unwrap();
    assert!(
        qwen3.contains(&format!(
            "| fastest decode: geometry · cold µs | w2_c1 · {} | w2_c1 · {} | w2_c1 · {} | – |",
            fmt_us(decode_us("w2_c1", 1)),
            fmt_us(decode_us("w2_c1", 8)),
            fmt_us(decode_us("w2_c1", 64))
        )),
        "{qwen3}"
    );
    for line in md.lines().filter(|l| l.starts_with('|')) {
        assert_eq!(line.matches('|').count(), 6, "5 columns: {line}");
    }
}

#[test]
fn the_tuning_files_must_come_from_one_run() {
    // A winner that is not the fastest of its bucket.
    let (tuned, all) = tune_csvs(Some((8, "decode", "w4_c1")));
    let root = tune_repo("tune-slow", Some(&tuned), Some(&all));
    let e = generate(&root).unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        e.contains("T 8: decode w2_c1") && e.contains("faster than the winner decode w4_c1"),
        "{e}"
    );
    // A bucket timed and missing from the table.
    let (tuned, all) = tune_csvs(None);
    let cut: String = tuned
        .lines()
        .filter(|l| !l.starts_with("4096,1024,288,8,512,"))
        .map(|l| format!("{l}\n"))
        .collect();
    let root = tune_repo("tune-cut", Some(&cut), Some(&all));
    let e = generate(&root).unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        e.contains("glm_h4096_i1024_e288_k8 at T 512 has no row"),
        "{e}"
    );
    // A median that differs between the files.
    let changed = tuned.replace(
        &format!("{:.3},", decode_us("w2_c1", 1)),
        &format!("{:.3},", decode_us("w2_c1", 1) + 1.0),
    );
    let root = tune_repo("tune-other", Some(&changed), Some(&all));
    let e = generate(&root).unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(e.contains("not one run"), "{e}");
    // One file without the other.
    let root = tune_repo("tune-half", Some(&tuned), None);
    let e = generate(&root).unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(e.contains("must both be committed"), "{e}");
}

#[test]
fn the_tuned_files_comment_names_the_device() {
    let text = "# bench ch04-tune on NVIDIA H200 (--quick: few samples): the fastest …\n\
                hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us\n\
                64,40,16,4,1,decode,w4_c1,1.0,1.0,decode,w4_c1,x\n";
    let e = parse_tuned(text, "t.csv").unwrap_err();
    assert!(e.contains("t.csv:3: `x` in column rule_cold_us"), "{e}");
    let t = parse_tuned(&text.replace(",x\n", ",1.0\n"), "t.csv").unwrap();
    assert_eq!(t.device.as_deref(), Some("NVIDIA H200"));
    assert!(t.quick);
    assert_eq!(t.buckets.len(), 1);
    assert_eq!(tune_title("qwen3_30b_a3b"), "Qwen3-30B-A3B");
    assert_eq!(tune_title("glm_h4096_i1024_e288_k8"), "GLM-like");
    assert_eq!(fmt_small(0.0625), "0.06");
    assert_eq!(fmt_small(32.0), "32");
}

#[test]
fn another_decode_path_counts_as_decode() {
    // `decode_grouped` timed beside the others at GLM's shape, and fastest from 64 tokens:
    // the decode side of the crossover moves up to 64, and the table gets its rows.
    let (tuned, all) = tune_csvs(None);
    let grouped = |t: u64| tiled_us("w4_k64_n1", t) * if t >= 64 { 0.5 } else { 2.0 };
    let mut all = all;
    for t in TUNE_TOKENS {
        all += &format!(
            "glm_h4096_i1024_e288_k8,4096,1024,288,8,{t},decode_grouped,w4_c1,{:.3},{:.3},{:.3},{:.3}\n",
            grouped(t),
            grouped(t),
            grouped(t),
            grouped(t)
        );
    }
    let old = format!(
        "4096,1024,288,8,64,tiled,w4_k64_n1,{:.3},",
        tiled_us("w4_k64_n1", 64)
    );
    let new = format!(
        "4096,1024,288,8,64,decode_grouped,w4_c1,{:.3},",
        grouped(64)
    );
    assert!(tuned.contains(&old));
    let tuned = tuned.replace(&old, &new);
    // …and at 512, where it beats the tile too: all its winners are decode paths.
    let old = format!(
        "4096,1024,288,8,512,tiled,w4_k32_n2,{:.3},",
        tiled_us("w4_k32_n2", 512)
    );
    let tuned = tuned.replace(
        &old,
        &format!(
            "4096,1024,288,8,512,decode_grouped,w4_c1,{:.3},",
            grouped(512)
        ),
    );
    let root = tune_repo("tune-grouped", Some(&tuned), Some(&all));
    let files = generate(&root).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let facts = content(&files, TUNE_FACTS);
    has(facts, "glm_tune_decode_last", "512");
    assert!(!facts.contains("ANCHOR: glm_tune_tiled_first\n"), "{facts}");
    has(facts, "glm_tune_t64_best_decode_grouped", "w4_c1");
    has(facts, "glm_tune_t64_tiled_over_decode_grouped", "2.00");
    has(
        facts,
        "glm_tune_decode_last_tiled_over_decode",
        &format!("{:.2}", tiled_us("w4_k32_n2", 512) / grouped(512)),
    );
    let md = content(&files, TUNE_TABLE);
    let glm = md.split("**GLM-like").nth(1).unwrap();
    assert!(
        glm.contains(&format!(
            "| fastest tiled ÷ fastest decode_grouped | 0.50× | 0.50× | 2.00× | {:.2}× |",
            tiled_us("w4_k32_n2", 512) / grouped(512)
        )),
        "{glm}"
    );
    assert!(!md
        .split("**GLM-like")
        .next()
        .unwrap()
        .contains("decode_grouped"));
}

#[test]
fn decode_facts_compare_the_l1_twins_and_the_fusions() {
    let head = "shape,hidden,intermediate,experts,k,tokens,path,config,cold_us,cold_p10_us,cold_p90_us,warm_us\n";
    let row = |t: u64, path: &str, config: &str, us: f64| {
        format!("qwen3_30b_a3b,2048,768,128,8,{t},{path},{config},{us},{us},{us},{us}\n")
    };
    let mut csv = head.to_string();
    csv += &row(1, "decode", "w4_c1_na_swiglu", 20.0);
    csv += &row(1, "decode", "w4_c1_swiglu", 25.0);
    csv += &row(1, "decode", "w4_c1_na", 30.0);
    // At 8 tokens the fused sum was not timed: no facts for that batch.
    csv += &row(8, "decode", "w4_c1_na_swiglu", 100.0);
    csv += &row(8, "decode", "w4_c1_swiglu", 110.0);
    // Another path's candidate of the same name does not count.
    csv += &row(8, "decode_grouped", "w4_c1_na", 90.0);
    let mut d = crate::figures::spec::Data::default();
    d.add(&TUNE_ALL, &csv).unwrap();
    let mut f = Facts::default();
    crate::figures::spec::facts(&d, TUNE_HERE, DECODE_FACTS, &mut f).unwrap();
    let facts = f.render("test");
    has(&facts, "qwen3_t1_decode_w4_c1_swiglu_cold", "25.0");
    has(&facts, "qwen3_t1_decode_l1_over_na", "1.25");
    has(&facts, "qwen3_t1_decode_sumk_over_swiglu", "1.50");
    assert!(!facts.contains("qwen3_t8_decode"), "{facts}");
}

#[test]
fn steps_checks_and_targets_as_facts() {
    use crate::figures::spec::Data;
    let mut d = Data::default();
    d.add(
        &super::STEPS,
        "chapter,shape,rows,step,kernel,prefix_cold_us,prefix_warm_us,cold_us,warm_us\n\
         ch04,qwen3_h2048_i768_e128_k8,1,1,moe::fused_decode_gemm1,17.2,14.0,17.2,14.0\n\
         ch04,qwen3_h2048_i768_e128_k8,1,2,decode_gemm2,17.0,22.0,-0.2,8.0\n",
    )
    .unwrap();
    d.add(
        &super::CHECK,
        "shape,tokens,impl,against,relative,ok\n\
         glm_h4096_i1024_e288_k8,1,fused,ch02_grouped,2.5e-4,1\n\
         glm_h4096_i1024_e288_k8,8,fused,ch02_grouped,3.1e-4,0\n",
    )
    .unwrap();
    let mut f = Facts::default();
    crate::figures::spec::facts(&d, HERE, STEP_FACTS, &mut f).unwrap();
    crate::figures::spec::facts(&d, HERE, CHECK_FACTS, &mut f).unwrap();
    // The namespace and `fused_` dropped; a negative step written as measured.
    assert_eq!(f.get("qwen3_t1_step1_decode_gemm1_cold"), Some("17.2"));
    assert_eq!(f.get("qwen3_t1_step2_decode_gemm2_cold"), Some("-0.20"));
    // The largest error over the token counts; one failed check makes `checks_ok` no.
    assert_eq!(f.get("glm_check_fused_vs_ch02_grouped"), Some("3.1e-4"));
    assert_eq!(f.get("checks_ok"), Some("no"));
    // The targets, from the constants the targets table judges by.
    let mut d = Data::default();
    d.add(&GPU, &(header() + "\n")).unwrap();
    d.add(&CEILINGS, "copy_gbs,bf16_tflops\n4240.6,681.0\n")
        .unwrap();
    let mut f = Facts::default();
    crate::figures::spec::facts(&d, HERE, GPU_FACTS, &mut f).unwrap();
    assert_eq!(f.get("target_t1_over_floor"), Some("1.3"));
    assert_eq!(f.get("target_t8_t512_over_floor"), Some("1.1"));
    assert_eq!(f.get("target_t4096_share_pct"), Some("65"));
    assert_eq!(f.get("copy_gbs"), Some("4241"));
    // The layout's counts are numbers, or the CSV is not read.
    let bad = layout_csv().replacen(",8,decode,", ",x,decode,", 1);
    assert_ne!(bad, layout_csv());
    let e = check_layout(&bad, "l.csv").unwrap_err();
    assert!(e.starts_with("l.csv: `x` in column"), "{e}");
    check_layout(&layout_csv(), "l.csv").unwrap();
}
