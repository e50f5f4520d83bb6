//! The bf16-output variant's flip rate along T, from `bench ch11 --flips` on the GPU machine
//! (`tools/bench/src/ch11.rs`, `flips`; `chapters/ch11-merged-gate/src/host.rs`, `flip_rates`):
//! `bench/results/h200/ch11_flips.csv`, one line per row count T: the rows whose selected expert
//! set the bf16-rounded logits change against the merged form's fp32 logits, and their share.
//!
//! Made from it: `ch11-flips.md`, the table (T, rows flipped, rate) and a generated paragraph that
//! reads it (the smallest and largest rate, the largest T's count, how many rates lie within two
//! sampling spreads of the largest T's, and where that rate falls against the range SGLang's
//! comment gives), and the same numbers as facts (`flips_…`). Until the CSV is committed the file
//! says so in one marked line, no fact is added, and stderr says so: the page includes only the
//! file, so it stays valid either way.

use crate::csv::Table;
use crate::figures::facts::{thousands, Facts};
use crate::figures::{not_measured_yet, read, Generated};
use std::fmt::Write as _;
use std::path::Path;

const CSV: &str = "bench/results/h200/ch11_flips.csv";
const OUT: &str = "book/src/figures/ch11-flips.md";
/// The command that writes the CSV, as the page's "not measured yet" line names it.
const COMMAND: &str =
    "tools/bench/run ch11 --flips 1,16,64,256,1024,4096 --flips-out ch11_flips.csv";

/// The range SGLang's comment gives, as the router article (section 7) quotes it: "bf16 rounds
/// the router logits and moves the selected expert set on 2-25% of rows depending on T".
const CITED: (f64, f64) = (0.02, 0.25);

/// One line of the CSV (its `rate` column checked against the counts, then left: the share is
/// computed from them).
#[derive(Debug, Clone, PartialEq)]
pub struct Flips {
    pub shape: String,
    pub rows: u64,
    pub flipped: u64,
    /// The GPU, as the CSV's `device` column spells it.
    pub device: String,
}

impl Flips {
    /// The share of rows flipped.
    pub fn rate(&self) -> f64 {
        self.flipped as f64 / self.rows as f64
    }
}

/// The CSV's lines, checked (at least one row, never more flips than rows, the rate the flips'
/// share, one shape, each T once), sorted by T.
pub fn parse_flips(text: &str, name: &str) -> Result<Vec<Flips>, String> {
    let t = Table::parse(text, name)?;
    let mut v: Vec<Flips> = Vec::new();
    for r in t.records() {
        let count = |c: &str| {
            r(c).parse::<u64>()
                .map_err(|_| format!("{name}: `{}` is not a count ({c})", r(c)))
        };
        let rate = r("rate")
            .parse::<f64>()
            .map_err(|_| format!("{name}: `{}` is not a rate", r("rate")))?;
        let row = Flips {
            shape: r("shape"),
            rows: count("rows")?,
            flipped: count("flipped")?,
            device: r("device"),
        };
        if row.rows == 0 {
            return Err(format!("{name}: a line with 0 rows"));
        }
        if row.flipped > row.rows {
            return Err(format!(
                "{name}: {} rows flipped of {}",
                row.flipped, row.rows
            ));
        }
        if (rate - row.rate()).abs() > 1e-5 {
            return Err(format!(
                "{name}: at {} rows the rate {rate} is not {} / {}",
                row.rows, row.flipped, row.rows
            ));
        }
        if v.iter().any(|x| x.rows == row.rows) {
            return Err(format!("{name}: {} rows twice", row.rows));
        }
        if let Some(first) = v.first().filter(|x| x.shape != row.shape) {
            return Err(format!(
                "{name}: two shapes, `{}` and `{}`",
                first.shape, row.shape
            ));
        }
        v.push(row);
    }
    if v.is_empty() {
        return Err(format!("{name}: no rows"));
    }
    v.sort_by_key(|r| r.rows);
    Ok(v)
}

/// A rate in percent, two decimals under 1%, one above.
fn pct(rate: f64) -> String {
    let p = 100.0 * rate;
    if p == 0.0 {
        "0".into()
    } else if p < 1.0 {
        format!("{p:.2}")
    } else {
        format!("{p:.1}")
    }
}

/// The table: one line per T.
fn table(rows: &[Flips]) -> String {
    let mut s = String::from("| rows (T) | rows flipped | rate |\n|---:|---:|---:|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {}% |",
            thousands(r.rows),
            thousands(r.flipped),
            pct(r.rate())
        );
    }
    s
}

/// What the paragraph and the facts read: the smallest and largest rate and where, the largest
/// T's count, and how many rates lie within two sampling spreads of the largest T's rate `p`
/// (a count on T rows, each flipping with chance `p`, scatters by √(p(1 − p)/T)).
#[derive(Debug, PartialEq)]
struct Reading {
    min: (f64, u64),
    max: (f64, u64),
    last: (u64, u64, f64),
    within: usize,
}

fn reading(rows: &[Flips]) -> Reading {
    let last = rows.last().expect("parse_flips refuses an empty CSV");
    let p = last.rate();
    let mut min = (f64::INFINITY, 0);
    let mut max = (f64::NEG_INFINITY, 0);
    for r in rows {
        if r.rate() < min.0 {
            min = (r.rate(), r.rows);
        }
        if r.rate() > max.0 {
            max = (r.rate(), r.rows);
        }
    }
    let within = rows
        .iter()
        .filter(|r| (r.rate() - p).abs() <= 2.0 * (p * (1.0 - p) / r.rows as f64).sqrt() + 1e-12)
        .count();
    Reading {
        min,
        max,
        last: (last.rows, last.flipped, p),
        within,
    }
}

/// Where `rate` falls against the cited range.
fn against_cited(rate: f64) -> &'static str {
    if rate < CITED.0 {
        "below"
    } else if rate > CITED.1 {
        "above"
    } else {
        "inside"
    }
}

/// The facts (`flips_…`) and the paragraph under the table.
fn paragraph(rows: &[Flips], f: &mut Facts) -> String {
    let r = reading(rows);
    let (n, flipped, p) = r.last;
    f.add("flips_counts", rows.len().to_string(), CSV);
    f.add("flips_min_pct", pct(r.min.0), CSV);
    f.add("flips_min_at", thousands(r.min.1), CSV);
    f.add("flips_max_pct", pct(r.max.0), CSV);
    f.add("flips_max_at", thousands(r.max.1), CSV);
    f.add("flips_last_rows", thousands(n), CSV);
    f.add("flips_last_flipped", thousands(flipped), CSV);
    f.add("flips_last_pct", pct(p), CSV);
    f.add("flips_within", r.within.to_string(), CSV);
    f.add("flips_against_cited", against_cited(p), CSV);
    let (lo, hi) = (100.0 * CITED.0, 100.0 * CITED.1);
    format!(
        "Over the {} row counts the rate runs from {}% (at {} row{}) to {}% (at {} row{}). At the \
         largest count, {} of {} rows flipped ({}%). Taken as one row's chance to flip, that rate \
         puts {} within two sampling spreads of it. It lies {} the range that \
         SGLang's comment gives, as the router article's section 7 quotes it: \
         <span class=\"cited\">{lo:.0}-{hi:.0}%</span>.\n",
        rows.len(),
        pct(r.min.0),
        thousands(r.min.1),
        if r.min.1 == 1 { "" } else { "s" },
        pct(r.max.0),
        thousands(r.max.1),
        if r.max.1 == 1 { "" } else { "s" },
        thousands(flipped),
        thousands(n),
        pct(p),
        if r.within == rows.len() {
            format!("all {} rates", rows.len())
        } else {
            format!("{} of the {} rates", r.within, rows.len())
        },
        against_cited(p),
    )
}

/// `ch11-flips.md`, from the CSV, and its facts into `f`; until the CSV is committed, the file
/// is one marked line.
pub fn generate(root: &Path, f: &mut Facts) -> Result<Generated, String> {
    if !root.join(CSV).exists() {
        return Ok(not_measured_yet(
            OUT,
            CSV,
            "chapter 11's flip-rate table",
            &format!(
                "`{COMMAND}` on the GPU machine writes it, and `tools/plot` makes this table from it."
            ),
        ));
    }
    let rows = parse_flips(&read(root, CSV)?, CSV)?;
    let gpu = crate::figures::one_gpu(rows.iter().map(|r| r.device.as_str()), CSV)?;
    let mut s = format!(
        "**{}**, random weights: rows whose selected set the bf16 logits change against the fp32 \
         ones, measured on the {gpu}\n\n",
        rows[0].shape
    );
    s += &table(&rows);
    s.push('\n');
    s += &paragraph(&rows, f);
    Ok(Generated {
        path: OUT.into(),
        content: s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: &str = "kimi_k3_h7168_e896_p3584_k16";

    fn csv(lines: &[(u64, u64)]) -> String {
        let mut s = String::from("shape,rows,flipped,rate,device\n");
        for &(n, k) in lines {
            let _ = writeln!(s, "{SHAPE},{n},{k},{:.6},NVIDIA_H200", k as f64 / n as f64);
        }
        s
    }

    #[test]
    fn the_table_and_the_reading_follow_a_hand_made_csv() {
        // Out of order on purpose: the table is sorted by T.
        let rows = parse_flips(
            &csv(&[(1024, 40), (1, 1), (16, 0), (64, 3), (4096, 164)]),
            "f.csv",
        )
        .unwrap();
        let t = table(&rows);
        assert!(t.starts_with("| rows (T) | rows flipped | rate |"), "{t}");
        assert!(t.contains("| 1 | 1 | 100.0% |\n| 16 | 0 | 0% |"), "{t}");
        assert!(t.contains("| 4,096 | 164 | 4.0% |"), "{t}");
        assert_eq!(pct(0.0041), "0.41");
        let r = reading(&rows);
        assert_eq!(r.min, (0.0, 16));
        assert_eq!(r.max, (1.0, 1));
        assert_eq!(r.last, (4096, 164, 164.0 / 4096.0));
        // p ≈ 0.04: at 1 row two spreads are 0.39 (1.0 is out), at 16 rows 0.098 (0 is in), at
        // 64 rows 0.049 (0.047 is in), at 1,024 rows 0.012 (0.039 is in), 4,096 itself is in.
        assert_eq!(r.within, 4);
        let mut f = Facts::default();
        let p = paragraph(&rows, &mut f);
        assert!(
            p.contains("from 0% (at 16 rows) to 100.0% (at 1 row)"),
            "{p}"
        );
        assert!(p.contains("164 of 4,096 rows flipped (4.0%)"), "{p}");
        assert!(p.contains("puts 4 of the 5 rates within"), "{p}");
        assert!(p.contains("lies inside the range"), "{p}");
        assert!(p.contains(r#"<span class="cited">2-25%</span>"#), "{p}");
        assert_eq!(f.get("flips_max_at"), Some("1"));
        assert_eq!(f.get("flips_last_pct"), Some("4.0"));
        assert_eq!(f.get("flips_against_cited"), Some("inside"));
        assert_eq!(against_cited(0.01), "below");
        assert_eq!(against_cited(0.3), "above");
    }

    #[test]
    fn bad_csvs_are_errors() {
        let h = "shape,rows,flipped,rate,device\n";
        let bad = [
            (format!("{h}s,8,9,1.125,d\n"), "9 rows flipped of 8"),
            (format!("{h}s,8,2,0.5,d\n"), "is not 2 / 8"),
            (format!("{h}s,0,0,0,d\n"), "0 rows"),
            (format!("{h}s,8,x,0,d\n"), "`x` is not a count"),
            (format!("{h}s,8,1,0.125,d\ns,8,1,0.125,d\n"), "8 rows twice"),
            (format!("{h}s,8,1,0.125,d\nt,4,1,0.25,d\n"), "two shapes"),
            (h.to_string(), "no rows"),
        ];
        for (text, want) in bad {
            let e = parse_flips(&text, "f.csv").unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn without_the_csv_the_file_says_not_measured_yet_and_adds_no_fact() {
        let root = std::env::temp_dir().join(format!("moe-ch11-flips-{}", std::process::id()));
        let mut f = Facts::default();
        let g = generate(&root, &mut f).unwrap();
        assert_eq!(g.path, OUT);
        assert!(g.content.starts_with("*Not measured yet:"), "{}", g.content);
        assert!(f.get("flips_last_pct").is_none());
        // With it (written to a temporary folder, never the tree): the table.
        std::fs::create_dir_all(root.join("bench/results/h200")).unwrap();
        std::fs::write(root.join(CSV), csv(&[(16, 1), (256, 9)])).unwrap();
        let mut f = Facts::default();
        let g = generate(&root, &mut f);
        std::fs::remove_dir_all(&root).unwrap();
        let g = g.unwrap();
        assert!(g.content.contains("| 256 | 9 | 3.5% |"), "{}", g.content);
        assert!(
            g.content.contains("puts all 2 rates within"),
            "{}",
            g.content
        );
        assert_eq!(f.get("flips_counts"), Some("2"));
    }
}
