//! Part II's decode-step share: what each router design of chapters 1, 5, 6 + 3, 8 and 9 would
//! take of chapter 7's full-size decode step (Qwen3-30B-A3B, every one of its 48 layers MoE),
//! from the committed CSVs of one GPU and nothing else (an error if they name two):
//!
//! - the step and its parts at batch 1, 8 and 64 (`bench/results/h100/ch07_decode.csv`), among
//!   them `router`: chapter 5's pair as each of the 48 MoE layers runs it, timed alone inside the
//!   step's buffers, the 48 in one graph;
//! - each design timed alone at the Qwen3-like shape (`qwen3_…`, hidden 2048, 128 experts,
//!   k = 8) at the same row counts, or the nearest measured: chapter 1's chain and chapter 5's
//!   pair from `ch05.csv`, the three designs that also give the experts' layout from `ch09.csv`.
//!
//! Each design's cold (warm) median × 48 layers is divided by the step's cold (warm) median, and
//! by the step less its attention (chapter 7's page reads the step that way too, since its plain
//! attention kernel is most of it). The step's own `router` part is the reference line. Chapter
//! 11's fronts are at Kimi K3's shape, of which no decode step is measured here: they have no
//! line.

use super::part2::{d, Design};
use crate::bench_row::{parse_csv, BenchRow};
use crate::csv::Table;
use crate::figures::ch07::{parse_decode, Part};
use crate::figures::facts::{thousands, Facts};
use crate::figures::tables::fmt_us;
use crate::figures::{read, short, Generated};
use std::fmt::Write as _;
use std::path::Path;

const DECODE: &str = "bench/results/h100/ch07_decode.csv";
const CH05: &str = "bench/results/h100/ch05.csv";
const CH09: &str = "bench/results/h100/ch09.csv";
const TABLE: &str = "book/src/figures/ch11-decode-share.md";

/// Qwen3-30B-A3B's MoE layers (`num_hidden_layers`, every one MoE: chapter 7's
/// `QWEN3_30B_A3B`). Checked against the step's `router` part, whose launches are a whole number
/// per layer.
pub const LAYERS: u64 = 48;

/// The designs, from the hidden states: the first two give ids and weights only, the last three
/// the experts' layout too (as in Part II's figure, `part2.rs`).
#[rustfmt::skip]
pub const QWEN3: [Design; 5] = [
    d("chain", "chapter 1: the chain of plain kernels (fp32; ch05.csv chain)", "chapter 1's chain", CH05, "chain"),
    d("pair", "chapter 5: the pair (tiny GEMM + fused router)", "chapter 5's pair", CH05, "pair"),
    d("pair_align", "chapters 6 + 3: chapter 6's router, then the align (ch09.csv pair_align)", "chapter 6's router with the align", CH09, "pair_align"),
    d("gemm_stage", "chapter 8: the logits GEMM, then the routing stage (ch09.csv gemm_stage)", "chapter 8's stage after the logits GEMM", CH09, "gemm_stage"),
    d("one_launch", "chapter 9: one launch", "chapter 9's one launch", CH09, "one_launch"),
];

/// The measured row count nearest to `want` (by ratio; the smaller on a tie) among `counts`.
fn nearest(counts: &[u64], want: u64) -> Option<u64> {
    let dist = |n: u64| (n as f64 / want as f64).ln().abs();
    counts
        .iter()
        .copied()
        .filter(|&n| n > 0)
        .min_by(|&a, &b| dist(a).total_cmp(&dist(b)).then(a.cmp(&b)))
}

/// One line of the table: a design (or the step's router) at one batch.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    key: String,
    label: String,
    /// Its name in a sentence.
    name: String,
    batch: u64,
    /// The row count its time was measured at (the batch, or the nearest measured).
    rows: u64,
    launches: u64,
    /// µs per layer.
    cold: f64,
    warm: f64,
}

/// The step at one batch: cold and warm, with and without its attention.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Step {
    cold: f64,
    warm: f64,
    rest_cold: f64,
    rest_warm: f64,
}

fn part<'a>(rows: &'a [Part], b: u64, name: &str) -> Result<&'a Part, String> {
    rows.iter()
        .find(|r| r.batch == b && r.part == name)
        .ok_or_else(|| format!("{DECODE}: no `{name}` row at batch {b}"))
}

fn step(rows: &[Part], b: u64) -> Result<Step, String> {
    let (s, a) = (part(rows, b, "step")?, part(rows, b, "attention")?);
    Ok(Step {
        cold: s.cold_us,
        warm: s.warm_us,
        rest_cold: s.cold_us - a.cold_us,
        rest_warm: s.warm_us - a.warm_us,
    })
}

/// The lines at batch `b`: the step's router part per layer, then each design's row (from
/// `sources`, one parsed CSV per design) at `b` rows or the nearest measured.
fn lines(
    decode: &[Part],
    b: u64,
    designs: &[Design],
    sources: &[Vec<BenchRow>],
) -> Result<Vec<Line>, String> {
    let router = part(decode, b, "router")?;
    let mut v = vec![Line {
        key: "step_router".into(),
        label: "chapter 7's step: its router part (chapter 5's pair in each layer)".into(),
        name: "the step's router part".into(),
        batch: b,
        rows: b,
        launches: router.launches / LAYERS,
        cold: router.cold_us / LAYERS as f64,
        warm: router.warm_us / LAYERS as f64,
    }];
    for (de, rows) in designs.iter().zip(sources) {
        let mine: Vec<&BenchRow> = rows
            .iter()
            .filter(|r| r.imp == de.imp && short(&r.shape) == "qwen3")
            .collect();
        let counts: Vec<u64> = mine.iter().map(|r| r.rows).collect();
        let n = nearest(&counts, b)
            .ok_or_else(|| format!("{}: no {} rows at a qwen3 shape", de.csv, de.imp))?;
        let r = mine.iter().find(|r| r.rows == n).expect("a measured count");
        v.push(Line {
            key: de.key.into(),
            label: de.label.into(),
            name: de.tag.into(),
            batch: b,
            rows: n,
            launches: r.launches as u64,
            cold: r.cold_median_us,
            warm: r.warm_median_us,
        });
    }
    Ok(v)
}

fn pct(part: f64, whole: f64) -> String {
    format!("{:.1}", 100.0 * part / whole)
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1e3)
}

/// The table: one block per batch, a line per design; and the facts.
fn table_and_facts(batches: &[(u64, Step, Vec<Line>)], f: &mut Facts) -> Result<String, String> {
    let src = "the decode share of tools/src/figures/ch11/decode.rs";
    let l = LAYERS as f64;
    f.add("dec_layers", LAYERS.to_string(), src);
    let mut s = format!(
        "A design's time per layer × {LAYERS} layers, against chapter 7's step (cold / warm \
         medians; \"without attention\": the step less its attention part)\n\n\
         | batch | design | launches | per layer, µs | × {LAYERS}, ms | share of the step | \
         share without attention |\n|---:|---|---:|---:|---:|---:|---:|\n"
    );
    for (b, st, ls) in batches {
        f.add(format!("dec_b{b}_step_ms"), ms(st.cold), src);
        f.add(format!("dec_b{b}_rest_ms"), ms(st.rest_cold), src);
        let _ = writeln!(
            s,
            "| {b} | **chapter 7's step**: {} / {} ms; without attention {} / {} ms | | | | | |",
            ms(st.cold),
            ms(st.warm),
            ms(st.rest_cold),
            ms(st.rest_warm)
        );
        for ln in ls {
            let k = format!("dec_{}_{b}", ln.key);
            let at = if ln.rows == *b {
                String::new()
            } else {
                format!(" (timed at {} rows)", thousands(ln.rows))
            };
            let shares = [
                pct(l * ln.cold, st.cold),
                pct(l * ln.warm, st.warm),
                pct(l * ln.cold, st.rest_cold),
                pct(l * ln.warm, st.rest_warm),
            ];
            let _ = writeln!(
                s,
                "| {b} | {}{at} | {} | {} / {} | {} / {} | {}% / {}% | {}% / {}% |",
                ln.label,
                ln.launches,
                fmt_us(ln.cold),
                fmt_us(ln.warm),
                ms(l * ln.cold),
                ms(l * ln.warm),
                shares[0],
                shares[1],
                shares[2],
                shares[3],
            );
            f.add(format!("{k}_layer_cold_us"), fmt_us(ln.cold), src);
            f.add(format!("{k}_layer_warm_us"), fmt_us(ln.warm), src);
            f.add(format!("{k}_cold_ms"), ms(l * ln.cold), src);
            for (name, v) in ["cold_pct", "warm_pct", "rest_cold_pct", "rest_warm_pct"]
                .iter()
                .zip(&shares)
            {
                f.add(format!("{k}_{name}"), v.as_str(), src);
            }
            if ln.rows != *b {
                f.add(format!("{k}_rows"), thousands(ln.rows), src);
            }
        }
        // How far a design's time alone is from what the step's own router costs: chapter 5's
        // pair timed alone, cold and warm, × the layers, over the step's router part (cold).
        let reference = ls
            .iter()
            .find(|x| x.key == "step_router")
            .expect("the first line");
        if let Some(pair) = ls.iter().find(|x| x.key == "pair") {
            f.add(
                format!("dec_pair_{b}_cold_over_step"),
                format!("{:.1}", pair.cold / reference.cold),
                src,
            );
            f.add(
                format!("dec_pair_{b}_warm_over_step"),
                format!("{:.2}", pair.warm / reference.cold),
                src,
            );
        }
        // The cheapest and the dearest design by its warm time (the closer to what a design
        // costs inside a step), the reference aside: names and shares.
        let designs = || ls.iter().filter(|x| x.key != "step_router");
        let least = designs()
            .min_by(|a, c| a.warm.total_cmp(&c.warm))
            .ok_or("no design")?;
        let most = designs()
            .max_by(|a, c| a.warm.total_cmp(&c.warm))
            .ok_or("no design")?;
        for (which, x) in [("least", least), ("most", most)] {
            f.add(format!("dec_b{b}_{which}"), x.name.as_str(), src);
            f.add(
                format!("dec_b{b}_{which}_pct"),
                pct(l * x.warm, st.warm),
                src,
            );
            f.add(
                format!("dec_b{b}_{which}_rest_pct"),
                pct(l * x.warm, st.rest_warm),
                src,
            );
        }
    }
    Ok(s)
}

/// The table, and its facts into `f`.
pub fn generate(root: &Path, f: &mut Facts) -> Result<Generated, String> {
    let decode_text = read(root, DECODE)?;
    let decode = parse_decode(&decode_text, DECODE)?;
    let mut sources = Vec::new();
    for de in &QWEN3 {
        sources.push(parse_csv(&read(root, de.csv)?, de.csv)?);
    }
    // One machine for the step and the designs set beside it.
    let step_devices = Table::parse(&decode_text, DECODE)?
        .records()
        .map(|r| r("device"))
        .collect::<Vec<_>>();
    let devices = step_devices
        .iter()
        .map(String::as_str)
        .chain(sources.iter().flatten().map(|r| r.device.as_str()));
    let gpu = crate::figures::one_gpu(
        devices,
        &format!("the decode-step share ({DECODE}, {CH05}, {CH09})"),
    )?;
    f.add("decode_gpu", gpu, DECODE);
    let mut bs: Vec<u64> = decode.iter().map(|r| r.batch).collect();
    bs.sort_unstable();
    bs.dedup();
    let mut batches = Vec::new();
    for b in bs {
        let ls = lines(&decode, b, &QWEN3, &sources)?;
        let router = part(&decode, b, "router")?;
        #[allow(clippy::manual_is_multiple_of)] // the workspace's MSRV is 1.85
        if router.launches == 0 || router.launches % LAYERS != 0 {
            return Err(format!(
                "{DECODE}: the router part at batch {b} has {} launches, not a whole number per \
                 layer of {LAYERS}",
                router.launches
            ));
        }
        batches.push((b, step(&decode, b)?, ls));
    }
    let s = table_and_facts(&batches, f)?;
    Ok(Generated {
        path: TABLE.into(),
        content: s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECODE_CSV: &str =
        "batch,part,launches,cold_us,warm_us,cold_p10_us,cold_p90_us,bytes,floor_us,device\n\
        1,step,500,4800,4800,1,1,1,1,X\n\
        1,attention,96,2400,2400,1,1,1,1,X\n\
        1,router,96,144,96,1,1,1,1,X\n";

    fn row(imp: &str, rows: u64, launches: u32, cold: f64, warm: f64) -> BenchRow {
        BenchRow {
            launches,
            warm_median_us: warm,
            ..BenchRow::flat("ch05", "qwen3_h2048_e128_k8", imp, rows, cold)
        }
    }

    #[test]
    fn nearest_picks_the_closest_ratio() {
        assert_eq!(nearest(&[1, 6, 16, 96], 8), Some(6));
        assert_eq!(nearest(&[1, 6, 16, 96], 64), Some(96));
        assert_eq!(nearest(&[1, 4, 16], 8), Some(4)); // a tie: the smaller
        assert_eq!(nearest(&[0], 8), None);
    }

    #[test]
    fn shares_are_the_design_times_the_layers_over_the_step() {
        let decode = parse_decode(DECODE_CSV, "d.csv").unwrap();
        let designs = [
            d("pair", "the pair", "the pair", CH05, "pair"),
            d(
                "one_launch",
                "one launch",
                "the one launch",
                CH09,
                "one_launch",
            ),
        ];
        let sources = vec![
            vec![
                row("pair", 1, 2, 10.0, 2.0),
                row("pair", 8, 2, 12.0, 3.0),
                BenchRow::flat("ch05", "glm_h4096_e288_k8", "pair", 1, 99.0),
            ],
            vec![row("one_launch", 6, 1, 20.0, 10.0)],
        ];
        let ls = lines(&decode, 1, &designs, &sources).unwrap();
        assert_eq!(ls.len(), 3);
        // The step's router part: 144 / 48 = 3 µs a layer, 96 / 48 = 2 launches.
        assert_eq!((ls[0].cold, ls[0].warm, ls[0].launches), (3.0, 2.0, 2));
        // The Qwen3 row at 1 row, not the GLM one.
        assert_eq!((ls[1].rows, ls[1].cold), (1, 10.0));
        // Only 6 rows measured: the nearest.
        assert_eq!(ls[2].rows, 6);
        let st = step(&decode, 1).unwrap();
        assert_eq!((st.rest_cold, st.rest_warm), (2400.0, 2400.0));
        let mut f = Facts::default();
        let t = table_and_facts(&[(1, st, ls)], &mut f).unwrap();
        // 10 × 48 = 480 µs of 4,800 (10%), of 2,400 without attention (20%); warm 2 × 48 = 96.
        assert!(
            t.contains(
                "| 1 | the pair | 2 | 10.0 / 2.00 | 0.48 / 0.10 | 10.0% / 2.0% | 20.0% / 4.0% |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| 1 | one launch (timed at 6 rows) | 1 |"),
            "{t}"
        );
        assert!(
            t.contains(
                "| 1 | **chapter 7's step**: 4.80 / 4.80 ms; without attention 2.40 / 2.40 ms |"
            ),
            "{t}"
        );
        assert_eq!(f.get("dec_step_router_1_cold_pct"), Some("3.0"));
        assert_eq!(f.get("dec_pair_1_cold_over_step"), Some("3.3"));
        assert_eq!(f.get("dec_pair_1_warm_over_step"), Some("0.67"));
        assert_eq!(f.get("dec_one_launch_1_rows"), Some("6"));
        assert_eq!(f.get("dec_b1_least"), Some("the pair"));
        assert_eq!(f.get("dec_b1_least_pct"), Some("2.0"));
        assert_eq!(f.get("dec_b1_most_rest_pct"), Some("20.0"));
        assert_eq!(f.get("dec_b1_most"), Some("the one launch"));
        // A design never measured at the shape is an error.
        let e = lines(&decode, 1, &designs[..1], &[vec![]]).unwrap_err();
        assert!(e.contains("no pair rows at a qwen3 shape"), "{e}");
    }
}
