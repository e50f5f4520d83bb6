//! The book's two prose rules (STYLE.md 15), checked on every page `book/src/**/*.md` outside
//! `book/src/figures/` (those files are generated, and they are where measured numbers belong):
//!
//! 1. **No measured value typed in prose.** A sentence that types a timing disagrees with its CSV
//!    the day the CSV is re-measured; a number that comes from a generated facts file cannot.
//!    What fails is a digit followed, directly or after one space (plain, no-break or narrow
//!    no-break), by a unit of a measurement: `µs` (or `μs`), `us`, `ns`, `ms`, `GB/s`, `TB/s`,
//!    `GFLOP/s`, `TFLOP/s`, with no letter or digit right after the unit.
//!    A ratio fails when its number has a decimal point: `1.18×`, `0.97 x`. The rule for `×`:
//!    a ratio of two measured times is, in practice, never a whole number, while whole factors
//!    are sizes, counts and definitions the prose must be able to state (`64 × 64` tiles, "4×
//!    the L2", "2× the bytes"). A measured ratio that happens to print as a whole number is still
//!    a generated fact in a correctly written page; the check cannot tell it from a definition
//!    and does not try.
//!    The one exception is a figure quoted from a cited external source: wrapped in
//!    `<span class="cited">…</span>`, it passes when its paragraph names the source, by the words
//!    "router article" or by a link (`](http…` or `<a href`). A cited span in a paragraph that
//!    names no source is itself a finding.
//! 2. **No project history in prose.** Commit hashes (a word of 7 to 40 lowercase hex digits
//!    with at least one letter and one digit; words inside a URL are not checked, so a link to
//!    an upstream file pinned at a commit passes), `logs/` paths, and the phrases `(was `,
//!    `since <7 hex digits>`, "the one that lost" and "the version that lost". How a committed
//!    CSV was made belongs in `bench/results/<gpu>/README.md`, not on a page.
//!
//! Before either rule runs, the page is masked (each removed character becomes a space, so line
//! numbers stay right): fenced code blocks, HTML comments, `{{#include …}}` /
//! `{{#rustdoc_include …}}` and every other `{{#…}}` directive, and table rows that are nothing
//! but includes and separators. The measured-value rule also masks inline code spans (a code span
//! is a name, and names like `--warm-us` are not measurements); the history rule does not, since a
//! log path or a hash in backticks is still history.
//!
//! The page's prose word count is computed as `/work/shared/hooks/before-stop` computes it
//! (fenced code removed, then every line starting with `|`, `{{#` or `<` dropped, then
//! whitespace-separated words), printed per page, and a page above [`MAX_WORDS`] fails.

use std::path::{Path, PathBuf};

/// Prose words above which a page fails: the target is about 6,000 (STYLE.md 14); a longer
/// chapter becomes sub-pages.
pub const MAX_WORDS: usize = 6_500;

/// Units of a measured value; the longer ones first so that `GFLOP/s` is not read as `ms`-like
/// prefixes (no unit is a prefix of another, but the order keeps the match the longest one).
const UNITS: [&str; 9] = [
    "TFLOP/s", "GFLOP/s", "GB/s", "TB/s", "µs", "μs", "us", "ns", "ms",
];

/// Phrases of history, matched without regard to case.
const HISTORY_PHRASES: [&str; 3] = ["(was ", "the one that lost", "the version that lost"];

/// One thing on a page that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// 1-based line of the page.
    pub line: usize,
    /// Which rule, in words.
    pub what: &'static str,
    /// The offending text, as the page has it.
    pub text: String,
}

/// A page's result: its prose word count and what it breaks.
#[derive(Debug, Clone)]
pub struct PageReport {
    pub path: PathBuf,
    pub words: usize,
    pub findings: Vec<Finding>,
}

/// True for a page the rules apply to: a `.md` file under `book/src/` but not under
/// `book/src/figures/` (the generated files). `rel` is relative to the repository root.
pub fn is_checked(rel: &Path) -> bool {
    rel.starts_with("book/src")
        && !rel.starts_with("book/src/figures")
        && rel.extension().is_some_and(|x| x == "md")
}

/// Reads and checks one page; `rel` is the path the findings name.
pub fn check_file(path: &Path, rel: &Path) -> Result<PageReport, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", rel.display()))?;
    Ok(PageReport {
        path: rel.to_path_buf(),
        words: word_count(&text),
        findings: check(&text),
    })
}

/// Every finding of a page, in order of line.
pub fn check(page: &str) -> Vec<Finding> {
    let base = mask_base(page);
    let mut out = Vec::new();

    // Measured values: inline code masked, cited spans checked and then masked.
    let mut units = base.clone();
    mask_code_spans(&mut units);
    for (start, end, ok) in cited_spans(&units) {
        if !ok {
            out.push(finding(
                page,
                start,
                end,
                "a cited figure whose paragraph names no source (say \"router article\" or link it)",
            ));
        }
        // Only the contents: the tags themselves hold no digits.
        blank(&mut units, start, end);
    }
    for (start, end, what) in measured_values(&units) {
        out.push(finding(page, start, end, what));
    }

    // History: code spans kept.
    for (start, end, what) in history(&base) {
        out.push(finding(page, start, end, what));
    }
    out.sort_by_key(|f| f.line);
    out
}

/// Prose words of a page, as `/work/shared/hooks/before-stop` counts them: everything from one
/// "```" to the next removed, then the lines that start (after indentation) with `|`, `{{#`
/// or `<` dropped, then whitespace-separated words.
pub fn word_count(page: &str) -> usize {
    let mut text = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(i) = rest.find("```") {
        match rest[i + 3..].find("```") {
            Some(j) => {
                text.push_str(&rest[..i]);
                rest = &rest[i + 3 + j + 3..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.lines()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with('|') || l.starts_with("{{#") || l.starts_with('<'))
        })
        .map(|l| l.split_whitespace().count())
        .sum()
}

// ---------------------------------------------------------------------------------------------
// masking

/// Replaces bytes `start..end` by spaces, keeping newlines (so offsets and lines stay right).
fn blank(text: &mut String, start: usize, end: usize) {
    let replaced: String = text[start..end]
        .bytes()
        .map(|b| if b == b'\n' { '\n' } else { ' ' })
        .collect();
    text.replace_range(start..end, &replaced);
}

/// The page with fenced code blocks, HTML comments, `{{#…}}` directives and all-include table
/// rows blanked.
fn mask_base(page: &str) -> String {
    let mut text = page.to_string();
    // Fenced code blocks, by lines: a fence of 3+ backticks or tildes opens, the same character
    // repeated at least as often closes; an unclosed fence runs to the end of the page.
    let mut fence: Option<(char, usize)> = None;
    let mut ranges = Vec::new();
    let mut offset = 0;
    for line in page.split_inclusive('\n') {
        let t = line.trim_start();
        let run = |c: char| t.chars().take_while(|&x| x == c).count();
        let (c, n) = if run('`') >= 3 {
            ('`', run('`'))
        } else if run('~') >= 3 {
            ('~', run('~'))
        } else {
            (' ', 0)
        };
        match fence {
            None if n >= 3 => {
                fence = Some((c, n));
                ranges.push((offset, offset + line.len()));
            }
            None => {}
            Some((fc, fnum)) => {
                ranges.push((offset, offset + line.len()));
                if c == fc && n >= fnum && t[n * c.len_utf8()..].trim().is_empty() {
                    fence = None;
                }
            }
        }
        offset += line.len();
    }
    for (s, e) in ranges {
        blank(&mut text, s, e);
    }
    mask_between(&mut text, "<!--", "-->");
    mask_between(&mut text, "{{#", "}}");
    // Table rows left with nothing but pipes, dashes, colons and spaces were all includes (or a
    // separator row, which holds no prose either).
    let mut offset = 0;
    let mut rows = Vec::new();
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('|') && t.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
            rows.push((offset, offset + line.len()));
        }
        offset += line.len();
    }
    for (s, e) in rows {
        blank(&mut text, s, e);
    }
    text
}

/// Blanks every `open … close` (an unclosed `open` runs to the end of the text).
fn mask_between(text: &mut String, open: &str, close: &str) {
    let mut from = 0;
    while let Some(i) = text[from..].find(open).map(|i| from + i) {
        let end = text[i + open.len()..]
            .find(close)
            .map_or(text.len(), |j| i + open.len() + j + close.len());
        blank(text, i, end);
        from = end;
    }
}

/// Blanks inline code spans: a run of N backticks up to the next run of exactly N backticks in
/// the same paragraph. A run with no partner is left as it is.
fn mask_code_spans(text: &mut String) {
    let bytes = text.as_bytes().to_vec();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let m = run_at(j);
                if m == n {
                    close = Some(j + m);
                    break;
                }
                j += m;
            } else if bytes[j] == b'\n'
                && text[j + 1..]
                    .trim_start_matches([' ', '\t'])
                    .starts_with('\n')
            {
                break; // a blank line ends the paragraph
            } else {
                j += 1;
            }
        }
        match close {
            Some(e) => {
                spans.push((i, e));
                i = e;
            }
            None => i += n,
        }
    }
    for (s, e) in spans {
        blank(text, s, e);
    }
}

/// `<span class="cited">…</span>` ranges (the whole element) and whether the paragraph around
/// each names its source.
fn cited_spans(text: &str) -> Vec<(usize, usize, bool)> {
    const OPEN: &str = "<span class=\"cited\">";
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(OPEN).map(|i| from + i) {
        let end = text[i..]
            .find("</span>")
            .map_or(text.len(), |j| i + j + "</span>".len());
        let (ps, pe) = paragraph(text, i);
        let para = text[ps..pe.max(end)].to_lowercase();
        let named =
            para.contains("router article") || para.contains("](http") || para.contains("<a href");
        out.push((i, end, named));
        from = end;
    }
    out
}

/// The paragraph (between blank lines) that holds byte `at`.
fn paragraph(text: &str, at: usize) -> (usize, usize) {
    let is_blank = |l: &str| l.trim().is_empty();
    let mut start = 0;
    let mut offset = 0;
    let mut end = text.len();
    for line in text.split_inclusive('\n') {
        let next = offset + line.len();
        if is_blank(line) {
            if next <= at {
                start = next;
            } else if offset > at {
                end = offset;
                break;
            }
        }
        offset = next;
    }
    (start, end)
}

// ---------------------------------------------------------------------------------------------
// the rules

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Measured values in a masked text: `(start, end, what)`.
fn measured_values(text: &str) -> Vec<(usize, usize, &'static str)> {
    let mut out = Vec::new();
    for (i, c) in text.char_indices() {
        if c.is_ascii_digit() {
            let mut rest = &text[i + 1..];
            if let Some(r) = rest.strip_prefix([' ', '\u{a0}', '\u{202f}']) {
                rest = r;
            }
            for unit in UNITS {
                if let Some(after) = rest.strip_prefix(unit) {
                    if !after.chars().next().is_some_and(is_word_char) {
                        let end = text.len() - after.len();
                        out.push((
                            number_start(text, i + 1),
                            end,
                            "a measured value typed in prose (use a facts include)",
                        ));
                    }
                    break;
                }
            }
        }
        if c == '×' || c == 'x' {
            let after = &text[i + c.len_utf8()..];
            if c == 'x' && after.chars().next().is_some_and(is_word_char) {
                continue;
            }
            let before = &text[..i];
            let before = before
                .strip_suffix([' ', '\u{a0}', '\u{202f}'])
                .unwrap_or(before);
            let num_start = number_start(text, before.len());
            let num = &text[num_start..before.len()];
            let decimal = num.split_once('.').is_some_and(|(a, b)| {
                a.ends_with(|c: char| c.is_ascii_digit())
                    && b.starts_with(|c: char| c.is_ascii_digit())
            });
            let glued = text[..num_start]
                .chars()
                .next_back()
                .is_some_and(is_word_char);
            if decimal && !glued {
                out.push((
                    num_start,
                    i + c.len_utf8(),
                    "a measured ratio typed in prose (use a facts include)",
                ));
            }
        }
    }
    out
}

/// The start of the number that ends at byte `end` (digits, `.` and `,`; a leading `.` or `,`
/// is punctuation, not part of it). Equal to `end` when no digit precedes it.
fn number_start(text: &str, end: usize) -> usize {
    let mut s = end;
    for (j, c) in text[..end].char_indices().rev() {
        if c.is_ascii_digit() || c == '.' || c == ',' {
            s = j;
        } else {
            break;
        }
    }
    while s < end && !text[s..].starts_with(|c: char| c.is_ascii_digit()) {
        s += 1;
    }
    s
}

/// History in a masked text (code spans kept): `(start, end, what)`.
fn history(text: &str) -> Vec<(usize, usize, &'static str)> {
    let mut out = Vec::new();
    // Words outside URLs.
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap();
        if !is_word_char(c) {
            i += c.len_utf8();
            continue;
        }
        let len = text[i..]
            .char_indices()
            .find(|&(_, c)| !is_word_char(c))
            .map_or(text.len() - i, |(j, _)| j);
        let word = &text[i..i + len];
        if is_hash(word) && !in_url(text, i) {
            out.push((
                i,
                i + len,
                "a commit hash in prose (history belongs in bench/results/<gpu>/README.md)",
            ));
        }
        i += len;
    }
    let mut from = 0;
    while let Some(j) = text[from..].find("logs/").map(|j| from + j) {
        if !text[..j].chars().next_back().is_some_and(is_word_char) {
            let end = text[j..]
                .find(|c: char| c.is_whitespace() || matches!(c, ')' | '`' | ','))
                .map_or(text.len(), |k| j + k);
            let start = text[..j]
                .rfind(|c: char| c.is_whitespace() || matches!(c, '(' | '`'))
                .map_or(0, |k| k + 1);
            out.push((
                start,
                end,
                "a log path in prose (history belongs in bench/results/<gpu>/README.md)",
            ));
        }
        from = j + 5;
    }
    let lower = text.to_lowercase();
    // Lowercasing can change byte lengths only outside ASCII; the phrases are ASCII, and the
    // offsets are used only when the two texts agree in length.
    if lower.len() == text.len() {
        for p in HISTORY_PHRASES {
            for (j, _) in lower.match_indices(p) {
                out.push((j, j + p.len(), "project history in prose"));
            }
        }
        for (j, _) in lower.match_indices("since ") {
            let w = &text[j + 6..];
            let n = w.bytes().take_while(u8::is_ascii_hexdigit).count();
            if n >= 7 && !w[n..].starts_with(is_word_char) {
                out.push((
                    j,
                    j + 6 + n,
                    "project history in prose (\"since <commit>\")",
                ));
            }
        }
    }
    out
}

/// 7 to 40 lowercase hex digits with at least one letter and one digit.
fn is_hash(word: &str) -> bool {
    (7..=40).contains(&word.len())
        && word
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().any(|b| b.is_ascii_alphabetic())
}

/// True when byte `i` lies in a token that contains `://` (a URL).
fn in_url(text: &str, i: usize) -> bool {
    let start = text[..i]
        .rfind(|c: char| c.is_whitespace() || matches!(c, '(' | '<' | '"'))
        .map_or(0, |k| k + 1);
    let end = text[i..]
        .find(|c: char| c.is_whitespace() || matches!(c, ')' | '>' | '"'))
        .map_or(text.len(), |k| i + k);
    text[start..end].contains("://")
}

fn finding(page: &str, start: usize, end: usize, what: &'static str) -> Finding {
    let line = page[..start].matches('\n').count() + 1;
    let text = page[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let text = if text.chars().count() > 80 {
        format!("{}…", text.chars().take(80).collect::<String>())
    } else {
        text
    };
    Finding { line, what, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whats(page: &str) -> Vec<(usize, &'static str, String)> {
        check(page)
            .into_iter()
            .map(|f| (f.line, f.what, f.text))
            .collect()
    }

    fn texts(page: &str) -> Vec<String> {
        check(page).into_iter().map(|f| f.text).collect()
    }

    #[test]
    fn a_typed_time_fails_with_every_unit_and_spacing() {
        for s in [
            "It takes 3.4 µs cold.",
            "It takes 3.4µs cold.",
            "It takes 12 μs.",
            "It takes 12\u{a0}us.",
            "About 900 ns per call.",
            "Then 1,744 ms.",
            "It reads 3.1 TB/s and",
            "at 45 GB/s, and",
            "341 TFLOP/s here",
            "and 80 GFLOP/s.",
        ] {
            let f = check(s);
            assert_eq!(f.len(), 1, "{s}: {f:?}");
            assert!(f[0].what.starts_with("a measured value"), "{s}");
        }
        assert_eq!(texts("It takes 3.4 µs cold."), ["3.4 µs"]);
        assert_eq!(texts("Then 1,744 ms."), ["1,744 ms"]);
    }

    #[test]
    fn units_that_are_not_measurements_pass() {
        for s in [
            "It takes {{#include figures/ch01-facts.md:x}} µs cold.",
            "The flag `--warm 20us` is in code.",
            "Two users of the 8 usual ways.",
            "The 2 msgs, 4 nsteps and the us of it.",
            "µs alone, as a column heading.",
            "```text\n3.4 µs\n```\n",
            "~~~\n3.4 µs\n~~~\n",
            "<!-- 3.4 µs was measured -->",
        ] {
            assert_eq!(check(s), vec![], "{s}");
        }
    }

    #[test]
    fn a_decimal_ratio_fails_and_a_whole_factor_passes() {
        assert_eq!(texts("the chain is 1.18× the time"), ["1.18×"]);
        assert_eq!(texts("the chain is 0.97 x the time"), ["0.97 x"]);
        assert_eq!(texts("it is 2.5x faster"), ["2.5x"]);
        for s in [
            "64 × 64 tiles",
            "4× the L2",
            "a 2x smaller file",
            "the 0x1f mask",
            "version 1.2xl",
            "{{#include figures/f.md:ratio}}× the time",
            "`1.18×` in code",
        ] {
            assert_eq!(check(s), vec![], "{s}");
        }
    }

    #[test]
    fn a_cited_figure_passes_only_with_its_source_in_the_paragraph() {
        let ok = "Measured on a B300 in the router article, the five lines took\n\
                  <span class=\"cited\">26.9 µs</span> at one row.";
        assert_eq!(check(ok), vec![]);
        let linked =
            "The [paper](https://example.org/p) reports <span class=\"cited\">1.4×</span>.";
        assert_eq!(check(linked), vec![]);
        // The source is in another paragraph: the span fails, its number does not count twice.
        let far =
            "The router article measured it.\n\nIt took <span class=\"cited\">26.9 µs</span>.";
        let f = whats(far);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].0, 3);
        assert!(f[0].1.starts_with("a cited figure whose paragraph"));
        // A number outside the span in a cited paragraph still fails.
        let outside = "The router article: <span class=\"cited\">26.9 µs</span>, ours 7.1 µs.";
        assert_eq!(texts(outside), ["7.1 µs"]);
    }

    #[test]
    fn commit_hashes_fail_as_words_outside_urls() {
        assert_eq!(texts("measured at 58a62d1 on the H200"), ["58a62d1"]);
        assert_eq!(texts("in `f2f30c5`'s PTX"), ["f2f30c5"]);
        let long = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(texts(&format!("commit {long}.")), [long]);
        for s in [
            "the deadbeef case",   // no digit
            "1234567 rows",        // no letter
            "the abc123 id",       // too short
            "58A62D1 in capitals", // not lowercase
            "x58a62d1 glued",      // not hex as a word
            "see [the file](https://github.com/o/r/blob/58a62d1/f.rs)",
        ] {
            assert_eq!(check(s), vec![], "{s}");
        }
    }

    #[test]
    fn log_paths_and_history_phrases_fail() {
        assert_eq!(
            texts("(bench/results/h200/logs/run_ch02.log)"),
            ["bench/results/h200/logs/run_ch02.log"]
        );
        assert_eq!(texts("see `logs/x.log`"), ["logs/x.log"]);
        assert_eq!(texts("1.17 of the floor (was 1.2)"), ["(was"]);
        assert_eq!(
            texts("It stays as The one that lost."),
            ["The one that lost"]
        );
        assert_eq!(texts("faster since 1234567."), ["since 1234567"]);
        for s in [
            "the blogs/ of others",
            "it was faster",
            "since 2024 it",
            "the ones that won",
        ] {
            assert_eq!(check(s), vec![], "{s}");
        }
    }

    #[test]
    fn table_rows_of_includes_are_masked_and_typed_rows_are_not() {
        let page = "| a | b |\n|---|:-:|\n| {{#include f.md:x}} | {{#include f.md:y}} |\n| GLM | 3.4 µs |\n";
        assert_eq!(whats(page).iter().map(|f| f.0).collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn findings_carry_the_page_line() {
        let page = "# T\n\n```\n58a62d1\n```\n\nText 3.4 µs.\n<!--\nlogs/a\n-->\nsince abcdef1\n";
        let lines: Vec<usize> = check(page).iter().map(|f| f.line).collect();
        assert_eq!(lines, [7, 11, 11]);
    }

    #[test]
    fn the_word_count_is_the_hooks() {
        let page = "# Title words\n\nOne two three.\n```rust\nlet a = 1;\n```\n| a | b |\n{{#include x}}\n<details>\n  <summary>x</summary>\n";
        assert_eq!(word_count(page), 6);
        assert_eq!(word_count("a\u{a0}b c"), 3);
    }

    #[test]
    fn figures_are_not_checked() {
        assert!(is_checked(Path::new("book/src/ch01-router.md")));
        assert!(is_checked(Path::new("book/src/ch04/decode.md")));
        assert!(!is_checked(Path::new("book/src/figures/ch01-facts.md")));
        assert!(!is_checked(Path::new("book/src/figures/ch01-tree.txt")));
    }
}
