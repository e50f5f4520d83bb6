//! A chapter's equality table, from the CSV its GPU tests wrote (`moe_kernels::testing::
//! EqualityTable`, with `MOE_EQUALITY_DIR` set by `tools/gpu/run`): one line per comparison,
//! `part,case,comparison,elements,differing`. Made from it: one markdown table per part, each
//! cell `differing / compared`, and the facts the page quotes (how many elements were compared
//! in all, how many differed).
//!
//! A part's table puts along the columns whichever of its cases and comparisons has fewer
//! distinct values (nine regimes by five comparisons: the comparisons; two shapes by a dozen
//! comparisons: the shapes), each in the order the CSV first names it.

use super::facts::{thousands, Facts};
use crate::csv::Table;
use std::fmt::Write as _;

/// One comparison of the CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub part: String,
    pub case: String,
    pub comparison: String,
    pub elements: u64,
    pub differing: u64,
}

/// The CSV's lines, checked: counts are whole numbers, no more differ than were compared, and a
/// (part, case, comparison) appears once.
pub fn parse(text: &str, name: &str) -> Result<Vec<Line>, String> {
    let t = Table::parse(text, name)?;
    let cols = ["part", "case", "comparison", "elements", "differing"];
    let idx: Vec<usize> = cols.iter().map(|c| t.col(c)).collect::<Result<_, _>>()?;
    let mut lines: Vec<Line> = Vec::new();
    for r in t.rows() {
        let f = |i: usize| r.fields[idx[i]].clone();
        let count = |i: usize| {
            f(i).parse::<u64>().map_err(|_| {
                format!(
                    "{name}:{}: `{}` in column `{}` is not a count",
                    r.line,
                    f(i),
                    cols[i]
                )
            })
        };
        let l = Line {
            part: f(0),
            case: f(1),
            comparison: f(2),
            elements: count(3)?,
            differing: count(4)?,
        };
        if l.differing > l.elements {
            return Err(format!(
                "{name}:{}: {} differing of {} compared",
                r.line, l.differing, l.elements
            ));
        }
        if lines
            .iter()
            .any(|o| (&o.part, &o.case, &o.comparison) == (&l.part, &l.case, &l.comparison))
        {
            return Err(format!(
                "{name}:{}: `{}, {}, {}` appears twice",
                r.line, l.part, l.case, l.comparison
            ));
        }
        lines.push(l);
    }
    if lines.is_empty() {
        return Err(format!("{name}: no comparisons"));
    }
    Ok(lines)
}

/// Distinct values in order of first appearance.
fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::new();
    for s in it {
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v
}

/// The parts, in the CSV's order.
pub fn parts(lines: &[Line]) -> Vec<&str> {
    distinct(lines.iter().map(|l| l.part.as_str()))
}

/// The markdown table of one part: `differing / compared` per cell, a difference in bold, `–`
/// where a case has no such comparison.
pub fn table(lines: &[Line], part: &str) -> String {
    let of: Vec<&Line> = lines.iter().filter(|l| l.part == part).collect();
    let cases = distinct(of.iter().map(|l| l.case.as_str()));
    let comps = distinct(of.iter().map(|l| l.comparison.as_str()));
    let by_case = comps.len() <= cases.len(); // columns: the comparisons
    let (rows, cols, corner) = if by_case {
        (&cases, &comps, part)
    } else {
        (&comps, &cases, "comparison")
    };
    let mut s = format!("| {corner} |");
    for c in cols.iter() {
        let _ = write!(s, " {c} |");
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(cols.len()));
    s.push('\n');
    for r in rows.iter() {
        let _ = write!(s, "| {r} |");
        for c in cols.iter() {
            let (case, comp) = if by_case { (r, c) } else { (c, r) };
            let cell = of
                .iter()
                .find(|l| l.case == *case && l.comparison == *comp)
                .map_or("–".to_string(), |l| {
                    let d = thousands(l.differing);
                    let d = if l.differing > 0 {
                        format!("**{d}**")
                    } else {
                        d
                    };
                    format!("{d} / {}", thousands(l.elements))
                });
            let _ = write!(s, " {cell} |");
        }
        s.push('\n');
    }
    s
}

/// The facts: `<prefix>_compared` and `<prefix>_differing` over every line, the same per part
/// (`<prefix>_<part>_…`, the part's name in lower case with `_` for anything else), and the
/// number of lines with a difference.
pub fn facts(lines: &[Line], prefix: &str, source: &str, f: &mut Facts) {
    let sum = |it: &mut dyn Iterator<Item = &Line>| {
        it.fold((0u64, 0u64), |(e, d), l| (e + l.elements, d + l.differing))
    };
    let (e, d) = sum(&mut lines.iter());
    f.add(format!("{prefix}_compared"), thousands(e), source);
    f.add(format!("{prefix}_differing"), thousands(d), source);
    let with = lines.iter().filter(|l| l.differing > 0).count() as u64;
    f.add(
        format!("{prefix}_lines_with_differences"),
        thousands(with),
        source,
    );
    for p in parts(lines) {
        let key: String = p
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let (e, d) = sum(&mut lines.iter().filter(|l| l.part == p));
        f.add(format!("{prefix}_{key}_compared"), thousands(e), source);
        f.add(format!("{prefix}_{key}_differing"), thousands(d), source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "part,case,comparison,elements,differing\n\
        regimes,a,ids,8,0\nregimes,a,weights,8,0\nregimes,a,logits,100,0\n\
        regimes,b,ids,16,0\nregimes,b,weights,16,2\nregimes,b,logits,200,0\n\
        regimes,c,ids,4,0\nregimes,c,weights,4,0\n\
        random rows,x,ids,1000,0\nrandom rows,x,weights,1000,0\nrandom rows,x,logits,50,0\n\
        random rows,y,ids,2000,0\n";

    #[test]
    fn columns_are_the_shorter_dimension() {
        let l = parse(CSV, "t.csv").unwrap();
        assert_eq!(parts(&l), ["regimes", "random rows"]);
        let t = table(&l, "regimes");
        assert!(
            t.starts_with("| regimes | ids | weights | logits |\n|---|---:|---:|---:|\n"),
            "{t}"
        );
        assert!(t.contains("| b | 0 / 16 | **2** / 16 | 0 / 200 |"), "{t}");
        assert!(t.contains("| c | 0 / 4 | 0 / 4 | – |"), "{t}");
        let t = table(&l, "random rows");
        assert!(t.contains("| comparison | x | y |"), "{t}");
        assert!(t.contains("| ids | 0 / 1,000 | 0 / 2,000 |"), "{t}");
        assert!(t.contains("| logits | 0 / 50 | – |"), "{t}");
        let mut f = Facts::default();
        facts(&l, "eq", "t.csv", &mut f);
        assert_eq!(f.get("eq_compared"), Some("4,406"));
        assert_eq!(f.get("eq_differing"), Some("2"));
        assert_eq!(f.get("eq_lines_with_differences"), Some("1"));
        assert_eq!(f.get("eq_random_rows_compared"), Some("4,050"));
        assert_eq!(f.get("eq_regimes_differing"), Some("2"));
    }

    #[test]
    fn bad_lines_are_errors() {
        let bad = |body: &str| {
            parse(
                &format!("part,case,comparison,elements,differing\n{body}"),
                "t.csv",
            )
            .unwrap_err()
        };
        assert!(bad("p,a,ids,8,9\n").contains("9 differing of 8"));
        assert!(bad("p,a,ids,8,x\n").contains("not a count"));
        assert!(bad("p,a,ids,8,0\np,a,ids,8,0\n").contains("appears twice"));
        assert!(bad("").contains("no comparisons"));
    }
}
