//! Finds mdbook's `{{#include …}}` and `{{#rustdoc_include …}}` links in a page and checks that
//! each one would render something: mdbook renders a missing anchor or an out-of-range line
//! range as nothing at all, silently, so the book would lose a listing without anyone noticing.
//!
//! The syntax and the line-range semantics follow mdbook 0.5's `links` preprocessor:
//! `PATH`, `PATH:ANCHOR`, `PATH:N` (line N only), `PATH:START:END`, `PATH:START:`, `PATH::END`,
//! with 1-based, inclusive line numbers; `\{{#include …}}` is an escaped link, not an include.

use crate::snap;
use std::path::{Path, PathBuf};

/// What part of the file an include takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The whole file.
    All,
    /// The lines between `ANCHOR: name` and `ANCHOR_END: name`.
    Anchor(String),
    /// 1-based inclusive line numbers; `None` is an open end.
    Lines {
        start: Option<usize>,
        end: Option<usize>,
    },
}

/// One include link found in a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Include {
    /// The link as written, e.g. `{{#include ../../examples/ch01.rs:main}}`.
    pub text: String,
    /// 1-based line of the page the link starts on.
    pub line: usize,
    /// The path as written, relative to the page's directory.
    pub path: String,
    pub selector: Selector,
}

/// Finds every include and rustdoc_include link in a page's text.
pub fn find_includes(page: &str) -> Vec<Include> {
    let bytes = page.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = page[i..].find("{{") {
        let start = i + off;
        // An escaped link (`\{{#…}}`) runs, as in mdbook, to the last `}}` on its line.
        if start > 0 && bytes[start - 1] == b'\\' && page[start + 2..].starts_with('#') {
            let line_end = page[start..].find('\n').map_or(page.len(), |e| start + e);
            i = page[start..line_end]
                .rfind("}}")
                .map_or(start + 2, |e| start + e + 2);
            continue;
        }
        i = start + 2;
        let Some(close) = page[start + 2..].find("}}").map(|e| start + 2 + e) else {
            break;
        };
        let inner = &page[start + 2..close];
        if inner.contains('}') {
            continue;
        }
        let inner = inner.trim_start();
        let Some(inner) = inner.strip_prefix('#') else {
            continue;
        };
        let kind_len = inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(inner.len());
        let (kind, rest) = inner.split_at(kind_len);
        if kind != "include" && kind != "rustdoc_include" {
            continue;
        }
        if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let Some(arg) = rest.split_whitespace().next() else {
            continue;
        };
        let (path, selector) = parse_target(arg);
        out.push(Include {
            text: page[start..close + 2].to_string(),
            line: page[..start].matches('\n').count() + 1,
            path,
            selector,
        });
        i = close + 2;
    }
    out
}

/// Splits `PATH[:…]` into the path and what it selects, the way mdbook reads it.
pub fn parse_target(arg: &str) -> (String, Selector) {
    let Some((path, spec)) = arg.split_once(':') else {
        return (arg.to_string(), Selector::All);
    };
    let mut parts = spec.splitn(2, ':');
    let first = parts.next().unwrap_or("");
    let second = parts.next();
    let start = match first.parse::<usize>() {
        Ok(n) => Some(n),
        Err(_) if first.is_empty() => None,
        Err(_) => return (path.to_string(), Selector::Anchor(first.to_string())),
    };
    // mdbook: `N` alone is line N; `N:` and `N:junk` run to the end; `:E` starts at the top.
    let end = match second {
        None => start,
        Some(s) => s.parse::<usize>().ok(),
    };
    let selector = match (start, end) {
        (None, None) => Selector::All,
        (start, end) => Selector::Lines { start, end },
    };
    (path.to_string(), selector)
}

/// The anchor name on a line holding `marker` (`ANCHOR:` or `ANCHOR_END:`), read like mdbook's
/// `ANCHOR:\s*([\w_-]+)`, in any comment syntax.
fn anchor_on_line<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let at = line.find(marker)?;
    let rest = line[at + marker.len()..].trim_start();
    let len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(rest.len());
    (len > 0).then(|| &rest[..len])
}

/// Checks that `ANCHOR: name` … `ANCHOR_END: name` occurs exactly once in `text`, in that order,
/// with at least one non-blank line between that is not itself an anchor line.
pub fn check_anchor(text: &str, name: &str) -> Result<(), String> {
    let lines: Vec<&str> = text.lines().collect();
    let starts: Vec<usize> = (0..lines.len())
        .filter(|&i| anchor_on_line(lines[i], "ANCHOR:") == Some(name))
        .collect();
    let ends: Vec<usize> = (0..lines.len())
        .filter(|&i| anchor_on_line(lines[i], "ANCHOR_END:") == Some(name))
        .collect();
    let at = |v: &[usize]| {
        v.iter()
            .map(|i| (i + 1).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (starts.len(), ends.len()) {
        (0, 0) => return Err(format!("anchor `{name}` not found")),
        (0, _) => {
            return Err(format!(
                "anchor `{name}` has an ANCHOR_END (line {}) but no ANCHOR",
                at(&ends)
            ))
        }
        (_, 0) => {
            return Err(format!(
                "anchor `{name}` (line {}) has no ANCHOR_END",
                at(&starts)
            ))
        }
        (1, 1) => {}
        _ => {
            return Err(format!(
                "anchor `{name}` is duplicated: ANCHOR on lines {}, ANCHOR_END on lines {}",
                at(&starts),
                at(&ends)
            ))
        }
    }
    let (s, e) = (starts[0], ends[0]);
    if e < s {
        return Err(format!(
            "anchor `{name}`: ANCHOR_END (line {}) comes before ANCHOR (line {})",
            e + 1,
            s + 1
        ));
    }
    let has_text = lines[s + 1..e].iter().any(|l| {
        !l.trim().is_empty()
            && anchor_on_line(l, "ANCHOR:").is_none()
            && anchor_on_line(l, "ANCHOR_END:").is_none()
    });
    if !has_text {
        return Err(format!(
            "anchor `{name}` (lines {}–{}) is empty",
            s + 1,
            e + 1
        ));
    }
    Ok(())
}

/// Checks a line range against a file's text. For a `.snap` file the range must start on the
/// first line after the insta header, or the header would appear in the book.
pub fn check_lines(
    text: &str,
    start: Option<usize>,
    end: Option<usize>,
    is_snap: bool,
) -> Result<(), String> {
    let n = text.lines().count();
    if start == Some(0) || end == Some(0) {
        return Err("line numbers start at 1".to_string());
    }
    let first = start.unwrap_or(1);
    let last = end.unwrap_or(n);
    if first > n {
        return Err(format!(
            "starts at line {first}, but the file has {n} lines"
        ));
    }
    if last > n {
        return Err(format!("ends at line {last}, but the file has {n} lines"));
    }
    if last < first {
        return Err(format!(
            "lines {first}..{last} are empty (end before start)"
        ));
    }
    if is_snap {
        let body = snap::body_start_line(text)
            .ok_or_else(|| "not an insta snapshot: no `---` … `---` header".to_string())?;
        if start != Some(body) {
            let written = match start {
                Some(s) => format!("it starts at line {s}"),
                None => "it starts at line 1, inside the header".to_string(),
            };
            return Err(format!(
                "a snapshot include must start at line {body}, the first line after the insta header \
                 (write `PATH:{body}:`); {written}"
            ));
        }
    }
    if !text
        .lines()
        .skip(first - 1)
        .take(last + 1 - first)
        .any(|l| !l.trim().is_empty())
    {
        return Err(format!("lines {first}..{last} are blank"));
    }
    Ok(())
}

/// Checks one include of a page at `page_path`; the include's path is relative to the page's
/// directory. Returns the problem in words.
pub fn check_include(page_path: &Path, inc: &Include) -> Result<(), String> {
    let dir = page_path.parent().unwrap_or(Path::new("."));
    let target: PathBuf = dir.join(&inc.path);
    if !target.is_file() {
        return Err(format!("file `{}` does not exist", inc.path));
    }
    let text =
        std::fs::read_to_string(&target).map_err(|e| format!("cannot read `{}`: {e}", inc.path))?;
    let is_snap = inc.path.ends_with(".snap");
    match &inc.selector {
        Selector::All if is_snap => check_lines(&text, None, None, true),
        Selector::All => Ok(()),
        Selector::Anchor(name) => check_anchor(&text, name),
        Selector::Lines { start, end } => check_lines(&text, *start, *end, is_snap),
    }
    .map_err(|e| {
        if e.starts_with("file") {
            e
        } else {
            format!("{}: {e}", inc.path)
        }
    })
}

/// Checks every include in one page; returns `(line, link, problem)` for each bad one.
pub fn check_page(page_path: &Path) -> Result<Vec<(usize, String, String)>, String> {
    let page = std::fs::read_to_string(page_path)
        .map_err(|e| format!("cannot read {}: {e}", page_path.display()))?;
    Ok(find_includes(&page)
        .into_iter()
        .filter_map(|inc| {
            check_include(page_path, &inc)
                .err()
                .map(|e| (inc.line, inc.text.clone(), e))
        })
        .collect())
}

/// Checks every include of a book's Markdown sources (`BOOK/src`, every folder, the pages in
/// path order): each bad one as `src/PAGE:LINE: LINK: WHY`, and how many includes were checked.
pub fn check_book(book: &Path) -> Result<(usize, Vec<String>), String> {
    let mut pages = Vec::new();
    let mut dirs = vec![book.join("src")];
    while let Some(dir) = dirs.pop() {
        let cannot = |e: std::io::Error| format!("cannot read {}: {e}", dir.display());
        for entry in std::fs::read_dir(&dir).map_err(cannot)? {
            let path = entry.map_err(cannot)?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    let (mut count, mut problems) = (0, Vec::new());
    for page in &pages {
        let text = std::fs::read_to_string(page)
            .map_err(|e| format!("cannot read {}: {e}", page.display()))?;
        count += find_includes(&text).len();
        let shown = page
            .strip_prefix(book)
            .unwrap_or(page)
            .display()
            .to_string();
        for (line, link, why) in check_page(page)? {
            problems.push(format!("{shown}:{line}: {link}: {why}"));
        }
    }
    Ok((count, problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODE: &str = "fn a() {}\n// ANCHOR: route\nfn route() -> u32 {\n    1\n}\n// ANCHOR_END: route\n\
                        # ANCHOR: empty\n\n# ANCHOR_END: empty\n<!-- ANCHOR: dup -->\nx\n<!-- ANCHOR_END: dup -->\n\
                        // ANCHOR: dup\ny\n// ANCHOR_END: dup\n// ANCHOR: open\nz\n";

    #[test]
    fn finds_links_of_every_form() {
        let page = "text\n{{#include ../x.rs}}\n```rust\n{{#rustdoc_include ../x.rs:route}}\n```\n\
                    {{ #include a.snap:5: }} and {{#include b.rs::7}} and {{#include c.rs:3:9}}\n\
                    {{#include d.rs:4}}\n\\{{#include not/a/link.rs}}\n{{#title Hi}}\n";
        let incs = find_includes(page);
        let got: Vec<(usize, &str, Selector)> = incs
            .iter()
            .map(|i| (i.line, i.path.as_str(), i.selector.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, "../x.rs", Selector::All),
                (4, "../x.rs", Selector::Anchor("route".into())),
                (
                    6,
                    "a.snap",
                    Selector::Lines {
                        start: Some(5),
                        end: None
                    }
                ),
                (
                    6,
                    "b.rs",
                    Selector::Lines {
                        start: None,
                        end: Some(7)
                    }
                ),
                (
                    6,
                    "c.rs",
                    Selector::Lines {
                        start: Some(3),
                        end: Some(9)
                    }
                ),
                (
                    7,
                    "d.rs",
                    Selector::Lines {
                        start: Some(4),
                        end: Some(4)
                    }
                ),
            ]
        );
        assert_eq!(incs[1].text, "{{#rustdoc_include ../x.rs:route}}");
    }

    #[test]
    fn anchor_present() {
        assert_eq!(check_anchor(CODE, "route"), Ok(()));
    }

    #[test]
    fn anchor_missing() {
        let e = check_anchor(CODE, "nope").unwrap_err();
        assert!(e.contains("`nope` not found"), "{e}");
        let e = check_anchor(CODE, "open").unwrap_err();
        assert!(e.contains("no ANCHOR_END"), "{e}");
    }

    #[test]
    fn anchor_empty() {
        let e = check_anchor(CODE, "empty").unwrap_err();
        assert!(e.contains("is empty"), "{e}");
    }

    #[test]
    fn anchor_duplicated() {
        let e = check_anchor(CODE, "dup").unwrap_err();
        assert!(e.contains("duplicated") && e.contains("10, 13"), "{e}");
    }

    #[test]
    fn anchor_names_are_whole_words() {
        // `route_2` must not count as an occurrence of `route`.
        let text = "// ANCHOR: route_2\na\n// ANCHOR_END: route_2\n// ANCHOR: route\nb\n// ANCHOR_END: route\n";
        assert_eq!(check_anchor(text, "route"), Ok(()));
        assert_eq!(check_anchor(text, "route_2"), Ok(()));
    }

    #[test]
    fn line_ranges() {
        let text = "1\n2\n3\n\n\n";
        assert_eq!(check_lines(text, Some(1), Some(3), false), Ok(()));
        assert_eq!(check_lines(text, Some(2), None, false), Ok(()));
        assert_eq!(check_lines(text, None, Some(2), false), Ok(()));
        assert!(check_lines(text, Some(7), None, false)
            .unwrap_err()
            .contains("has 5 lines"));
        assert!(check_lines(text, Some(2), Some(9), false)
            .unwrap_err()
            .contains("ends at line 9"));
        assert!(check_lines(text, Some(3), Some(2), false)
            .unwrap_err()
            .contains("empty"));
        assert!(check_lines(text, Some(4), Some(5), false)
            .unwrap_err()
            .contains("blank"));
        assert!(check_lines(text, Some(0), Some(2), false)
            .unwrap_err()
            .contains("start at 1"));
        // `PATH:N` is parsed as the one line N.
        assert_eq!(
            parse_target("f.rs:3").1,
            Selector::Lines {
                start: Some(3),
                end: Some(3)
            }
        );
        assert_eq!(parse_target("f.rs::").1, Selector::All);
        assert_eq!(parse_target("f.rs:main").1, Selector::Anchor("main".into()));
    }

    #[test]
    fn snap_includes_start_after_the_header() {
        let snap =
            "---\nsource: tests/ch01_example.rs\nexpression: stdout\n---\nrouter: ok\nids: 3 1\n";
        assert_eq!(check_lines(snap, Some(5), None, true), Ok(()));
        let e = check_lines(snap, Some(4), None, true).unwrap_err();
        assert!(e.contains("must start at line 5"), "{e}");
        let e = check_lines(snap, None, None, true).unwrap_err();
        assert!(e.contains("PATH:5:"), "{e}");
        let e = check_lines("no header\n", Some(1), None, true).unwrap_err();
        assert!(e.contains("not an insta snapshot"), "{e}");
    }

    #[test]
    fn checks_files_relative_to_the_page() {
        let dir = std::env::temp_dir().join(format!("moe-tools-inc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("code.rs"), CODE).unwrap();
        let page = dir.join("src/page.md");
        std::fs::write(&page, "{{#include ../code.rs:route}}\n{{#include ../code.rs:nope}}\n{{#include ../gone.rs}}\n").unwrap();
        let bad = check_page(&page).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert_eq!(bad[0].0, 2);
        assert!(
            bad[0].2.contains("../code.rs: anchor `nope` not found"),
            "{:?}",
            bad[0]
        );
        assert_eq!(bad[1].0, 3);
        assert!(
            bad[1].2.contains("`../gone.rs` does not exist"),
            "{:?}",
            bad[1]
        );
    }

    #[test]
    fn a_book_s_bad_includes_are_found_in_every_folder() {
        let dir = std::env::temp_dir().join(format!("moe-includes-{}", std::process::id()));
        let src = dir.join("src");
        let _ = std::fs::remove_dir_all(&dir); // a run killed before its cleanup
        std::fs::create_dir_all(src.join("figures")).unwrap();
        std::fs::write(
            src.join("figures/facts.md"),
            "<!-- ANCHOR: a -->\n1\n<!-- ANCHOR_END: a -->\n",
        )
        .unwrap();
        std::fs::write(
            src.join("figures/nested.md"),
            "{{#include facts.md:gone}}\n",
        )
        .unwrap();
        std::fs::write(
            src.join("page.md"),
            "x\n{{#include figures/facts.md:a}}\n{{#include figures/facts.md:b}}\n",
        )
        .unwrap();
        let got = check_book(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let (count, problems) = got.unwrap();
        assert_eq!(count, 3);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("src/figures/nested.md:1: {{#include facts.md:gone}}: "),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("src/page.md:3: {{#include figures/facts.md:b}}: "),
            "{problems:?}"
        );
        assert!(problems[1].contains("anchor `b` not found"), "{problems:?}");
    }
}
