//! The chapter figures as hand-written SVG: one panel per shape, time per call against rows,
//! log-log, with the floor beside every series. No plotting crate: the file is small, readable
//! and diffable, and `tools/steps check` can regenerate it byte for byte.

use crate::bench_row::BenchRow as Row;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Implementations in the order they are drawn and listed; others follow in CSV order.
pub const IMPL_ORDER: [&str; 3] = ["chain", "torch_5line", "floor_probe"];

/// Shapes in the order they first appear.
pub fn shapes(rows: &[Row]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rows {
        if !v.contains(&r.shape) {
            v.push(r.shape.clone());
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

const PANEL_W: f64 = 400.0;
const PANEL_H: f64 = 300.0;
const LEFT: f64 = 62.0; // room for the y tick labels of each panel
const GAP: f64 = 34.0;
const RIGHT: f64 = 24.0;
const BOTTOM: f64 = 58.0;
const INK: &str = "#1f2328";
const MUTED: &str = "#57606a";
const GRID: &str = "#e4e7eb";
const FLOOR: &str = "#8c959f";
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

/// Color, marker and legend label of an implementation (Okabe–Ito colors: distinct for the
/// common color-vision deficiencies).
fn style(imp: &str, k: usize) -> (&'static str, Marker, String) {
    match imp {
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
    }
}

#[derive(Clone, Copy)]
enum Marker {
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

/// Draws the figure. Every polyline carries `class` (`cold`, `warm`, `floor`), `data-shape` and,
/// for the timings, `data-impl`, so tests and readers of the source can find each series.
pub fn render_svg(rows: &[Row]) -> String {
    let shapes = shapes(rows);
    let impls = impls(rows);
    let n = shapes.len() as f64;
    let width = n * (LEFT + PANEL_W) + (n - 1.0) * GAP + RIGHT;

    // One y range for all panels, so the shapes compare by eye.
    let all = rows
        .iter()
        .flat_map(|r| [r.cold_p10_us, r.cold_p90_us, r.warm_median_us, r.floor_us]);
    let (ymin, ymax) = all.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let (ylo, yhi) = (ymin / 1.25, ymax * 1.25);
    let yticks = log_ticks(ylo, yhi);

    // Legend entries: one per implementation, then the line styles. Two columns when the figure
    // is wide enough, else one.
    enum Key {
        Impl(&'static str, Marker),
        Warm,
        Floor,
    }
    let mut keys: Vec<(Key, String)> = impls
        .iter()
        .enumerate()
        .map(|(k, imp)| {
            let (color, m, label) = style(imp, k);
            (Key::Impl(color, m), label)
        })
        .collect();
    keys.push((Key::Warm, "warm median (dashed, same color)".to_string()));
    keys.push((
        Key::Floor,
        "floor: one launch + bytes at copy bw (or FLOPs at bf16 rate)".to_string(),
    ));
    let columns = if width >= 900.0 { 2 } else { 1 };
    let per_column = keys.len().div_ceil(columns);
    const LEGEND_Y: f64 = 96.0;
    const LEGEND_ROW: f64 = 21.0;
    let top = LEGEND_Y + per_column as f64 * LEGEND_ROW + 34.0; // legend, then the panel titles
    let height = top + PANEL_H + BOTTOM;

    let device = rows[0].device.clone();
    let chapter = rows[0].chapter.clone();
    let mut s = String::new();
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
        r#"<text x="16" y="26" font-size="17" font-weight="600">The five-line router: time per call against rows ({}, {})</text>"#,
        esc(&chapter),
        esc(&device)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="48" fill="{MUTED}">Cold: the L2 cache flushed before each graph replay; marker = median, whisker = p10–p90.</text>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="66" fill="{MUTED}">Warm: back-to-back copies in one graph. Both axes logarithmic.</text>"#
    );
    for (i, (key, label)) in keys.iter().enumerate() {
        let lx = 16.0 + (i / per_column) as f64 * (width / 2.0);
        let ly = LEGEND_Y + (i % per_column) as f64 * LEGEND_ROW;
        match key {
            Key::Impl(color, m) => {
                let _ = writeln!(
                    s,
                    r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/>"#,
                    lx + 28.0
                );
                marker(&mut s, *m, lx + 14.0, ly, color);
            }
            Key::Warm => {
                let _ = writeln!(
                    s,
                    r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{MUTED}" stroke-width="1.2" stroke-dasharray="5 3"/>"#,
                    lx + 28.0
                );
            }
            Key::Floor => {
                let _ = writeln!(
                    s,
                    r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{FLOOR}" stroke-width="2" stroke-dasharray="2 3"/>"#,
                    lx + 28.0
                );
            }
        }
        let fill = if matches!(key, Key::Impl(..)) {
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
        let px = p as f64 * (LEFT + PANEL_W + GAP) + LEFT;
        let py = top;
        let here: Vec<&Row> = rows.iter().filter(|r| &r.shape == shape).collect();
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
            to: px + PANEL_W,
        };
        let y = Axis {
            lo: ylo,
            hi: yhi,
            from: py + PANEL_H,
            to: py,
        };

        let _ = writeln!(s, r#"<g class="panel" data-shape="{}">"#, esc(shape));
        let _ = writeln!(
            s,
            r#"<text x="{px}" y="{}" font-size="14" font-weight="600">{}</text>"#,
            py - 12.0,
            esc(&describe_shape(shape))
        );
        // Grid and ticks.
        for &t in &yticks {
            let yy = y.map(t);
            let _ = writeln!(
                s,
                r#"<line x1="{px}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{GRID}"/>"#,
                px + PANEL_W
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                px - 6.0,
                yy + 4.0,
                tick_label(t)
            );
        }
        for &r in &xs {
            let xx = x.map(r as f64);
            let _ = writeln!(
                s,
                r#"<line x1="{xx:.1}" y1="{py}" x2="{xx:.1}" y2="{:.1}" stroke="{GRID}"/>"#,
                py + PANEL_H
            );
            let _ = writeln!(
                s,
                r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="{MUTED}">{r}</text>"#,
                py + PANEL_H + 18.0
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{px}" y="{py}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="{MUTED}" stroke-width="1"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">rows routed (tokens), log scale</text>"#,
            px + PANEL_W / 2.0,
            py + PANEL_H + 42.0
        );
        let (tx, ty) = (px - 46.0, py + PANEL_H / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{tx}" y="{ty}" text-anchor="middle" transform="rotate(-90 {tx} {ty})">µs per call, log scale</text>"#
        );

        // The floor: one value per row count (the same for every impl of a shape and rows).
        let floor: Vec<(f64, f64)> = xs
            .iter()
            .filter_map(|&r| {
                let at = here.iter().filter(|q| q.rows == r);
                let probe = at.clone().find(|q| q.imp == "floor_probe");
                probe
                    .or_else(|| at.clone().next())
                    .map(|q| (x.map(r as f64), y.map(q.floor_us)))
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline class="floor" data-shape="{}" points="{}" fill="none" stroke="{FLOOR}" stroke-width="2" stroke-dasharray="2 3"/>"#,
            esc(shape),
            points(&floor)
        );

        // Each implementation: cold whiskers, cold polyline with markers, warm dashed polyline.
        // A small horizontal offset per impl keeps whiskers at the same rows apart.
        for (k, imp) in impls.iter().enumerate() {
            let (color, m, _) = style(imp, k);
            let dx = (k as f64 - (impls.len() as f64 - 1.0) / 2.0) * 5.0;
            let mut series: Vec<&&Row> = here.iter().filter(|r| &r.imp == imp).collect();
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
                r#"<polyline class="warm" data-shape="{}" data-impl="{}" points="{}" fill="none" stroke="{color}" stroke-width="1.2" stroke-dasharray="5 3" opacity="0.9"/>"#,
                esc(shape),
                esc(imp),
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
                r#"<polyline class="cold" data-shape="{}" data-impl="{}" points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                esc(shape),
                esc(imp),
                points(&cold)
            );
            for &(cx, cy) in &cold {
                marker(&mut s, m, cx, cy, color);
            }
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
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
    fn ticks_are_readable() {
        assert_eq!(log_ticks(3.0, 120.0), vec![5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(log_ticks(0.5, 1e6).len(), 7); // 1, 10, …, 1e6: one per decade when wide
        assert!(log_ticks(4.0, 9.0).len() >= 3);
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(20.0), "20");
    }
}
