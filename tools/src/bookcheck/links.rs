//! The internal links of a built book: which links stay inside it, which file each one reaches,
//! and whether that file and the anchor it names exist. mdbook checks neither: a link to a
//! renamed page becomes a 404 and a link to a renamed heading silently lands at the top of the
//! page, so only the generated HTML can tell.
//!
//! Paths inside the book are `/`-separated and relative to the book's root (`ch01-router.html`,
//! `figures/ch01-router.svg`), whatever the platform.

use super::html;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// What a link points to, once its scheme has been looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// Has a scheme (`https:`, `mailto:`, `javascript:`, …) or is protocol-relative (`//host`):
    /// not this book's business.
    External,
    /// A path in the book (empty for "this page") and the fragment, both still percent-encoded;
    /// a query string is dropped, since a static file ignores it.
    Internal {
        path: String,
        fragment: Option<String>,
    },
}

/// Sorts a raw `href`/`src` value into external and internal, splitting off query and fragment.
pub fn split_link(raw: &str) -> Link {
    let url = raw.trim_matches(|c: char| c.is_ascii_whitespace());
    if url.starts_with("//") || has_scheme(url) {
        return Link::External;
    }
    let (before, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f.to_string())),
        None => (url, None),
    };
    let path = before.split_once('?').map_or(before, |(p, _)| p);
    Link::Internal {
        path: path.to_string(),
        fragment,
    }
}

/// `letter (letter | digit | + | - | .)* :` before any `/`, `?` or `#`.
fn has_scheme(url: &str) -> bool {
    let Some(colon) = url.find(':') else {
        return false;
    };
    let scheme = &url[..colon];
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Decodes `%XX` escapes (as UTF-8, lossily); a `%` not followed by two hex digits stays.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Resolves a decoded, non-empty link path against the directory of `from` (a page's path in
/// the book). A path starting with `/` is taken from the book's root when it starts with
/// `site_prefix` (the book's `site-url`, `/` by default). The result keeps a trailing `/` for a
/// directory; a path that climbs above the root is an error.
pub fn resolve(from: &str, path: &str, site_prefix: &str) -> Result<String, String> {
    let (mut parts, rest): (Vec<&str>, &str) = if let Some(abs) = path.strip_prefix('/') {
        let prefix = site_prefix.trim_matches('/');
        let rest = if prefix.is_empty() {
            abs
        } else if abs == prefix {
            ""
        } else {
            abs.strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('/'))
                .ok_or_else(|| {
                    format!("an absolute path outside the book's site-url `{site_prefix}`")
                })?
        };
        (Vec::new(), rest)
    } else {
        let dir: Vec<&str> = match from.rfind('/') {
            Some(slash) => from[..slash].split('/').collect(),
            None => Vec::new(),
        };
        (dir, path)
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let is_dir = matches!(segments.last(), Some(&"") | Some(&".") | Some(&".."));
    for seg in segments {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("goes above the book's root".to_string());
                }
            }
            s => parts.push(s),
        }
    }
    let mut out = parts.join("/");
    if is_dir && !out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// What the link checker needs of one page.
#[derive(Debug, Default, Clone)]
pub struct Page {
    /// Every `href` and `src` value, decoded from HTML but not from percent-encoding.
    pub links: Vec<String>,
    /// Every `id`, and every `name` of an `<a>`: what a `#fragment` may name.
    pub anchors: BTreeSet<String>,
    /// `<base href>`, when the page has one (mdbook's 404 page does, set to its `site-url`).
    pub base: Option<String>,
}

impl Page {
    /// Reads a page's links and anchors.
    pub fn parse(text: &str) -> Page {
        let mut page = Page::default();
        for tag in html::scan(text) {
            for attr in ["href", "src"] {
                if let Some(v) = tag.attr(attr) {
                    if tag.name == "base" && attr == "href" {
                        page.base.get_or_insert_with(|| v.to_string());
                    } else {
                        page.links.push(v.to_string());
                    }
                }
            }
            if let Some(id) = tag.attr("id") {
                page.anchors.insert(id.to_string());
            }
            if tag.name == "a" {
                if let Some(name) = tag.attr("name") {
                    page.anchors.insert(name.to_string());
                }
            }
        }
        page
    }

    /// Whether `#fragment` (still percent-encoded) reaches something on this page. Like a
    /// browser: the fragment as written, then decoded; empty and `top` mean the top of the page.
    pub fn has_anchor(&self, fragment: &str) -> bool {
        fragment.is_empty()
            || fragment.eq_ignore_ascii_case("top")
            || self.anchors.contains(fragment)
            || self.anchors.contains(&percent_decode(fragment))
    }
}

/// One broken link, printed as `page.html: link "target#frag": why`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub page: String,
    pub link: String,
    pub why: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: link \"{}\": {}", self.page, self.link, self.why)
    }
}

/// What a check looked at, for the summary line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// HTML files read, mdbook's own pages (print, 404, toc, index) included.
    pub pages: usize,
    /// Links checked: relative, root-absolute and fragment-only ones.
    pub internal: usize,
    /// Links with a scheme, left alone (the check runs offline).
    pub external: usize,
    /// Distinct files the internal links reach.
    pub targets: usize,
}

/// A built book: its HTML pages, parsed, and the paths of all its files (pages included).
#[derive(Debug, Default)]
pub struct Site {
    pub pages: BTreeMap<String, Page>,
    pub files: BTreeSet<String>,
}

impl Site {
    /// Reads a built book from disk; every `.html`/`.htm` file is a page.
    pub fn from_dir(root: &Path) -> Result<Site, String> {
        let mut site = Site::default();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
            for entry in entries {
                let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
                let path = entry.path();
                // `file_type` does not follow symbolic links, so a link loop cannot recurse.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(path);
                    continue;
                }
                let rel = path
                    .strip_prefix(root)
                    .map_err(|e| e.to_string())?
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                if rel.ends_with(".html") || rel.ends_with(".htm") {
                    let text = std::fs::read(&path)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    site.add_page(&rel, &String::from_utf8_lossy(&text));
                } else {
                    site.files.insert(rel);
                }
            }
        }
        Ok(site)
    }

    /// Adds a page given as text (how the tests build a book in memory).
    pub fn add_page(&mut self, rel: &str, text: &str) {
        self.files.insert(rel.to_string());
        self.pages.insert(rel.to_string(), Page::parse(text));
    }

    fn is_dir(&self, rel: &str) -> bool {
        let prefix = format!("{}/", rel.trim_end_matches('/'));
        rel.is_empty()
            || self
                .files
                .range(prefix.clone()..)
                .next()
                .is_some_and(|f| f.starts_with(&prefix))
    }

    /// The file a link reaches (`index.html` for a directory), or why it reaches none.
    fn target(&self, from: &str, page: &Page, path: &str) -> Result<String, String> {
        if path.is_empty() {
            return Ok(from.to_string());
        }
        let decoded = percent_decode(path);
        // A root-absolute `<base>` (mdbook's 404 page) makes relative links start at the root.
        let base = page.base.as_deref().filter(|b| b.starts_with('/'));
        let site_prefix = base.unwrap_or("/");
        let from_dir = if base.is_some() && !decoded.starts_with('/') {
            "index.html"
        } else {
            from
        };
        let mut target = resolve(from_dir, &decoded, site_prefix)?;
        if target.is_empty() || target.ends_with('/') || self.is_dir(&target) {
            target = format!("{}/index.html", target.trim_end_matches('/'))
                .trim_start_matches('/')
                .to_string();
        }
        if self.files.contains(&target) {
            Ok(target)
        } else if decoded.ends_with(".md") {
            Err(format!("`{target}` does not exist (a link to a Markdown file mdbook did not turn into a page)"))
        } else {
            Err(format!("`{target}` does not exist in the built book"))
        }
    }

    /// Checks every internal link of every page. A fragment-only link (`#x`) names an anchor
    /// of its own page even under a `<base>`: that is what mdbook means by it on its 404 page.
    pub fn check(&self) -> (Vec<Problem>, Stats) {
        let mut problems: Vec<Problem> = Vec::new();
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut stats = Stats {
            pages: self.pages.len(),
            ..Stats::default()
        };
        let mut targets = BTreeSet::new();
        for (name, page) in &self.pages {
            for raw in &page.links {
                let Link::Internal { path, fragment } = split_link(raw) else {
                    stats.external += 1;
                    continue;
                };
                stats.internal += 1;
                let why = match self.target(name, page, &path) {
                    Err(why) => Some(why),
                    Ok(target) => {
                        targets.insert(target.clone());
                        let frag = fragment.as_deref().unwrap_or("");
                        match self.pages.get(&target) {
                            Some(t) if !t.has_anchor(frag) => Some(format!(
                                "no element with id \"{}\" in `{target}`",
                                percent_decode(frag)
                            )),
                            _ => None,
                        }
                    }
                };
                if let Some(why) = why {
                    let key = (name.clone(), raw.clone());
                    let n = counts.entry(key).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        problems.push(Problem {
                            page: name.clone(),
                            link: raw.clone(),
                            why,
                        });
                    }
                }
            }
        }
        for p in &mut problems {
            let n = counts[&(p.page.clone(), p.link.clone())];
            if n > 1 {
                p.why.push_str(&format!(" ({n} links)"));
            }
        }
        stats.targets = targets.len();
        (problems, stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(pages: &[(&str, &str)], files: &[&str]) -> Site {
        let mut s = Site::default();
        for (name, text) in pages {
            s.add_page(name, text);
        }
        s.files.extend(files.iter().map(|f| f.to_string()));
        s
    }

    fn whys(s: &Site) -> Vec<String> {
        s.check().0.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn sorts_external_from_internal() {
        for ext in [
            "https://example.com/a#b",
            "http://x",
            "mailto:me@example.com",
            "javascript:void(0)",
            "//cdn.example.com/x.js",
            "data:image/png;base64,AAAA",
        ] {
            assert_eq!(split_link(ext), Link::External, "{ext}");
        }
        assert_eq!(
            split_link(" a/b.html?x=1:2#frag "),
            Link::Internal {
                path: "a/b.html".into(),
                fragment: Some("frag".into())
            }
        );
        assert_eq!(
            split_link("#only"),
            Link::Internal {
                path: "".into(),
                fragment: Some("only".into())
            }
        );
        // A colon after a slash is part of a path, not a scheme.
        assert_eq!(
            split_link("dir/a:b.html"),
            Link::Internal {
                path: "dir/a:b.html".into(),
                fragment: None
            }
        );
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("my%20page.html"), "my page.html");
        assert_eq!(percent_decode("caf%C3%A9"), "café");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%2"), "%zz%2");
        assert_eq!(percent_decode("%41%"), "A%");
    }

    #[test]
    fn resolves_relative_and_absolute_paths() {
        assert_eq!(
            resolve("a/b/page.html", "../c.html", "/"),
            Ok("a/c.html".into())
        );
        assert_eq!(
            resolve("a/b/page.html", "../../c.html", "/"),
            Ok("c.html".into())
        );
        assert_eq!(
            resolve("a/page.html", "./x/./y.png", "/"),
            Ok("a/x/y.png".into())
        );
        assert_eq!(resolve("page.html", "sub/", "/"), Ok("sub/".into()));
        assert_eq!(resolve("a/page.html", "..", "/"), Ok("".into()));
        assert_eq!(resolve("a/page.html", "/x.html", "/"), Ok("x.html".into()));
        assert_eq!(
            resolve("a/page.html", "/book/x.html", "/book/"),
            Ok("x.html".into())
        );
        assert!(resolve("a/page.html", "/other/x.html", "/book/")
            .unwrap_err()
            .contains("site-url"));
        assert!(resolve("page.html", "../../README.md", "/")
            .unwrap_err()
            .contains("above the book's root"));
    }

    #[test]
    fn good_links_pass() {
        let s = site(
            &[
                (
                    "intro.html",
                    "<a href=\"part/ch1.html#the-cut\">x</a><a href='#top'></a><a href=\"#\"></a>\
                     <a name=\"sec\"></a>\
                     <img src=\"figures/my%20fig.svg\"><a href=\"part/\">dir</a>\
                     <a href=\"https://example.com/missing.html\"></a>",
                ),
                (
                    "part/ch1.html",
                    "<h2 id=\"the-cut\">Cut</h2><a href=\"../intro.html?x=1#sec\"></a>\
                     <a href=\"../print.html#the-cut\"></a>",
                ),
                ("part/index.html", "<p>index</p>"),
                ("print.html", "<h2 id=\"the-cut\"></h2>"),
            ],
            &["figures/my fig.svg"],
        );
        let (problems, stats) = s.check();
        assert_eq!(problems, vec![]);
        assert_eq!(stats.pages, 4);
        assert_eq!(stats.external, 1);
        assert_eq!(stats.internal, 7);
        // intro, ch1, the figure, part/index.html and print.html.
        assert_eq!(stats.targets, 5);
    }

    #[test]
    fn broken_files_and_anchors_are_reported() {
        let s = site(
            &[
                (
                    "a/page.html",
                    "<a href=\"../missing.html\"></a><a href=\"../b.html#gone\"></a>\
                     <a href=\"../b.html#gone\"></a><a href=\"#here\"></a><a href=\"#nowhere\"></a>\
                     <a href=\"../../up.html\"></a><a href=\"notes.md\"></a>\
                     <a href=\"../print.html#ch-2\"></a><a href=\"../b.html#caf%C3%A9\"></a>\
                     <img src=\"../img%20x.png\"><p id=here></p>",
                ),
                ("b.html", "<h1 id=\"café\">Café</h1><meta name=\"gone\">"),
                ("print.html", "<h1 id=\"ch-1\"></h1>"),
            ],
            &[],
        );
        assert_eq!(
            whys(&s),
            [
                "a/page.html: link \"../missing.html\": `missing.html` does not exist in the built book",
                "a/page.html: link \"../b.html#gone\": no element with id \"gone\" in `b.html` (2 links)",
                "a/page.html: link \"#nowhere\": no element with id \"nowhere\" in `a/page.html`",
                "a/page.html: link \"../../up.html\": goes above the book's root",
                "a/page.html: link \"notes.md\": `a/notes.md` does not exist (a link to a Markdown file mdbook did not turn into a page)",
                "a/page.html: link \"../print.html#ch-2\": no element with id \"ch-2\" in `print.html`",
                "a/page.html: link \"../img%20x.png\": `img x.png` does not exist in the built book",
            ]
        );
    }

    #[test]
    fn a_root_base_makes_relative_links_start_at_the_root() {
        // mdbook's 404.html: `<base href="/">`, links written from the root, and its own heading
        // linked by a bare fragment.
        let s = site(
            &[
                (
                    "404.html",
                    "<base href=\"/\"><link href=\"css/x.css\"><a href=\"/\"></a>\
                     <h1 id=\"not-found\"><a href=\"#not-found\"></a></h1><a href=\"ch.html\"></a>",
                ),
                ("index.html", ""),
                ("ch.html", ""),
            ],
            &["css/x.css"],
        );
        assert_eq!(whys(&s), Vec::<String>::new());
    }

    #[test]
    fn reads_a_built_book_from_a_temporary_directory() {
        let dir = std::env::temp_dir().join(format!("moe-bookcheck-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub dir")).unwrap();
        std::fs::write(
            dir.join("index.html"),
            "<a href=\"sub%20dir/p.html#x\"></a><a href=\"sub%20dir/p.html#y\"></a>",
        )
        .unwrap();
        std::fs::write(
            dir.join("sub dir/p.html"),
            "<b id=x></b><img src=\"../f.svg\">",
        )
        .unwrap();
        std::fs::write(dir.join("f.svg"), "<svg/>").unwrap();
        let site = Site::from_dir(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let site = site.unwrap();
        assert_eq!(
            site.files.iter().collect::<Vec<_>>(),
            ["f.svg", "index.html", "sub dir/p.html"]
        );
        assert_eq!(
            whys(&site),
            ["index.html: link \"sub%20dir/p.html#y\": no element with id \"y\" in `sub dir/p.html`"]
        );
    }
}
