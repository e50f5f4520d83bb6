//! The chapter figures as hand-written SVG: one panel per shape, time per call against rows,
//! log-log, with the floor beside every series. No plotting crate: the file is small, readable
//! and diffable, and `tools/steps check` can regenerate it byte for byte.

use crate::bench_row::BenchRow as Row;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Implementations in the order they are drawn and listed; others follow in CSV order.
pub const IMPL_ORDER: [&str; 3] = ["chain", "torch_5line", "floor_probe"];

/// Shapes in the order they first appear.
pub fn shapes<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<String> {
    first_seen(rows.into_iter().map(|r| r.shape.as_str()))
}

/// Names in the order they first appear, each once.
pub fn first_seen<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for n in names {
        if !v.iter().any(|x| x == n) {
            v.push(n.to_string());
        }
    }
    v
}

/// Implementations: the known ones in their fixed order, then any others in CSV order.
pub fn impls(rows: &[Row]) -> Vec<String> {
    let mut v: Vec<String> = IMPL_ORDER
        .iter()
        .filter(|i| rows.iter().any(|r| r.imp == **i))
        .map(|s| s.to_string())
        .collect();
    for r in rows {
        if !v.contains(&r.imp) {
            v.push(r.imp.clone());
        }
    }
    v
}

/// A shape name spelled out: `glm_h4096_e288_k8` → `GLM: hidden 4096, 288 experts, k = 8, sigmoid + bias`.
pub fn describe_shape(shape: &str) -> String {
    let mut parts = shape.split('_');
    let model = parts.next().unwrap_or(shape);
    let mut bits = Vec::new();
    for p in parts {
        let num = |pre: &str| {
            p.strip_prefix(pre)
                .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        };
        if let Some(h) = num("h") {
            bits.push(format!("hidden {h}"));
        } else if let Some(e) = num("e") {
            bits.push(format!("{e} experts"));
        } else if let Some(k) = num("k") {
            bits.push(format!("k = {k}"));
        } else {
            bits.push(p.to_string());
        }
    }
    let lower = model.to_ascii_lowercase();
    let (name, scoring) = if lower.starts_with("glm") {
        ("GLM".to_string(), Some("sigmoid + bias"))
    } else if lower.starts_with("deepseek") || lower.starts_with("dsv") {
        ("DeepSeek".to_string(), Some("sigmoid + bias"))
    } else if lower.starts_with("kimi") {
        ("Kimi".to_string(), Some("sigmoid + bias"))
    } else if lower.starts_with("qwen") {
        (format!("Qwen{}", &model[4..]), Some("softmax"))
    } else if lower.starts_with("mixtral") {
        ("Mixtral".to_string(), Some("softmax"))
    } else {
        (model.to_string(), None)
    };
    bits.extend(scoring.map(str::to_string));
    if bits.is_empty() {
        name
    } else {
        format!("{name}: {}", bits.join(", "))
    }
}

// ---------------------------------------------------------------------------------------------
// SVG

const GAP: f64 = 34.0;
const RIGHT: f64 = 24.0;
const BOTTOM: f64 = 58.0;
/// The figures' palette and font: text and axes, notes and tick labels, grid lines.
pub const INK: &str = "#1f2328";
pub const MUTED: &str = "#57606a";
pub const GRID: &str = "#e4e7eb";
const FLOOR: &str = "#8c959f";
pub const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

/// The start of every hand-written figure: the `<svg>` element (its size, font and ink), a white
/// background, and the title on the first line (escaped here).
pub fn open(s: &mut String, width: f64, height: f64, title: &str) {
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}" font-size="13" fill="{INK}">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="26" font-size="17" font-weight="600">{}</text>"#,
        esc(title)
    );
}

/// Color, marker and legend label of an implementation (Okabe–Ito colors: distinct for the
/// common color-vision deficiencies).
fn style(imp: &str, k: usize) -> Series {
    let (color, marker, label) = match imp {
        "chain" => (
            "#0072b2",
            Marker::Circle,
            "chain: our five-line fp32 router, plain kernels".into(),
        ),
        "torch_5line" => (
            "#d55e00",
            Marker::Square,
            "torch_5line: the PyTorch five-line router".into(),
        ),
        "floor_probe" => (
            "#009e73",
            Marker::Diamond,
            "floor_probe: one launch reading hidden + W_gate cold".into(),
        ),
        other => {
            let extra = ["#cc79a7", "#e69f00", "#56b4e9", "#000000"];
            (extra[k % extra.len()], Marker::Triangle, other.to_string())
        }
    };
    Series {
        imp: imp.to_string(),
        color,
        marker,
        label,
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Marker {
    Circle,
    Square,
    Diamond,
    Triangle,
}

fn marker(s: &mut String, m: Marker, x: f64, y: f64, color: &str) {
    let _ = match m {
        Marker::Circle => writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{color}" stroke="white" stroke-width="1"/>"#
        ),
        Marker::Square => writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="7.5" height="7.5" fill="{color}" stroke="white" stroke-width="1"/>"#,
            x - 3.75,
            y - 3.75
        ),
        Marker::Diamond => writeln!(
            s,
            r#"<polygon points="{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}" fill="{color}" stroke="white" stroke-width="1"/>"#,
            y - 5.0,
            x + 5.0,
            y + 5.0,
            x - 5.0
        ),
        Marker::Triangle => writeln!(
            s,
            r#"<polygon points="{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}" stroke="white" stroke-width="1"/>"#,
            y - 5.0,
            x + 4.5,
            y + 3.5,
            x - 4.5,
            y + 3.5
        ),
    };
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The width of a digit of a tick label, and the least gap between two labels, in pixels.
const TICK_DIGIT_W: f64 = 7.5;
const TICK_GAP: f64 = 8.0;

/// Which ticks of an axis get a label: from the right, each whose label (`TICK_DIGIT_W` per
/// digit, centred at its x) ends at least `TICK_GAP` left of the last one labelled.
fn labelled_ticks(ticks: &[(f64, u64)]) -> Vec<bool> {
    let mut labelled = vec![false; ticks.len()];
    let mut left = f64::INFINITY;
    for (i, &(xx, r)) in ticks.iter().enumerate().rev() {
        let half = TICK_DIGIT_W * r.to_string().len() as f64 / 2.0;
        if xx + half <= left - TICK_GAP {
            labelled[i] = true;
            left = xx - half;
        }
    }
    labelled
}

/// A tick label: `0.5`, `2`, `20`, `1000`.
fn tick_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{}", v.round() as u64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Readable ticks for a log axis over [lo, hi]: 1-2-5 per decade, fewer when the range is wide,
/// more when it is narrow.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let ticks_with = |mantissas: &[f64]| -> Vec<f64> {
        let mut v = Vec::new();
        for d in (lo.log10().floor() as i32 - 1)..=(hi.log10().ceil() as i32) {
            for m in mantissas {
                let t = m * 10f64.powi(d);
                if t >= lo * (1.0 - 1e-9) && t <= hi * (1.0 + 1e-9) {
                    v.push(t);
                }
            }
        }
        v
    };
    let mut v = ticks_with(&[1.0, 2.0, 5.0]);
    if v.len() > 12 {
        v = ticks_with(&[1.0]);
    } else if v.len() < 4 {
        v = ticks_with(&[1.0, 1.5, 2.0, 3.0, 5.0, 7.0]);
        if v.len() < 3 {
            v = ticks_with(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        }
    }
    v
}

struct Axis {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        self.from + (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln()) * (self.to - self.from)
    }
}

/// One implementation as a figure draws it in every panel: the cold median (solid, markers,
/// p10–p90 whiskers) and the warm median (dashed), in one color.
pub(crate) struct Series {
    pub imp: String,
    pub color: &'static str,
    pub marker: Marker,
    /// Its line in the legend.
    pub label: String,
}

/// A figure of log-log panels side by side, one per shape: µs per call against rows, each
/// [`Series`] with the floor beside it, one y range for all panels so the shapes compare by eye,
/// under a title, a few lines of notes and a legend (two columns when the figure is wide
/// enough). Chapter 1's figure ([`render_svg`]) and chapter 2's are drawn by it.
pub(crate) struct Figure<'a> {
    pub panel_w: f64,
    pub panel_h: f64,
    /// Room left of each panel for its y tick labels and axis label.
    pub left: f64,
    /// The title, before ` (chapter, device)`.
    pub title: &'a str,
    /// Lines under the title, in the muted color.
    pub notes: &'a [&'a str],
    /// A panel's title from its shape.
    pub panel_title: fn(&str) -> String,
    pub x_label: &'a str,
    /// In the order they are drawn and listed; the index sets each one's small x offset.
    pub series: Vec<Series>,
    /// The floor's line in the legend.
    pub floor_label: &'a str,
    /// The implementation whose row gives the floor at a row count (else the first row there).
    pub floor_from: &'a str,
}

impl Figure<'_> {
    /// Draws `rows`. Every polyline carries `class` (`cold`, `warm`, `floor`), `data-shape` and,
    /// for the timings, `data-impl`, so tests and readers of the source can find each series.
    pub fn render(&self, rows: &[&Row]) -> String {
        let shapes = shapes(rows.iter().copied());
        let n = shapes.len().max(1) as f64;
        let width = n * (self.left + self.panel_w) + (n - 1.0) * GAP + RIGHT;

        // One y range for all panels, so the shapes compare by eye.
        let all = rows
            .iter()
            .flat_map(|r| [r.cold_p10_us, r.cold_p90_us, r.warm_median_us, r.floor_us]);
        let (ymin, ymax) = all.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        let (ylo, yhi) = (ymin / 1.25, ymax * 1.25);
        let yticks = log_ticks(ylo, yhi);

        // Legend entries: one per series, then the line styles. Two columns when the figure is
        // wide enough, else one.
        enum Key<'k> {
            Series(&'k Series),
            Warm,
            Floor,
        }
        let mut keys: Vec<(Key, &str)> = self
            .series
            .iter()
            .map(|se| (Key::Series(se), se.label.as_str()))
            .collect();
        keys.push((Key::Warm, "warm median (dashed, same color)"));
        keys.push((Key::Floor, self.floor_label));
        let columns = if width >= 900.0 { 2 } else { 1 };
        let per_column = keys.len().div_ceil(columns);
        let legend_y = 60.0 + 18.0 * self.notes.len() as f64;
        const LEGEND_ROW: f64 = 21.0;
        let top = legend_y + per_column as f64 * LEGEND_ROW + 34.0; // legend, then the panel titles
        let height = top + self.panel_h + BOTTOM;

        let (chapter, device) = rows
            .first()
            .map(|r| (r.chapter.clone(), r.device.clone()))
            .unwrap_or_default();
        let mut s = String::new();
        open(
            &mut s,
            width,
            height,
            &format!("{} ({chapter}, {device})", self.title),
        );
        for (i, line) in self.notes.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="16" y="{}" fill="{MUTED}">{}</text>"#,
                48 + 18 * i,
                esc(line)
            );
        }
        for (i, (key, label)) in keys.iter().enumerate() {
            let lx = 16.0 + (i / per_column) as f64 * (width / 2.0);
            let ly = legend_y + (i % per_column) as f64 * LEGEND_ROW;
            let (stroke, rest) = match key {
                Key::Series(se) => (se.color, r#"stroke-width="2""#),
                Key::Warm => (MUTED, r#"stroke-width="1.2" stroke-dasharray="5 3""#),
                Key::Floor => (FLOOR, r#"stroke-width="2" stroke-dasharray="2 3""#),
            };
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{stroke}" {rest}/>"#,
                lx + 28.0
            );
            if let Key::Series(se) = key {
                marker(&mut s, se.marker, lx + 14.0, ly, se.color);
            }
            let fill = if matches!(key, Key::Series(..)) {
                INK
            } else {
                MUTED
            };
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" fill="{fill}">{}</text>"#,
                lx + 36.0,
                ly + 4.5,
                esc(label)
            );
        }

        for (p, shape) in shapes.iter().enumerate() {
            let px = p as f64 * (self.left + self.panel_w + GAP) + self.left;
            let here: Vec<&Row> = rows.iter().copied().filter(|r| &r.shape == shape).collect();
            self.panel(&mut s, shape, &here, (px, top), (ylo, yhi), &yticks);
        }
        s.push_str("</svg>\n");
        s
    }

    /// One shape's panel, its top left corner at (`px`, `py`): title, grid, ticks, axis labels,
    /// frame, the floor, then each series.
    fn panel(
        &self,
        s: &mut String,
        shape: &str,
        here: &[&Row],
        (px, py): (f64, f64),
        (ylo, yhi): (f64, f64),
        yticks: &[f64],
    ) {
        let (pw, ph) = (self.panel_w, self.panel_h);
        let xs: Vec<u64> = here
            .iter()
            .map(|r| r.rows)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let (xmin, xmax) = (xs[0] as f64, xs[xs.len() - 1] as f64);
        let x = Axis {
            lo: xmin / 1.6,
            hi: xmax * 1.6,
            from: px,
            to: px + pw,
        };
        let y = Axis {
            lo: ylo,
            hi: yhi,
            from: py + ph,
            to: py,
        };

        let _ = writeln!(s, r#"<g class="panel" data-shape="{}">"#, esc(shape));
        let _ = writeln!(
            s,
            r#"<text x="{px}" y="{}" font-size="14" font-weight="600">{}</text>"#,
            py - 12.0,
            esc(&(self.panel_title)(shape))
        );
        // Grid and ticks.
        for &t in yticks {
            let yy = y.map(t);
            let _ = writeln!(
                s,
                r#"<line x1="{px}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{GRID}"/>"#,
                px + pw
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                px - 6.0,
                yy + 4.0,
                tick_label(t)
            );
        }
        // A grid line at every measured count; its label only where it does not run into the
        // next one labelled, from the right (counts crowd at the top of a log axis: 64, 96, 128;
        // the largest keeps its label).
        let labelled =
            labelled_ticks(&xs.iter().map(|&r| (x.map(r as f64), r)).collect::<Vec<_>>());
        for (&r, &label) in xs.iter().zip(&labelled) {
            let xx = x.map(r as f64);
            let _ = writeln!(
                s,
                r#"<line x1="{xx:.1}" y1="{py}" x2="{xx:.1}" y2="{:.1}" stroke="{GRID}"/>"#,
                py + ph
            );
            if label {
                let _ = writeln!(
                    s,
                    r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="{MUTED}">{r}</text>"#,
                    py + ph + 18.0
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="{MUTED}" stroke-width="1"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px + pw / 2.0,
            py + ph + 42.0,
            esc(self.x_label)
        );
        let (tx, ty) = (px - (self.left - 16.0), py + ph / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{tx}" y="{ty}" text-anchor="middle" transform="rotate(-90 {tx} {ty})">µs per call, log scale</text>"#
        );

        // The floor: one value per row count (the same for every impl of a shape and rows).
        let floor: Vec<(f64, f64)> = xs
            .iter()
            .filter_map(|&r| {
                let at = here.iter().filter(|q| q.rows == r);
                let from = at.clone().find(|q| q.imp == self.floor_from);
                from.or_else(|| at.clone().next())
                    .map(|q| (x.map(r as f64), y.map(q.floor_us)))
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline class="floor" data-shape="{}" points="{}" fill="none" stroke="{FLOOR}" stroke-width="2" stroke-dasharray="2 3"/>"#,
            esc(shape),
            points(&floor)
        );

        // Each series: cold whiskers, cold polyline with markers, warm dashed polyline. A small
        // horizontal offset per series keeps whiskers at the same rows apart.
        let n = self.series.len() as f64;
        for (k, se) in self.series.iter().enumerate() {
            let (imp, color) = (esc(&se.imp), se.color);
            let dx = (k as f64 - (n - 1.0) / 2.0) * 5.0;
            let mut series: Vec<&&Row> = here.iter().filter(|r| r.imp == se.imp).collect();
            if series.is_empty() {
                continue;
            }
            series.sort_by_key(|r| r.rows);
            let warm: Vec<(f64, f64)> = series
                .iter()
                .map(|r| (x.map(r.rows as f64) + dx, y.map(r.warm_median_us)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline class="warm" data-shape="{}" data-impl="{imp}" points="{}" fill="none" stroke="{color}" stroke-width="1.2" stroke-dasharray="5 3" opacity="0.9"/>"#,
                esc(shape),
                points(&warm)
            );
            for r in &series {
                let xx = x.map(r.rows as f64) + dx;
                let (y10, y90) = (y.map(r.cold_p10_us), y.map(r.cold_p90_us));
                let _ = writeln!(
                    s,
                    r#"<path class="whisker" d="M{xx:.1},{y10:.1}V{y90:.1}M{:.1},{y10:.1}h6M{:.1},{y90:.1}h6" stroke="{color}" stroke-width="1.2" fill="none"/>"#,
                    xx - 3.0,
                    xx - 3.0
                );
            }
            let cold: Vec<(f64, f64)> = series
                .iter()
                .map(|r| (x.map(r.rows as f64) + dx, y.map(r.cold_median_us)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline class="cold" data-shape="{}" data-impl="{imp}" points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                esc(shape),
                points(&cold)
            );
            for &(cx, cy) in &cold {
                marker(s, se.marker, cx, cy, color);
            }
        }
        s.push_str("</g>\n");
    }
}

/// A readable step for a linear axis from 0 to `max`: 1, 2 or 5 times a power of ten, at most
/// five steps.
pub fn linear_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// Draws chapter 1's figure: one panel per router shape, every implementation with the floor.
pub fn render_svg(rows: &[Row]) -> String {
    Figure {
        panel_w: 400.0,
        panel_h: 300.0,
        left: 62.0,
        title: "The five-line router: time per call against rows",
        notes: &[
            "Cold: the L2 cache flushed before each graph replay; marker = median, whisker = p10–p90.",
            "Warm: back-to-back copies in one graph. Both axes logarithmic.",
        ],
        panel_title: describe_shape,
        x_label: "rows routed (tokens), log scale",
        series: impls(rows)
            .iter()
            .enumerate()
            .map(|(k, imp)| style(imp, k))
            .collect(),
        floor_label: "floor: one launch + bytes at copy bw (or FLOPs at bf16 rate)",
        floor_from: "floor_probe",
    }
    .render(&rows.iter().collect::<Vec<_>>())
}

fn points(p: &[(f64, f64)]) -> String {
    p.iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spells_out_shapes() {
        assert_eq!(
            describe_shape("glm_h4096_e288_k8"),
            "GLM: hidden 4096, 288 experts, k = 8, sigmoid + bias"
        );
        assert_eq!(
            describe_shape("qwen3_h2048_e128_k8"),
            "Qwen3: hidden 2048, 128 experts, k = 8, softmax"
        );
        assert_eq!(describe_shape("toy"), "toy");
    }

    #[test]
    fn crowded_tick_labels_give_way_to_the_right() {
        // 64, 96 and 128 a few pixels apart: 128 keeps its label, 96 loses it, 64 is far enough.
        let ticks = [
            (10.0, 1),
            (90.0, 64),
            (110.0, 96),
            (122.0, 128),
            (300.0, 8192),
        ];
        assert_eq!(labelled_ticks(&ticks), [true, true, false, true, true]);
        assert!(labelled_ticks(&[]).is_empty());
    }

    #[test]
    fn ticks_are_readable() {
        assert_eq!(log_ticks(3.0, 120.0), vec![5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(log_ticks(0.5, 1e6).len(), 7); // 1, 10, …, 1e6: one per decade when wide
        assert!(log_ticks(4.0, 9.0).len() >= 3);
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(20.0), "20");
    }
}
