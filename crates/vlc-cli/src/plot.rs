//! Minimal SVG line plots (no dependencies): one polyline per series, optional log-scale x.

pub struct Series {
    pub name: String,
    /// Points (x, y), drawn in the given order.
    pub points: Vec<(f64, f64)>,
    /// Dashed lines for peers, solid for VLC.
    pub dashed: bool,
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Render series to an SVG document. `log_x` uses a base-10 log scale on x.
pub fn svg(title: &str, x_label: &str, y_label: &str, series: &[Series], log_x: bool) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 560.0, 70.0, 250.0, 40.0, 50.0);
    let tx = |x: f64| if log_x { x.max(1e-12).log10() } else { x };
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (tx(x), y)))
        .collect();
    if all.is_empty() {
        return format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}'><text x='20' y='40'>{}: no data</text></svg>", esc(title));
    }
    let (mut x0, mut x1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| {
        (a.0.min(p.0), a.1.max(p.0))
    });
    let (mut y0, mut y1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| {
        (a.0.min(p.1), a.1.max(p.1))
    });
    if log_x {
        x0 = x0.floor();
        x1 = x1.ceil();
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    y0 = (y0 - 0.02).max(0.0);
    y1 = (y1 + 0.02).min(1.0);
    if y1 - y0 < 1e-9 {
        y1 = y0 + 0.1;
    }
    let px = |x: f64| left + (x - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom);
    let mut s = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n");
    s += &format!(
        "<text x='{}' y='22' font-size='15' text-anchor='middle'>{}</text>\n",
        (left + w - right) / 2.0,
        esc(title)
    );
    // Axes and grid.
    let ticks_x: Vec<f64> = if log_x {
        (x0 as i64..=x1 as i64).map(|e| e as f64).collect()
    } else {
        (0..=5).map(|i| x0 + (x1 - x0) * i as f64 / 5.0).collect()
    };
    for t in ticks_x {
        let label = if log_x {
            format!("{}", 10f64.powf(t))
        } else {
            format!("{t:.0}")
        };
        s += &format!("<line x1='{0}' y1='{1}' x2='{0}' y2='{2}' stroke='#ddd'/><text x='{0}' y='{3}' text-anchor='middle'>{4}</text>\n", px(t), top, h - bottom, h - bottom + 16.0, label);
    }
    for i in 0..=5 {
        let t = y0 + (y1 - y0) * i as f64 / 5.0;
        s += &format!("<line x1='{0}' y1='{1}' x2='{2}' y2='{1}' stroke='#ddd'/><text x='{3}' y='{4}' text-anchor='end'>{5:.3}</text>\n", left, py(t), w - right, left - 6.0, py(t) + 4.0, t);
    }
    s += &format!(
        "<rect x='{left}' y='{top}' width='{}' height='{}' fill='none' stroke='#333'/>\n",
        w - left - right,
        h - top - bottom
    );
    s += &format!(
        "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
        (left + w - right) / 2.0,
        h - 12.0,
        esc(x_label)
    );
    s += &format!(
        "<text x='16' y='{}' text-anchor='middle' transform='rotate(-90 16 {})'>{}</text>\n",
        (top + h - bottom) / 2.0,
        (top + h - bottom) / 2.0,
        esc(y_label)
    );
    for (i, se) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let dash = if se.dashed {
            " stroke-dasharray='6 3'"
        } else {
            ""
        };
        let pts: Vec<String> = se
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(tx(x)), py(y)))
            .collect();
        s += &format!(
            "<polyline points='{}' fill='none' stroke='{c}' stroke-width='2'{dash}/>\n",
            pts.join(" ")
        );
        for p in &se.points {
            s += &format!(
                "<circle cx='{:.1}' cy='{:.1}' r='3' fill='{c}'/>\n",
                px(tx(p.0)),
                py(p.1)
            );
        }
        let ly = top + 10.0 + 18.0 * i as f64;
        s += &format!("<line x1='{0}' y1='{1}' x2='{2}' y2='{1}' stroke='{c}' stroke-width='2'{dash}/><text x='{3}' y='{4}'>{5}</text>\n", w - right + 10.0, ly, w - right + 34.0, w - right + 40.0, ly + 4.0, esc(&se.name));
    }
    s + "</svg>\n"
}
