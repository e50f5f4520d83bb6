//! A small line diff in unified style, for "the example's output differs from its snapshot".

/// Unified-style diff of `old` against `new` with 2 lines of context, at most `max_lines` lines
/// of output. Empty when the texts are equal line by line.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str, max_lines: usize) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = edit_script(&a, &b);
    if ops.iter().all(|op| matches!(op, Op::Same(..))) {
        return String::new();
    }
    const CONTEXT: usize = 2;
    let mut out = vec![format!("--- {old_name}"), format!("+++ {new_name}")];
    // Group the script into hunks: changed ops plus CONTEXT unchanged lines on either side.
    let changed: Vec<usize> = (0..ops.len())
        .filter(|&i| !matches!(ops[i], Op::Same(..)))
        .collect();
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        let lo = i.saturating_sub(CONTEXT);
        let hi = (i + CONTEXT + 1).min(ops.len());
        match hunks.last_mut() {
            Some(h) if lo <= h.1 => h.1 = hi,
            _ => hunks.push((lo, hi)),
        }
    }
    for (lo, hi) in hunks {
        let (mut ai, mut bi) = (0, 0);
        for op in &ops[..lo] {
            match op {
                Op::Same(..) => {
                    ai += 1;
                    bi += 1;
                }
                Op::Del(_) => ai += 1,
                Op::Add(_) => bi += 1,
            }
        }
        let na = ops[lo..hi]
            .iter()
            .filter(|o| !matches!(o, Op::Add(_)))
            .count();
        let nb = ops[lo..hi]
            .iter()
            .filter(|o| !matches!(o, Op::Del(_)))
            .count();
        // An empty side is written as the line before it, as `diff -u` does.
        let from = |i: usize, n: usize| if n == 0 { i } else { i + 1 };
        out.push(format!(
            "@@ -{},{na} +{},{nb} @@",
            from(ai, na),
            from(bi, nb)
        ));
        for op in &ops[lo..hi] {
            out.push(match op {
                Op::Same(i, _) => format!(" {}", a[*i]),
                Op::Del(i) => format!("-{}", a[*i]),
                Op::Add(j) => format!("+{}", b[*j]),
            });
        }
    }
    if out.len() > max_lines {
        let more = out.len() - max_lines;
        out.truncate(max_lines);
        out.push(format!("… ({more} more diff lines)"));
    }
    out.join("\n")
}

#[derive(Debug)]
enum Op {
    /// Line `a[i]`, equal to `b[j]`.
    Same(usize, #[allow(dead_code)] usize),
    Del(usize),
    Add(usize),
}

/// Longest-common-subsequence edit script. Quadratic, which is fine for snapshot-sized texts;
/// beyond that the common prefix and suffix are kept and the middle is shown replaced.
fn edit_script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut ops: Vec<Op> = (0..pre).map(|i| Op::Same(i, i)).collect();
    if am.len() * bm.len() > 4_000_000 {
        ops.extend((0..am.len()).map(|i| Op::Del(pre + i)));
        ops.extend((0..bm.len()).map(|j| Op::Add(pre + j)));
    } else {
        // lcs[i][j] = LCS length of am[i..] and bm[j..].
        let (n, m) = (am.len(), bm.len());
        let mut lcs = vec![vec![0u32; m + 1]; n + 1];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i][j] = if am[i] == bm[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Same(pre + i, pre + j));
                i += 1;
                j += 1;
            } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
                ops.push(Op::Del(pre + i));
                i += 1;
            } else {
                ops.push(Op::Add(pre + j));
                j += 1;
            }
        }
    }
    let (a0, b0) = (a.len() - suf, b.len() - suf);
    ops.extend((0..suf).map(|k| Op::Same(a0 + k, b0 + k)));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a\nb\n", "a\nb", "old", "new", 50), "");
    }

    #[test]
    fn shows_changed_lines_with_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n";
        let new = "1\n2\n3\nfour\n5\n6\n7\n8\n9\n10\n11\n12\n13\n";
        let d = unified(old, new, "snap", "stdout", 50);
        assert_eq!(
            d,
            "--- snap\n+++ stdout\n@@ -2,5 +2,5 @@\n 2\n 3\n-4\n+four\n 5\n 6\n@@ -11,2 +11,3 @@\n 11\n 12\n+13"
        );
        assert_eq!(
            unified("a\nb\n", "", "snap", "stdout", 50),
            "--- snap\n+++ stdout\n@@ -1,2 +0,0 @@\n-a\n-b"
        );
        let short = unified(old, new, "snap", "stdout", 4);
        assert!(short.ends_with("… (9 more diff lines)"), "{short}");
    }
}
