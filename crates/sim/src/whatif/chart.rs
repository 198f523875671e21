//! The wait CDF chart of `gantry whatif --out`: recorded, baseline and changed on one axis.

use std::fmt::Write;

use super::report::Comparison;

const SERIES: [(&str, &str); 3] = [("recorded", "#888888"), ("baseline", "#1f77b4"), ("changed", "#d62728")];

/// An SVG of the three wait distributions (share of jobs that waited at most x seconds).
pub fn wait_cdf_svg(c: &Comparison) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 60.0, 20.0, 40.0, 50.0);
    let mut s = crate::svg::open(w, h, "Queue wait CDF: recorded, unchanged fleet, changed fleet", w / 2.0);
    let max = c.waits.iter().flatten().copied().fold(0.0f64, f64::max).max(1e-3);
    let x = |v: f64| left + (w - left - right) * v / max;
    let y = |p: f64| h - bottom - (h - top - bottom) * p;
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#000"/>"##,
        y(0.0),
        w - right,
        y(0.0)
    );
    let _ = writeln!(s, r##"<line x1="{left}" y1="{}" x2="{left}" y2="{}" stroke="#000"/>"##, y(0.0), y(1.0));
    for k in 0..=4 {
        let (p, v) = (f64::from(k) / 4.0, max * f64::from(k) / 4.0);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{:.0}%</text>"#,
            left - 6.0,
            y(p) + 4.0,
            p * 100.0
        );
        let _ =
            writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{v:.0}</text>"#, x(v), h - bottom + 18.0);
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">wait (s)</text>"#, w / 2.0, h - 12.0);
    for (i, (name, color)) in SERIES.iter().enumerate() {
        let mut v = c.waits[i].clone();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let points: Vec<String> =
            v.iter().enumerate().map(|(k, w)| format!("{:.1},{:.1}", x(*w), y((k + 1) as f64 / n))).collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{:.1},{:.1} {}"/>"#,
            x(v[0]),
            y(0.0),
            points.join(" ")
        );
        let ly = top + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{ly}" fill="{color}">{name} ({} jobs)</text>"#,
            w - right - 150.0,
            v.len()
        );
    }
    s.push_str("</svg>\n");
    s
}
