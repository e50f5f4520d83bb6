//! A chapter's equality table, from the CSV its GPU tests wrote (`moe_kernels::testing::
//! EqualityTable`, with `MOE_EQUALITY_DIR` set by `tools/gpu/run`): one line per comparison,
//! `part,case,comparison,elements,differing`. This module checks the CSV; the page's tables
//! (one per part, each cell `differing / compared`) and the facts it quotes (how many elements
//! were compared, how many differed) are a chapter's specs (`ch05.rs`, `EQUALITY_PAGE` and
//! `EQUALITY_FACTS`, read by [`super::spec`]).

use crate::csv::Table;

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

/// [`parse`], for a spec's check of the CSV before it is read.
pub fn check(text: &str, name: &str) -> Result<(), String> {
    parse(text, name).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

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
