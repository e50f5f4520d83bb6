//! The book's generated files on a small CSV made here: one polyline per impl and panel, the
//! table's ratios, clear errors on a malformed file; and the `plot` binary, which must never
//! write into the source tree unless asked to (it writes into a temporary folder here).

use moe_tools::bench_row::{header, parse_csv};
use moe_tools::figures::{svg, tables};
use std::path::PathBuf;
use std::process::Command;

const SHAPES: [&str; 2] = ["glm_h4096_e288_k8", "qwen3_h2048_e128_k8"];
const ROWS: [u64; 5] = [1, 6, 16, 96, 8192];

/// A cold median that depends on shape, impl and rows in a known way: chain is 2.5× torch on
/// the GLM shape up to 16 rows and 1.5× above, and 0.8× on Qwen3.
fn cold(shape: usize, imp: &str, rows: u64) -> f64 {
    let base = 10.0 + rows as f64 / 100.0 + shape as f64;
    match (imp, shape) {
        ("torch_5line", _) => base,
        ("chain", 0) if rows <= 16 => 2.5 * base,
        ("chain", 0) => 1.5 * base,
        ("chain", _) => 0.8 * base,
        _ => base / 4.0,
    }
}

fn test_csv() -> String {
    let mut s = header() + "\n";
    for (si, shape) in SHAPES.iter().enumerate() {
        for imp in ["chain", "torch_5line", "floor_probe"] {
            for rows in ROWS {
                let c = cold(si, imp, rows);
                let launches = match imp {
                    "chain" => 5,
                    "torch_5line" => 7,
                    _ => 1,
                };
                s += &format!(
                    "ch01,{shape},{imp},{rows},{launches},{c},{},{},{},{},{},{},1000,100,1.0,0.1,200,H200\n",
                    c * 0.9,
                    c * 1.2,
                    c / 2.0,
                    c / 2.0 * 0.95,
                    c / 2.0 * 1.05,
                    cold(si, "floor_probe", rows) * 0.9
                );
            }
        }
    }
    s
}

fn temp_dir(name: &str) -> PathBuf {
    // A fresh folder under the system's temporary directory: tests never write into the tree.
    let d = std::env::temp_dir().join(format!("moe-tools-plot-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn one_polyline_per_impl_and_panel() {
    let rows = parse_csv(&test_csv(), "test.csv").unwrap();
    assert_eq!(rows.len(), 2 * 3 * 5);
    let svg = svg::render_svg(&rows);
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains(r##"fill="#ffffff""##),
        "needs an explicit white background"
    );
    assert_eq!(
        svg.matches("<polyline").count(),
        2 * (3 * 2 + 1),
        "cold + warm per impl, one floor per panel"
    );
    for shape in SHAPES {
        for imp in ["chain", "torch_5line", "floor_probe"] {
            let cold = format!(r#"<polyline class="cold" data-shape="{shape}" data-impl="{imp}""#);
            let warm = format!(r#"<polyline class="warm" data-shape="{shape}" data-impl="{imp}""#);
            assert_eq!(svg.matches(&cold).count(), 1, "{shape} {imp} cold");
            assert_eq!(svg.matches(&warm).count(), 1, "{shape} {imp} warm");
        }
        assert_eq!(
            svg.matches(&format!(r#"class="floor" data-shape="{shape}""#))
                .count(),
            1
        );
    }
    // Five points per polyline, one per measured row count.
    let first = svg.split(r#"class="cold""#).nth(1).unwrap();
    let points = first
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(points.split(' ').count(), 5);
    assert!(svg.contains("GLM: hidden 4096, 288 experts, k = 8, sigmoid + bias"));
    assert!(svg.contains("Qwen3: hidden 2048, 128 experts, k = 8, softmax"));
    assert_eq!(svg.matches(r#"class="whisker""#).count(), 2 * 3 * 5);
}

#[test]
fn table_ratios_come_from_the_numbers() {
    let rows = parse_csv(&test_csv(), "test.csv").unwrap();
    for (si, shape) in SHAPES.iter().enumerate() {
        for n in ROWS {
            let expected = cold(si, "chain", n) / cold(si, "torch_5line", n);
            let got = tables::ratio(&rows, shape, n, "chain", "torch_5line").unwrap();
            assert!(
                (got - expected).abs() < 1e-12,
                "{shape} rows {n}: {got} vs {expected}"
            );
        }
    }
    let md = tables::measurements(&rows);
    // One block per shape: a title, a header, a rule, one line per impl and the floor.
    assert_eq!(md.matches("| chain (5 launches) |").count(), 2, "{md}");
    assert_eq!(md.matches("| floor |").count(), 2, "{md}");
    // GLM at 16 rows: torch 10.16 µs, chain 25.4 µs → 2.50×; at 96: 10.96 and 16.44 → 1.50×.
    assert!(md.contains("| 25.4 / 12.7 (2.50×) |"), "{md}");
    assert!(md.contains("| 16.4 / 8.22 (1.50×) |"), "{md}");
    assert!(
        md.contains("| torch_5line (7 launches) | 10.0 / 5.00 |"),
        "{md}"
    );
    // Every line fits one screen: 6 columns.
    for line in md.lines().filter(|l| l.starts_with('|')) {
        assert_eq!(line.matches('|').count(), 7, "{line}");
    }
}

#[test]
fn a_missing_peer_gives_no_ratio() {
    let csv: String = test_csv()
        .lines()
        .filter(|l| !(l.contains(",torch_5line,16,") && l.contains("glm")))
        .map(|l| format!("{l}\n"))
        .collect();
    let rows = parse_csv(&csv, "test.csv").unwrap();
    assert_eq!(
        tables::ratio(&rows, SHAPES[0], 16, "chain", "torch_5line"),
        None
    );
    assert!(tables::measurements(&rows).contains("| 25.4 / 12.7 |"));
}

#[test]
fn steps_show_noise_below_zero_as_about_zero() {
    let text = format!(
        "{}\nch01,glm_h4096_e288_k8,1,1,router_gemm_f32,10.0,4.0,10.0,4.0\nch01,glm_h4096_e288_k8,1,2,router_divide,9.5,4.2,-0.5,0.2\n",
        moe_tools::bench_row::STEP_COLUMNS
    );
    let steps = tables::parse_steps(&text, "s.csv").unwrap();
    let md = tables::steps(&steps);
    assert!(md.contains("| 2. `router_divide` | ≈0 / 0.20 |"), "{md}");
    assert!(md.contains("| the whole chain | 9.50 / 4.20 |"), "{md}");
}

#[test]
fn malformed_csv_names_line_and_column() {
    let good = test_csv();
    let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
    lines[3] = lines[3].replacen(",5,", ",5,abc_", 1); // cold_median_us of line 4
    let e = parse_csv(&lines.join("\n"), "x.csv").unwrap_err();
    assert!(
        e.starts_with("x.csv:4, column 6 (`cold_median_us`)") && e.contains("not a number"),
        "{e}"
    );

    let short: String =
        good.lines().take(2).collect::<Vec<_>>().join("\n") + "\nch01,glm,chain,1\n";
    let e = parse_csv(&short, "x.csv").unwrap_err();
    assert_eq!(e, "x.csv:3: expected 18 fields, found 4");

    let e = parse_csv("chapter,shape\nch01,glm\n", "x.csv").unwrap_err();
    assert!(e.starts_with("x.csv:1: header has no column `impl`"), "{e}");

    let zero = good.replacen(",chain,1,", ",chain,0,", 1);
    let e = parse_csv(&zero, "x.csv").unwrap_err();
    assert!(e.contains("`rows`") && e.contains("at least 1"), "{e}");

    let e = parse_csv("", "x.csv").unwrap_err();
    assert!(e.contains("empty file"), "{e}");
}

#[test]
fn the_binary_writes_only_where_it_is_told() {
    // Regenerates chapter 1's files from the repository's committed inputs into a temporary
    // folder: the source tree must stay untouched (compare with --check afterwards).
    let dir = temp_dir("bin");
    let run = Command::new(env!("CARGO_BIN_EXE_plot"))
        .arg("ch01")
        .arg("--out-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let svg = std::fs::read_to_string(dir.join("book/src/figures/ch01-router.svg")).unwrap();
    assert!(svg.contains("<polyline class=\"cold\""));
    let facts = std::fs::read_to_string(dir.join("book/src/figures/ch01-facts.md")).unwrap();
    assert!(facts.contains("ANCHOR: glm_1_chain_cold"), "{facts}");

    let usage = Command::new(env!("CARGO_BIN_EXE_plot"))
        .arg("ch99")
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}
