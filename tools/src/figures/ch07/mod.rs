//! Chapter 7's generated files: the page's example output and tree ([`super::example_and_tree`]),
//! and from the H200's runs of `tools/bench/run ch07`:
//!
//! - the full-size decode step's breakdown (`bench/results/h200/ch07_decode.csv`): a table of
//!   every part at batch 1, 8 and 64 (cold and warm medians, share of the step, the floor of its
//!   bytes), a figure of the shares, and the facts the page quotes;
//! - what bf16 changes on the fixtures (`bench/results/h200/ch07_bf16.csv`): a table of the three
//!   paths (tokens that follow transformers', logits' distance) and its facts.

use super::facts::Facts;
use super::svg;
use super::{esc, read, Generated};
use crate::csv::Table;
use std::fmt::Write as _;
use std::path::Path;

const DECODE: &str = "bench/results/h200/ch07_decode.csv";
const BF16: &str = "bench/results/h200/ch07_bf16.csv";
const FACTS: &str = "book/src/figures/ch07-facts.md";
const TABLE: &str = "book/src/figures/ch07-decode.md";
const FIGURE: &str = "book/src/figures/ch07-decode.svg";
const BF16_TABLE: &str = "book/src/figures/ch07-bf16.md";

/// The parts of a step, as the bench names them, with the table's words for them.
const PARTS: [(&str, &str); 8] = [
    ("embed", "embedding"),
    ("norms", "RMSNorms (with the residual adds)"),
    ("qkv_proj", "q, k, v projection"),
    (
        "attention",
        "attention over the KV cache (with q/k norm, rotary, cache append)",
    ),
    ("o_proj", "output projection"),
    ("moe", "MoE layers (chapter 6's layer)"),
    ("dense_mlp", "dense MLPs"),
    ("lm_head", "LM head (its GEMM) and argmax"),
];

/// One part's cold and warm medians at one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub batch: u64,
    pub part: String,
    pub launches: u64,
    pub cold_us: f64,
    pub warm_us: f64,
    pub floor_us: f64,
    /// The bytes its floor is computed from.
    pub bytes: f64,
}

/// The rows of `ch07_decode.csv`.
pub fn parse_decode(text: &str, name: &str) -> Result<Vec<Part>, String> {
    let t = Table::parse(text, name)?;
    let mut v = Vec::new();
    for r in t.records() {
        let num = |c: &str| -> Result<f64, String> {
            r(c).parse()
                .map_err(|_| format!("{name}: `{}` in column `{c}` is not a number", r(c)))
        };
        v.push(Part {
            batch: num("batch")? as u64,
            part: r("part"),
            launches: num("launches")? as u64,
            cold_us: num("cold_us")?,
            warm_us: num("warm_us")?,
            floor_us: num("floor_us")?,
            bytes: num("bytes")?,
        });
    }
    if v.is_empty() {
        return Err(format!("{name}: no rows"));
    }
    Ok(v)
}

fn batches(rows: &[Part]) -> Vec<u64> {
    let mut b: Vec<u64> = rows.iter().map(|r| r.batch).collect();
    b.sort_unstable();
    b.dedup();
    b
}

fn get<'a>(rows: &'a [Part], b: u64, part: &str) -> Option<&'a Part> {
    rows.iter().find(|r| r.batch == b && r.part == part)
}

fn need<'a>(rows: &'a [Part], b: u64, part: &str) -> Result<&'a Part, String> {
    get(rows, b, part).ok_or_else(|| format!("{DECODE}: no `{part}` row at batch {b}"))
}

/// The step minus the sum of its parts (cold, warm): what running them together adds (or,
/// negative, saves: one part's tail overlapping the next one's start).
fn other(rows: &[Part], b: u64) -> Result<(f64, f64), String> {
    let step = need(rows, b, "step")?;
    let (mut c, mut w) = (step.cold_us, step.warm_us);
    for (p, _) in PARTS {
        if let Some(r) = get(rows, b, p) {
            c -= r.cold_us;
            w -= r.warm_us;
        }
    }
    Ok((c, w))
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1e3)
}

fn pct(part: f64, whole: f64) -> String {
    format!("{:.0}", 100.0 * part / whole)
}

/// The breakdown table: one line per part, one column per batch: `cold / warm ms (share of the
/// cold step), floor` (the floor: the part's bytes at the copy bandwidth); the router inside the
/// MoE layers and one MoE layer alone below.
pub fn decode_table(rows: &[Part]) -> Result<String, String> {
    let bs = batches(rows);
    let mut s = String::from("| part | launches |");
    for b in &bs {
        let _ = write!(s, " batch {b}: cold / warm ms (share), floor |");
    }
    s += "\n|---|---|";
    s += &"---|".repeat(bs.len());
    s += "\n";
    let line = |s: &mut String, label: &str, part: &str| -> Result<(), String> {
        let Some(first) = get(rows, bs[0], part) else {
            return Ok(()); // a part this model has not (the dense MLPs)
        };
        let _ = write!(s, "| {label} | {} |", first.launches);
        for &b in &bs {
            let (r, step) = (need(rows, b, part)?, need(rows, b, "step")?);
            let _ = write!(
                s,
                " {} / {} ({}%), {} |",
                ms(r.cold_us),
                ms(r.warm_us),
                pct(r.cold_us, step.cold_us),
                ms(r.floor_us)
            );
        }
        s.push('\n');
        Ok(())
    };
    for (p, label) in PARTS {
        line(&mut s, label, p)?;
    }
    let _ = write!(s, "| other: the step minus its parts | |");
    for &b in &bs {
        let (c, w) = other(rows, b)?;
        let step = need(rows, b, "step")?;
        let _ = write!(s, " {} / {} ({}%) |", ms(c), ms(w), pct(c, step.cold_us));
    }
    s.push('\n');
    line(&mut s, "**the whole step** (one CUDA graph)", "step")?;
    line(&mut s, "of the MoE layers: chapter 5's router", "router")?;
    line(&mut s, "one MoE layer alone", "moe_layer")?;
    Ok(s)
}

/// The figure's segments: label, colour, and the parts each sums (the MoE layers split into the
/// router and the rest).
const SEGMENTS: [(&str, &str); 7] = [
    ("MoE layers: the router", "#E69F00"),
    ("MoE layers: the experts", "#D55E00"),
    ("attention over the KV cache", "#0072B2"),
    ("q, k, v and o projections", "#56B4E9"),
    ("LM head and argmax", "#009E73"),
    ("norms and residual adds", "#CC79A7"),
    ("embedding and the rest", "#999999"),
];

/// Each segment's cold µs at batch `b`, in [`SEGMENTS`]' order (never below zero).
fn segments(rows: &[Part], b: u64) -> Result<[f64; 7], String> {
    let c = |p: &str| get(rows, b, p).map_or(0.0, |r| r.cold_us);
    let router = c("router").min(c("moe"));
    let (other, _) = other(rows, b)?;
    Ok([
        router,
        c("moe") - router + c("dense_mlp"),
        c("attention"),
        c("qkv_proj") + c("o_proj"),
        c("lm_head"),
        c("norms"),
        (c("embed") + other).max(0.0),
    ])
}

/// The figure: one bar per batch, the cold step split into its parts' shares.
pub fn decode_svg(rows: &[Part]) -> Result<String, String> {
    let bs = batches(rows);
    let (left, bar_w, bar_h, gap, top) = (150.0, 620.0, 34.0, 22.0, 108.0);
    let width = left + bar_w + 40.0;
    let legend_top = top + bs.len() as f64 * (bar_h + gap) + 30.0;
    let height = legend_top + 4.0 * 22.0 + 10.0;
    let mut s = String::new();
    svg::open(
        &mut s,
        width,
        height,
        "Where a decode step's time goes: Qwen3-30B-A3B's shapes on the H200",
    );
    for (i, l) in [
        "Each bar: one step, cold (L2 flushed), split by its parts, each timed alone as a CUDA graph.",
        "48 MoE layers through chapter 6's layer; the rest chapter 7's plain kernels and chapter 5's tiny GEMM.",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            s,
            r##"<text x="16" y="{}" fill="#57606a">{}</text>"##,
            50 + 18 * i,
            esc(l)
        );
    }
    for (i, &b) in bs.iter().enumerate() {
        let y = top + i as f64 * (bar_h + gap);
        let step = need(rows, b, "step")?.cold_us;
        let seg = segments(rows, b)?;
        let total: f64 = seg.iter().sum();
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.1}" font-weight="600">batch {b}</text>"#,
            y + 15.0
        );
        let _ = writeln!(
            s,
            r##"<text x="16" y="{:.1}" fill="#57606a">{} ms</text>"##,
            y + 31.0,
            ms(step)
        );
        let mut x = left;
        for ((label, color), v) in SEGMENTS.iter().zip(seg) {
            let w = bar_w * v / total;
            let _ = writeln!(
                s,
                r#"<rect class="part" data-batch="{b}" data-part="{}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{bar_h}" fill="{color}"><title>{}: {:.0}% of the step</title></rect>"#,
                esc(label),
                esc(label),
                100.0 * v / total
            );
            if w > 34.0 {
                let _ = writeln!(
                    s,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#ffffff" font-weight="600">{:.0}%</text>"##,
                    x + w / 2.0,
                    y + bar_h / 2.0 + 4.5,
                    100.0 * v / total
                );
            }
            x += w;
        }
    }
    for (i, (label, color)) in SEGMENTS.iter().enumerate() {
        let (col, row) = (i % 2, i / 2);
        let lx = 16.0 + 380.0 * col as f64;
        let ly = legend_top + 22.0 * row as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{:.1}" width="14" height="14" fill="{color}"/>"#,
            ly - 11.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{ly:.1}">{}</text>"#,
            lx + 22.0,
            esc(label)
        );
    }
    s += "</svg>\n";
    Ok(s)
}

/// The decode step's facts, per batch `b`: `b{b}_step_cold_ms`, `b{b}_step_warm_ms`,
/// `b{b}_floor_ms`, `b{b}_over_floor` (cold step / floor), the shares of the cold step
/// `b{b}_{moe,router,attention,proj,lm_head,norms,other,not_moe}_pct`, `b{b}_router_of_moe_pct`,
/// `b{b}_moe_layer_us` (the MoE part / the layers) and `b{b}_one_layer_cold_us`.
fn decode_facts(rows: &[Part], f: &mut Facts, layers: f64) -> Result<(), String> {
    for b in batches(rows) {
        let step = need(rows, b, "step")?;
        let c = |p: &str| get(rows, b, p).map_or(0.0, |r| r.cold_us);
        f.add(format!("b{b}_step_cold_ms"), ms(step.cold_us), DECODE);
        f.add(format!("b{b}_step_warm_ms"), ms(step.warm_us), DECODE);
        f.add(format!("b{b}_floor_ms"), ms(step.floor_us), DECODE);
        f.add(
            format!("b{b}_over_floor"),
            format!("{:.1}", step.cold_us / step.floor_us),
            DECODE,
        );
        for (name, v) in [
            ("moe", c("moe")),
            ("router", c("router")),
            ("attention", c("attention")),
            ("proj", c("qkv_proj") + c("o_proj")),
            ("lm_head", c("lm_head")),
            ("norms", c("norms")),
        ] {
            f.add(format!("b{b}_{name}_pct"), pct(v, step.cold_us), DECODE);
        }
        // The step with our plain attention kernels left out: what the rest weighs.
        let rest = step.cold_us - c("attention");
        f.add(format!("b{b}_rest_ms"), ms(rest), DECODE);
        f.add(format!("b{b}_moe_of_rest_pct"), pct(c("moe"), rest), DECODE);
        f.add(
            format!("b{b}_router_of_rest_pct"),
            pct(c("router"), rest),
            DECODE,
        );
        f.add(
            format!("b{b}_attention_floor_us"),
            format!("{:.0}", need(rows, b, "attention")?.floor_us),
            DECODE,
        );
        f.add(
            format!("b{b}_attention_over_floor"),
            format!(
                "{:.0}",
                c("attention") / need(rows, b, "attention")?.floor_us
            ),
            DECODE,
        );
        f.add(
            format!("b{b}_moe_over_floor"),
            format!("{:.2}", c("moe") / need(rows, b, "moe")?.floor_us),
            DECODE,
        );
        f.add(
            format!("b{b}_norm_launch_us"),
            format!(
                "{:.1}",
                c("norms") / need(rows, b, "norms")?.launches as f64
            ),
            DECODE,
        );
        // The distinct experts a layer's routing touched, on average: the MoE part's bytes are
        // per layer the touched experts' three matrices and the gate (Qwen3-30B-A3B's sizes).
        let per_layer = need(rows, b, "moe")?.bytes / layers;
        let (h, i, e) = (2048.0, 768.0, 128.0);
        f.add(
            format!("b{b}_experts_touched"),
            format!("{:.0}", (per_layer - 2.0 * e * h) / (2.0 * 3.0 * i * h)),
            DECODE,
        );
        let (oc, _) = other(rows, b)?;
        f.add(format!("b{b}_other_pct"), pct(oc, step.cold_us), DECODE);
        f.add(
            format!("b{b}_not_moe_pct"),
            pct(step.cold_us - c("moe"), step.cold_us),
            DECODE,
        );
        f.add(
            format!("b{b}_router_of_moe_pct"),
            pct(c("router"), c("moe")),
            DECODE,
        );
        f.add(
            format!("b{b}_moe_layer_us"),
            format!("{:.0}", c("moe") / layers),
            DECODE,
        );
        f.add(
            format!("b{b}_one_layer_cold_us"),
            format!("{:.0}", c("moe_layer")),
            DECODE,
        );
    }
    Ok(())
}

/// The bf16 table: per fixture and path, the tokens that follow transformers' for each prompt
/// (of 32), and the logits' distance from transformers' along the first prompt (fed
/// transformers' tokens): the median step's and the worst step's largest difference.
pub fn bf16_table(text: &str, f: &mut Facts) -> Result<String, String> {
    let t = Table::parse(text, BF16)?;
    let mut s = String::from(
        "| fixture | path | tokens as transformers' (prompts 1, 2, 3; of 32) | logits from transformers': median step | worst step |\n|---|---|---|---|---|\n",
    );
    let label = |p: &str| match p {
        "cpu_f32_moe" => "CPU decoder, MoE layers in f32 (chapter 2's grouped layer)",
        "cpu_bf16_moe" => "CPU decoder, MoE layers in bf16 (chapter 6's layer)",
        "device_bf16" => "the device decoder, bf16 weights throughout",
        _ => "?",
    };
    let mut seen: Vec<(String, String)> = Vec::new();
    let recs: Vec<_> = t.records().collect();
    for r in &recs {
        let key = (r("fixture"), r("path"));
        if seen.contains(&key) {
            continue;
        }
        seen.push(key.clone());
        let same: Vec<String> = recs
            .iter()
            .filter(|x| x("fixture") == key.0 && x("path") == key.1)
            .map(|x| x("same_as_transformers"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            key.0,
            label(&key.1),
            same.join(", "),
            r("median_step_err"),
            r("worst_step_err")
        );
        let fx = key.0.split('_').next().unwrap_or("");
        let p = match key.1.as_str() {
            "cpu_f32_moe" => "f32",
            "cpu_bf16_moe" => "bf16_moe",
            _ => "device",
        };
        let all: u64 = same.iter().filter_map(|v| v.parse::<u64>().ok()).sum();
        f.add(format!("{fx}_{p}_same_tokens"), all.to_string(), BF16);
        f.add(format!("{fx}_{p}_median_err"), r("median_step_err"), BF16);
        f.add(format!("{fx}_{p}_worst_err"), r("worst_step_err"), BF16);
    }
    if seen.is_empty() {
        return Err(format!("{BF16}: no rows"));
    }
    Ok(s)
}

/// Every generated file of chapter 7's page.
pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let mut f = Facts::default();
    let rows = parse_decode(&read(root, DECODE)?, DECODE)?;
    // Qwen3-30B-A3B's 48 layers, every one MoE.
    decode_facts(&rows, &mut f, 48.0)?;
    let bf16 = bf16_table(&read(root, BF16)?, &mut f)?;
    let mut v = vec![
        Generated {
            path: FACTS.into(),
            content: f.render("Chapter 7's numbers"),
        },
        Generated {
            path: TABLE.into(),
            content: decode_table(&rows)?,
        },
        Generated {
            path: FIGURE.into(),
            content: decode_svg(&rows)?,
        },
        Generated {
            path: BF16_TABLE.into(),
            content: bf16,
        },
    ];
    v.extend(super::example_and_tree(root, 7)?);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str =
        "batch,part,launches,cold_us,warm_us,cold_p10_us,cold_p90_us,bytes,floor_us,device\n\
        1,step,500,5000,4800,1,1,1,2000,X\n\
        1,embed,1,10,8,1,1,1,1,X\n\
        1,norms,97,300,250,1,1,1,1,X\n\
        1,qkv_proj,48,400,380,1,1,1,1,X\n\
        1,attention,96,500,450,1,1,1,1,X\n\
        1,o_proj,48,300,280,1,1,1,1,X\n\
        1,moe,144,3000,2900,1,1,1,1,X\n\
        1,lm_head,2,300,290,1,1,1,1,X\n\
        1,router,96,200,150,1,1,1,1,X\n\
        1,moe_layer,3,70,40,1,1,1,1,X\n";

    #[test]
    fn other_is_the_step_minus_its_parts() {
        let rows = parse_decode(CSV, "t").unwrap();
        let (c, w) = other(&rows, 1).unwrap();
        assert_eq!((c, w), (190.0, 242.0));
        let seg = segments(&rows, 1).unwrap();
        assert_eq!(seg.iter().sum::<f64>(), 5000.0);
        assert_eq!(seg[0], 200.0);
        assert_eq!(seg[1], 2800.0);
    }

    #[test]
    fn the_table_has_every_part_and_the_step() {
        let rows = parse_decode(CSV, "t").unwrap();
        let t = decode_table(&rows).unwrap();
        assert!(
            t.contains("| MoE layers (chapter 6's layer) | 144 | 3.00 / 2.90 (60%), 0.00 |"),
            "{t}"
        );
        assert!(
            t.contains("| other: the step minus its parts | | 0.19 / 0.24 (4%) |"),
            "{t}"
        );
        assert!(!t.contains("dense MLPs"), "{t}");
        assert!(t.contains("| 5.00 / 4.80 (100%), 2.00 |"), "{t}");
        let mut f = Facts::default();
        decode_facts(&rows, &mut f, 48.0).unwrap();
        assert_eq!(f.get("b1_moe_pct"), Some("60"));
        assert_eq!(f.get("b1_router_pct"), Some("4"));
        assert_eq!(f.get("b1_over_floor"), Some("2.5"));
        assert_eq!(f.get("b1_moe_layer_us"), Some("62"));
        // A missing step row is an error naming it.
        let no_step: String = CSV
            .lines()
            .filter(|l| !l.contains(",step,"))
            .collect::<Vec<_>>()
            .join("\n");
        let rows = parse_decode(&no_step, "t").unwrap();
        assert!(decode_table(&rows).unwrap_err().contains("`step`"));
    }

    #[test]
    fn the_bf16_table_sums_the_prompts() {
        let csv = "fixture,path,prompt,tokens,same_as_transformers,median_step_err,worst_step_err,min_logit_gap,backend\n\
            glm4_moe,cpu_bf16_moe,1,32,32,7.2e-3,7.4e-1,1.1e-2,X\n\
            glm4_moe,cpu_bf16_moe,2,32,20,7.2e-3,7.4e-1,1.1e-2,X\n\
            glm4_moe,cpu_bf16_moe,3,32,32,7.2e-3,7.4e-1,1.1e-2,X\n";
        let mut f = Facts::default();
        let t = bf16_table(csv, &mut f).unwrap();
        assert!(t.contains("| 32, 20, 32 | 7.2e-3 | 7.4e-1 |"), "{t}");
        assert_eq!(f.get("glm4_bf16_moe_same_tokens"), Some("84"));
    }
}
