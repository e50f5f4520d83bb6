//! Renders the book's pages with headless Chromium, one PNG per page, so that a person can see
//! each page as a reader does: tables that run off the column, figures too small to read,
//! listings cut short, an include shown as raw text.
//!
//! The whole page fits in one PNG without an image library. Chromium's `--screenshot` captures
//! the window, so the window is made as tall as the page: a first run loads a copy of the page
//! with a small script that writes the document's height into an attribute of `<html>`, and
//! prints the DOM (`--dump-dom`); a second run shoots the page itself (not the copy) in a window
//! that tall. `--hide-scrollbars` keeps the layout width the same in both runs, so the text
//! wraps the same way and the height measured is the height shot.

use super::links::{percent_decode, resolve, split_link, Link, Site};
use super::{find_program, html, tail, Error};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Names Chromium goes by, tried in this order on `PATH`.
pub const CHROMIUM_NAMES: [&str; 6] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "headless_shell",
];

/// Finds Chromium: `$CHROMIUM` if set, else one of [`CHROMIUM_NAMES`] on `PATH`.
pub fn find_chromium() -> Result<PathBuf, Error> {
    find_program("CHROMIUM", &CHROMIUM_NAMES, &[])?.ok_or_else(|| Error::Missing {
        program: "chromium".to_string(),
        hint: "install it (Debian: `apt-get install chromium`) or set CHROMIUM to its path"
            .to_string(),
    })
}

/// Pages mdbook writes that are not chapters: the whole book on one page, the not-found page,
/// the sidebar for readers without JavaScript, and the first chapter again as the index.
const NOT_CHAPTERS: [&str; 4] = ["print.html", "404.html", "toc.html", "index.html"];

/// The pages to render, in the book's order: those the table of contents (`toc.html`) links,
/// then any other page except mdbook's own (`NOT_CHAPTERS`), by name.
pub fn pages_to_render(site: &Site) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    if let Some(toc) = site.pages.get("toc.html") {
        for raw in &toc.links {
            let Link::Internal { path, .. } = split_link(raw) else {
                continue;
            };
            if path.is_empty() {
                continue;
            }
            if let Ok(t) = resolve("toc.html", &percent_decode(&path), "/") {
                if site.pages.contains_key(&t) && !order.contains(&t) {
                    order.push(t);
                }
            }
        }
    }
    for name in site.pages.keys() {
        if !order.contains(name) && !NOT_CHAPTERS.contains(&name.as_str()) {
            order.push(name.clone());
        }
    }
    order
}

/// The attributes of `<html>` the measuring script writes: the page's height, and how many
/// code blocks and tables are wider than the text column.
const HEIGHT_ATTR: &str = "data-bookcheck-height";
const WIDE_ATTR: &str = "data-bookcheck-wide";

/// The page with a script that, once everything (fonts and figures included) has loaded,
/// records the document's height and counts the visible code blocks and tables a reader has to
/// scroll sideways (a screenshot shows them cut at the right edge; one inside a closed
/// `<details>` is not counted); it goes before the last `</body>`.
pub fn with_measure_script(page: &str) -> String {
    let script = format!(
        "<script>window.addEventListener('load', function () {{ \
         var d = document.documentElement; \
         var wide = function (sel) {{ var n = 0; document.querySelectorAll(sel).forEach(\
         function (e) {{ if (e.scrollWidth > e.clientWidth + 1 \
         && (!e.checkVisibility || e.checkVisibility())) n++; }}); return n; }}; \
         d.setAttribute('{WIDE_ATTR}', wide('pre > code') + ' ' + wide('.table-wrapper')); \
         d.setAttribute('{HEIGHT_ATTR}', String(d.scrollHeight)); }});</script>"
    );
    let at = page
        .to_ascii_lowercase()
        .rfind("</body>")
        .unwrap_or(page.len());
    format!("{}{script}{}", &page[..at], &page[at..])
}

/// What the measuring script found on a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure {
    /// CSS pixels from the top of the page to the bottom of its content.
    pub height: u32,
    /// Code blocks wider than the column.
    pub wide_code: u32,
    /// Tables wider than the column.
    pub wide_tables: u32,
}

/// What the measuring script recorded, read from the DOM Chromium printed.
pub fn read_measure(dom: &str) -> Option<Measure> {
    let tag = html::scan(dom).into_iter().find(|t| t.name == "html")?;
    let height = tag.attr(HEIGHT_ATTR)?.trim().parse().ok()?;
    let mut wide = tag
        .attr(WIDE_ATTR)
        .unwrap_or("")
        .split_whitespace()
        .map(|n| n.parse().unwrap_or(0));
    Some(Measure {
        height,
        wide_code: wide.next().unwrap_or(0),
        wide_tables: wide.next().unwrap_or(0),
    })
}

/// A PNG's width and height, from its header.
pub fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != SIGNATURE || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let be =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    Some((be(16), be(20)))
}

/// A `file://` URL for an absolute path, with the bytes a URL cannot hold percent-encoded.
pub fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for &b in path.to_string_lossy().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// Flags for every run. The network ones keep a browser with no network from retrying
/// connections (component updates, sync, QUIC) for the whole run; `--force-device-scale-factor`
/// makes a CSS pixel one PNG pixel; `--force-gpu-mem-available-mb` raises the tile memory a
/// tall page needs, below which Chromium leaves the bottom of the page blank; shared memory in
/// containers is often too small for a tall page, hence `--disable-dev-shm-usage`.
const FLAGS: [&str; 16] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--force-gpu-mem-available-mb=4096",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
];

/// What Chromium prints when it could not draw all of a tall page.
const TILE_WARNING: &str = "tile memory limits exceeded";

/// Headless Chromium, one fresh profile per run, all under a working directory.
pub struct Chromium {
    exe: PathBuf,
    work: PathBuf,
    timeout: Duration,
    runs: std::cell::Cell<usize>,
}

/// What one Chromium run left: its standard output and error.
struct RunOutput {
    stdout: String,
    stderr: String,
}

impl Chromium {
    /// `work` must be an empty directory that outlives the runs (a [`super::TempDir`]).
    pub fn new(exe: PathBuf, work: PathBuf, timeout: Duration) -> Chromium {
        Chromium {
            exe,
            work,
            timeout,
            runs: std::cell::Cell::new(0),
        }
    }

    /// Runs Chromium on `url` with `args`, killing it after the timeout.
    fn run(&self, args: &[String], url: &str, what: &str) -> Result<RunOutput, Error> {
        let n = self.runs.get();
        self.runs.set(n + 1);
        let profile = self.work.join(format!("profile-{n}"));
        let out_path = self.work.join(format!("stdout-{n}.txt"));
        let err_path = self.work.join(format!("stderr-{n}.txt"));
        let file = |p: &Path| {
            std::fs::File::create(p)
                .map_err(|e| Error::Failed(format!("cannot create {}: {e}", p.display())))
        };
        let mut child = Command::new(&self.exe)
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(file(&out_path)?)
            .stderr(file(&err_path)?)
            .spawn()
            .map_err(|e| Error::Failed(format!("cannot run {}: {e}", self.exe.display())))?;
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if start.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Failed(format!(
                        "Chromium did not finish {what} within {}s",
                        self.timeout.as_secs()
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(Error::Failed(format!("waiting for Chromium: {e}"))),
            }
        };
        let read =
            |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
        let output = RunOutput {
            stdout: read(&out_path),
            stderr: read(&err_path),
        };
        let _ = std::fs::remove_dir_all(&profile);
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        if !status.success() {
            return Err(Error::Failed(format!(
                "Chromium failed {what} (exit {}):\n{}",
                status.code().unwrap_or(-1),
                tail(&quiet(&output.stderr), 12)
            )));
        }
        Ok(output)
    }

    /// Measures `page` (a file of a built book) in a window `width` wide.
    pub fn measure(&self, page: &Path, width: u32) -> Result<Measure, Error> {
        let text = std::fs::read_to_string(page)
            .map_err(|e| Error::Failed(format!("cannot read {}: {e}", page.display())))?;
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        let copy = page.with_file_name(format!(".bookcheck-measure-{name}"));
        std::fs::write(&copy, with_measure_script(&text))
            .map_err(|e| Error::Failed(format!("cannot write {}: {e}", copy.display())))?;
        let what = format!("measuring {name}");
        let out = self.run(
            &[
                format!("--window-size={width},800"),
                "--dump-dom".to_string(),
            ],
            &file_url(&copy),
            &what,
        );
        let _ = std::fs::remove_file(&copy);
        let out = out?;
        read_measure(&out.stdout).ok_or_else(|| {
            Error::Failed(format!(
                "Chromium did not report the height of {name} (did the page load?):\n{}",
                tail(&quiet(&out.stderr), 12)
            ))
        })
    }

    /// Shoots `page` in a `width` × `height` window into `png`; returns the PNG's size.
    pub fn screenshot(
        &self,
        page: &Path,
        width: u32,
        height: u32,
        png: &Path,
    ) -> Result<(u32, u32), Error> {
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        let what = format!("shooting {name}");
        let _ = std::fs::remove_file(png);
        let out = self.run(
            &[
                format!("--window-size={width},{height}"),
                format!("--screenshot={}", png.display()),
            ],
            &file_url(page),
            &what,
        )?;
        if out.stderr.contains(TILE_WARNING) {
            return Err(Error::Failed(format!(
                "Chromium ran out of tile memory {what} at {width}×{height}: the bottom of the \
                 page would be blank; try a smaller --max-height"
            )));
        }
        let bytes = std::fs::read(png).map_err(|e| {
            Error::Failed(format!(
                "Chromium wrote no screenshot of {name} ({}):\n{}",
                e,
                tail(&quiet(&out.stderr), 12)
            ))
        })?;
        let size = png_size(&bytes)
            .ok_or_else(|| Error::Failed(format!("{} is not a PNG", png.display())))?;
        if size != (width, height) {
            return Err(Error::Failed(format!(
                "the screenshot of {name} is {}×{}, not the {width}×{height} asked for",
                size.0, size.1
            )));
        }
        Ok(size)
    }
}

/// Chromium's stderr without the noise every headless run prints in a container (no D-Bus,
/// the Debian wrapper's memory probe), so that an error shows what went wrong.
fn quiet(stderr: &str) -> String {
    let kept: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("dbus") && !l.contains("unexpected operator"))
        .collect();
    if kept.is_empty() {
        "(nothing on stderr)".to_string()
    } else {
        kept.join("\n")
    }
}

/// One rendered page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    /// The page's path in the book (`ch01-router.html`).
    pub page: String,
    /// Where its PNG was written.
    pub png: PathBuf,
    /// The PNG's size in pixels, read back from the file.
    pub width: u32,
    pub height: u32,
    /// The page's full height when it was taller than the shot (the PNG stops at `height`).
    pub clipped_from: Option<u32>,
    /// Code blocks and tables cut at the right edge in the shot (a reader scrolls them).
    pub wide_code: u32,
    pub wide_tables: u32,
}

/// Where the PNG of a page goes: `ch01-router.html` → `OUT/ch01-router.png`.
pub fn png_path(out_dir: &Path, page: &str) -> PathBuf {
    let stem = page
        .strip_suffix(".html")
        .or_else(|| page.strip_suffix(".htm"))
        .unwrap_or(page);
    out_dir.join(format!("{stem}.png"))
}

/// Renders one page of the built book at `site_dir` into `out_dir`.
pub fn render_page(
    chromium: &Chromium,
    site_dir: &Path,
    page: &str,
    out_dir: &Path,
    width: u32,
    max_height: u32,
) -> Result<Shot, Error> {
    let file = site_dir.join(page);
    let measure = chromium.measure(&file, width)?;
    let full = measure.height.max(1);
    let height = full.min(max_height);
    let png = png_path(out_dir, page);
    if let Some(dir) = png.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    let (w, h) = chromium.screenshot(&file, width, height, &png)?;
    Ok(Shot {
        page: page.to_string(),
        png,
        width: w,
        height: h,
        clipped_from: (full > height).then_some(full),
        wide_code: measure.wide_code,
        wide_tables: measure.wide_tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_table_of_contents() {
        let mut site = Site::default();
        site.add_page(
            "toc.html",
            "<a href=\"intro.html\">1</a><a href=\"part/b.html#x\">2</a><a href=\"a.html\">3</a>\
             <a href=\"intro.html\">again</a><a href=\"https://example.com\"></a>",
        );
        for p in [
            "a.html",
            "intro.html",
            "part/b.html",
            "print.html",
            "404.html",
            "index.html",
            "orphan.html",
        ] {
            site.add_page(p, "");
        }
        assert_eq!(
            pages_to_render(&site),
            ["intro.html", "part/b.html", "a.html", "orphan.html"]
        );
    }

    #[test]
    fn without_a_toc_every_chapter_page_by_name() {
        let mut site = Site::default();
        for p in ["b.html", "a.html", "print.html", "toc.html"] {
            site.add_page(p, "");
        }
        assert_eq!(pages_to_render(&site), ["a.html", "b.html"]);
    }

    #[test]
    fn measure_script_goes_before_the_last_body_end() {
        let page = with_measure_script("<html><body><p>x</p></BODY></html>");
        assert!(page.starts_with("<html><body><p>x</p><script>"), "{page}");
        assert!(page.ends_with("</script></BODY></html>"), "{page}");
        assert!(with_measure_script("<p>no body").starts_with("<p>no body<script>"));
    }

    #[test]
    fn reads_the_measure_from_the_dom() {
        let dom = "<html lang=\"en\" class=\"light\" data-bookcheck-wide=\"21 1\" \
                   data-bookcheck-height=\"28425\"><head>";
        let m = Measure {
            height: 28425,
            wide_code: 21,
            wide_tables: 1,
        };
        assert_eq!(read_measure(dom), Some(m));
        let no_wide = "<html data-bookcheck-height=\"900\">";
        assert_eq!(
            read_measure(no_wide).map(|m| (m.height, m.wide_code)),
            Some((900, 0))
        );
        assert_eq!(read_measure("<html lang=en><body>"), None);
        assert_eq!(read_measure("<html data-bookcheck-height=\"tall\">"), None);
    }

    #[test]
    fn png_size_from_the_header() {
        let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        png.extend_from_slice(&1280u32.to_be_bytes());
        png.extend_from_slice(&28425u32.to_be_bytes());
        assert_eq!(png_size(&png), Some((1280, 28425)));
        assert_eq!(png_size(&png[..20]), None);
        assert_eq!(png_size(b"GIF89a.................."), None);
    }

    #[test]
    fn file_urls_are_percent_encoded() {
        assert_eq!(
            file_url(Path::new("/tmp/my book/a#b?.html")),
            "file:///tmp/my%20book/a%23b%3F.html"
        );
        assert_eq!(file_url(Path::new("/tmp/é")), "file:///tmp/%C3%A9");
    }

    #[test]
    fn png_paths_keep_subdirectories() {
        let out = Path::new("/out");
        assert_eq!(
            png_path(out, "ch01-router.html"),
            Path::new("/out/ch01-router.png")
        );
        assert_eq!(png_path(out, "part/a.htm"), Path::new("/out/part/a.png"));
    }

    #[test]
    fn quiet_drops_container_noise() {
        let err = "/usr/bin/chromium: 9: [: 1: unexpected operator\n\
                   [1:2:ERROR:dbus/bus.cc:405] Failed to connect to the bus\n\
                   [1:2:ERROR:other] real trouble";
        assert_eq!(quiet(err), "[1:2:ERROR:other] real trouble");
        assert_eq!(quiet(""), "(nothing on stderr)");
    }
}
