//! Chapter 4's SVG figures: the timing, fusion, floor and rates figures.

use super::*;

/// How an implementation is drawn (Okabe–Ito colors, as the other chapters' figures).
pub(super) fn style(imp: &str, k: usize) -> Series {
    // Blues for the tiled path's variants, oranges and pinks for the decode path's (in the
    // order of the bench's list), then two more.
    const VARIANT_COLORS: [&str; 7] = [
        "#0072b2", "#56b4e9", "#d55e00", "#e69f00", "#cc79a7", "#009e73", "#999999",
    ];
    let (color, marker) = match DRAWN.iter().find(|s| s.imp == imp) {
        Some(s) => (s.color, s.marker),
        None => (VARIANT_COLORS[k % VARIANT_COLORS.len()], Marker::Triangle),
    };
    Series {
        imp: imp.to_string(),
        color,
        marker,
        label: label(imp),
    }
}

/// Every implementation drawn, in order: ours, its variants, the others.
pub(super) fn drawn(rows: &[BenchRow]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        for i in impls_at(rows, &shape) {
            if !v.contains(&i) {
                v.push(i);
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Line charts with a linear y axis: the fusion figure and the rates figure.

pub(super) const INK: &str = "#1f2328";
pub(super) const MUTED: &str = "#57606a";
pub(super) const GRID: &str = "#e4e7eb";
pub(super) const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

/// One line of a panel: `(T, value)` points.
pub(super) struct Line {
    imp: String,
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// One panel: log x (tokens), linear y from 0, a horizontal reference line.
pub(super) struct Panel {
    title: String,
    /// `data-panel` of its lines.
    key: String,
    y_label: String,
    lines: Vec<Line>,
    reference: Option<(f64, String)>,
}

/// Steps of 1, 2 or 5 times a power of ten, about five up to `hi`.
pub(super) fn linear_ticks(hi: f64) -> Vec<f64> {
    if hi <= 0.0 || !hi.is_finite() {
        return vec![0.0, 1.0];
    }
    let raw = hi / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    let n = (hi / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

pub(super) fn tick(v: f64) -> String {
    if v == 0.0 || v.abs() >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// Panels in `columns` columns under a title, notes and a legend (`legend`: label and color of
/// each line's implementation, dashed or not).
pub(super) fn line_chart(
    title: &str,
    notes: &[&str],
    legend: &[(String, &'static str, bool)],
    panels: &[Panel],
    columns: usize,
) -> String {
    const PW: f64 = 420.0;
    const PH: f64 = 250.0;
    const LEFT: f64 = 62.0;
    const GAP: f64 = 34.0;
    const ROW_GAP: f64 = 70.0;
    let columns = columns.max(1);
    let prows = panels.len().div_ceil(columns).max(1);
    let width = columns as f64 * (LEFT + PW) + (columns as f64 - 1.0) * GAP + 24.0;
    let legend_y = 60.0 + 18.0 * notes.len() as f64;
    let per_col = legend.len().div_ceil(2).max(1);
    let top = legend_y + per_col as f64 * 21.0 + 34.0;
    let height = top + prows as f64 * (PH + ROW_GAP);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}" font-size="13" fill="{INK}">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="16" y="30" font-size="16" font-weight="600">{}</text>"#,
        esc(title)
    );
    for (i, n) in notes.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.0}" fill="{MUTED}">{}</text>"#,
            52.0 + 18.0 * i as f64,
            esc(n)
        );
    }
    for (i, (label, color, dashed)) in legend.iter().enumerate() {
        let (x, y) = (
            16.0 + (i / per_col) as f64 * width / 2.0,
            legend_y + (i % per_col) as f64 * 21.0,
        );
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<line x1="{x:.0}" y1="{y:.0}" x2="{:.0}" y2="{y:.0}" stroke="{color}" stroke-width="2.5"{dash}/><text x="{:.0}" y="{:.0}">{}</text>"#,
            x + 28.0,
            x + 36.0,
            y + 4.0,
            esc(label)
        );
    }
    for (pi, p) in panels.iter().enumerate() {
        let (col, row) = (pi % columns, pi / columns);
        let x0 = col as f64 * (LEFT + PW + GAP) + LEFT;
        let y0 = top + row as f64 * (PH + ROW_GAP);
        let xs: Vec<f64> = p
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|q| q.0))
            .collect::<Vec<_>>();
        let (xlo, xhi) = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let (xlo, xhi) = if xlo < xhi {
            (xlo / 1.4, xhi * 1.4)
        } else {
            (0.5, 2.0)
        };
        let ymax = p
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|q| q.1))
            .chain(p.reference.iter().map(|r| r.0))
            .fold(0.0, f64::max)
            * 1.08;
        let yt = linear_ticks(ymax);
        let yhi = *yt.last().unwrap_or(&1.0);
        let mx = |v: f64| x0 + (v.ln() - xlo.ln()) / (xhi.ln() - xlo.ln()) * PW;
        let my = |v: f64| y0 + PH - v / yhi * PH;
        let _ = writeln!(
            s,
            r#"<g class="panel" data-panel="{}"><text x="{x0:.0}" y="{:.0}" font-weight="600">{}</text>"#,
            esc(&p.key),
            y0 - 10.0,
            esc(&p.title)
        );
        for &v in &yt {
            let y = my(v);
            let _ = writeln!(
                s,
                r#"<line x1="{x0:.0}" y1="{y:.1}" x2="{:.0}" y2="{y:.1}" stroke="{GRID}"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                x0 + PW,
                x0 - 6.0,
                y + 4.0,
                tick(v)
            );
        }
        let tokens: BTreeSet<u64> = xs.iter().map(|&v| v as u64).collect();
        for &t in &tokens {
            let x = mx(t as f64);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{y0:.0}" x2="{x:.1}" y2="{:.0}" stroke="{GRID}"/><text x="{x:.1}" y="{:.0}" text-anchor="middle" fill="{MUTED}">{t}</text>"#,
                y0 + PH,
                y0 + PH + 18.0
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.0}" y="{y0:.0}" width="{PW:.0}" height="{PH:.0}" fill="none" stroke="{MUTED}"/><text x="{:.0}" y="{:.0}" text-anchor="middle" fill="{MUTED}">tokens T, log scale</text><text transform="translate({:.0} {:.0}) rotate(-90)" text-anchor="middle" fill="{MUTED}">{}</text>"#,
            x0 + PW / 2.0,
            y0 + PH + 38.0,
            x0 - 46.0,
            y0 + PH / 2.0,
            esc(&p.y_label)
        );
        if let Some((v, label)) = &p.reference {
            let y = my(*v);
            let _ = writeln!(
                s,
                r#"<line class="reference" x1="{x0:.0}" y1="{y:.1}" x2="{:.0}" y2="{y:.1}" stroke="{MUTED}" stroke-dasharray="2 3"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="{MUTED}">{}</text>"#,
                x0 + PW,
                x0 + PW - 4.0,
                y - 5.0,
                esc(label)
            );
        }
        for l in &p.lines {
            let pts: Vec<String> = l
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", mx(x), my(y)))
                .collect();
            let dash = if l.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline class="line" data-panel="{}" data-impl="{}" points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                esc(&p.key),
                esc(&l.imp),
                pts.join(" "),
                l.color
            );
            for &(x, y) in &l.points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{}"/>"#,
                    mx(x),
                    my(y),
                    l.color
                );
            }
        }
        s += "</g>\n";
    }
    s += "</svg>\n";
    s
}

/// The fusion figure: per shape, each `fused_*` variant's cold (solid) and warm (dashed) time
/// over the fused layer's, against T. Above 1 the variant is slower: what the fusion it undoes
/// buys; a path (`fused_decode`, `fused_tiled`) crossing 1 is where the layer should switch.
pub fn fusion_svg(rows: &[BenchRow]) -> String {
    let variants: Vec<String> = drawn(rows).into_iter().filter(|i| is_variant(i)).collect();
    let color = |k: usize| style("fused_x", k).color;
    let mut panels = Vec::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        let mut lines = Vec::new();
        for (k, v) in variants.iter().enumerate() {
            for (warm, dashed) in [(false, false), (true, true)] {
                let points: Vec<(f64, f64)> = token_counts(rows, &shape)
                    .into_iter()
                    .filter_map(|n| {
                        over_ours(rows, &shape, n, v)
                            .map(|(c, w)| (n as f64, if warm { w } else { c }))
                    })
                    .collect();
                if !points.is_empty() {
                    lines.push(Line {
                        imp: format!("{v}{}", if warm { "_warm" } else { "" }),
                        color: color(k),
                        dashed,
                        points,
                    });
                }
            }
        }
        panels.push(Panel {
            title: panel_title(&shape),
            key: shape.clone(),
            y_label: "time ÷ the fused layer's".into(),
            lines,
            reference: Some((1.0, "the fused layer".into())),
        });
    }
    let mut legend: Vec<(String, &'static str, bool)> = variants
        .iter()
        .enumerate()
        .map(|(k, v)| (label(v), color(k), false))
        .collect();
    legend.push(("warm (dashed, same color)".into(), MUTED, true));
    line_chart(
        "What each fusion and path buys: a variant's time over the fused layer's, against tokens",
        &[
            "Cold solid, warm dashed; above 1 the variant is slower than the layer the chapter ships.",
            "The same routings, weights and hidden states for all; x logarithmic, y linear.",
        ],
        &legend,
        &panels,
        2,
    )
}

/// The floor figure: per shape, every implementation's cold time over its floor against T (the
/// shipped layer, each variant of ours, chapter 2's loop and the peers): how far each is from
/// the hardware's limit, on one scale for both shapes. Step 4b's targets are ratios on it.
pub fn floor_svg(rows: &[BenchRow]) -> String {
    // The kernel versions (the tiled path's first main loop, the decode paths), not every fusion.
    const VERSIONS: [&str; 4] = [
        "fused_tiled_v1",
        "fused_tiled_v5",
        "fused_decode",
        "fused_decode_grouped",
    ];
    let imps: Vec<String> = drawn(rows)
        .into_iter()
        .filter(|i| !is_variant(i) || VERSIONS.contains(&i.as_str()))
        .collect();
    let color = |imp: &str| match VERSIONS.iter().position(|v| *v == imp) {
        Some(k) => ["#56b4e9", "#e69f00", "#cc79a7", "#009e73"][k],
        None => style(imp, 0).color,
    };
    let mut panels = Vec::new();
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        let mut lines = Vec::new();
        for imp in &imps {
            let points: Vec<(f64, f64)> = token_counts(rows, &shape)
                .into_iter()
                .filter_map(|n| find(rows, &shape, n, imp))
                .filter(|r| r.floor_us > 0.0)
                .map(|r| (r.rows as f64, r.cold_median_us / r.floor_us))
                .collect();
            if !points.is_empty() {
                lines.push(Line {
                    imp: imp.clone(),
                    color: color(imp),
                    dashed: is_variant(imp),
                    points,
                });
            }
        }
        panels.push(Panel {
            title: panel_title(&shape),
            key: shape.clone(),
            y_label: "cold time ÷ the floor".into(),
            lines,
            reference: Some((1.0, "the floor".into())),
        });
    }
    let legend: Vec<(String, &'static str, bool)> = imps
        .iter()
        .map(|i| (label(i), color(i), is_variant(i)))
        .collect();
    line_chart(
        "How far from the floor: each implementation's cold time over its floor, against tokens",
        &[
            "Ours solid (the shipped layer), its variants dashed; chapter 2's loop and the PyTorch peers solid.",
            "Floor: one launch + the touched weights at copy bandwidth, or the FLOPs at the bf16 rate (1 on this scale); x logarithmic, y linear.",
        ],
        &legend,
        &panels,
        2,
    )
}

/// The rates figure: per shape, our achieved TB/s on the expert weights the routing touches
/// (top) and TFLOP/s (bottom), cold, against T, for every implementation, with the measured
/// copy bandwidth and bf16 rate as reference lines.
pub fn rates_svg(rows: &[BenchRow], copy_gbs: f64, bf16_tflops: f64) -> String {
    let imps: Vec<String> = drawn(rows).into_iter().filter(|i| !is_variant(i)).collect();
    let measured: Vec<&BenchRow> = rows.iter().filter(|r| r.rows > 0).collect();
    let all_shapes = shapes(measured.iter().copied());
    let mut panels = Vec::new();
    for (metric, y_label, reference) in [
        (
            "tbs",
            "TB/s on touched expert weights (cold)",
            (copy_gbs / 1e3, format!("copy {:.2} TB/s", copy_gbs / 1e3)),
        ),
        (
            "tflops",
            "TFLOP/s (cold)",
            (bf16_tflops, format!("cuBLAS bf16 {bf16_tflops:.0} TFLOP/s")),
        ),
    ] {
        for shape in &all_shapes {
            let lines = imps
                .iter()
                .enumerate()
                .filter_map(|(k, imp)| {
                    let points: Vec<(f64, f64)> = measured
                        .iter()
                        .filter(|r| r.shape == *shape && r.imp == *imp)
                        .map(|r| {
                            let v = if metric == "tbs" {
                                r.cold_gbs / 1e3
                            } else {
                                r.cold_tflops
                            };
                            (r.rows as f64, v)
                        })
                        .collect();
                    (!points.is_empty()).then(|| Line {
                        imp: imp.clone(),
                        color: style(imp, k).color,
                        dashed: false,
                        points,
                    })
                })
                .collect();
            panels.push(Panel {
                title: format!("{}: {}", short_title(shape), y_label),
                key: format!("{shape}.{metric}"),
                y_label: y_label.split(" (").next().unwrap_or(y_label).into(),
                lines,
                reference: Some(reference.clone()),
            });
        }
    }
    let legend: Vec<(String, &'static str, bool)> = imps
        .iter()
        .enumerate()
        .map(|(k, i)| (label(i), style(i, k).color, false))
        .collect();
    line_chart(
        "Achieved rates against tokens: bytes of the touched experts and FLOPs over the cold time",
        &[
            "Bytes: the active experts' w13 and w2 in bf16, counted from the routing; FLOPs: 2·T·k·(2I·H + H·I).",
            "Dotted: the measured copy bandwidth and cuBLAS's bf16 rate. x logarithmic, y linear.",
        ],
        &legend,
        &panels,
        all_shapes.len().max(1),
    )
}

/// `Qwen3` or `GLM`: a panel's short title.
pub(super) fn short_title(shape: &str) -> String {
    describe(shape)
        .split(':')
        .next()
        .unwrap_or(shape)
        .to_string()
}
