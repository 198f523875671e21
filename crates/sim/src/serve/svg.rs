//! The chart of `--out`: load and replicas over time.

use std::fmt::Write;

use super::report::Report;

const COLORS: [&str; 5] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"];

/// Arrivals per second (10 s means, grey area on the right axis) and replicas per policy.
pub(crate) fn chart(report: &Report) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 460.0, 60.0, 170.0, 40.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let title =
        format!("{} on {}, rate ×{}: load and replicas", report.trace, report.profile, report.rate_scale);
    let mut s = crate::svg::open(w, h, &title, left + pw / 2.0);
    let x1 = report.outcomes.iter().flat_map(|o| o.run.series.last()).map(|p| p.t).fold(1.0, f64::max);
    let r1 = report
        .outcomes
        .iter()
        .flat_map(|o| o.run.series.iter())
        .map(|p| p.replicas)
        .max()
        .unwrap_or(1)
        .max(1);
    let load = report
        .outcomes
        .first()
        .map(|o| smooth(&o.run.series.iter().map(|p| (p.t, p.rps)).collect::<Vec<_>>()))
        .unwrap_or_default();
    let l1 = load.iter().map(|p| p.1).fold(1.0, f64::max) * 1.05;
    let y1 = f64::from(r1) * 1.1;
    let sx = |x: f64| left + x / x1 * pw;
    let _ =
        writeln!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    let area: Vec<String> =
        load.iter().map(|p| format!("{:.1},{:.1}", sx(p.0), top + (1.0 - p.1 / l1) * ph)).collect();
    let _ = writeln!(
        s,
        r##"<polygon points="{:.1},{b:.1} {} {:.1},{b:.1}" fill="#ddd" stroke="none"/>"##,
        sx(0.0),
        area.join(" "),
        sx(load.last().map_or(0.0, |p| p.0)),
        b = top + ph
    );
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let y = top + (1.0 - f) * ph;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{:.0}</text>"#,
            left - 6.0,
            y + 4.0,
            f * y1
        );
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{:.1}" fill="#888">{:.0}</text>"##,
            left + pw + 6.0,
            y + 4.0,
            f * l1
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{:.0}</text>"#,
            sx(f * x1),
            top + ph + 16.0,
            f * x1
        );
    }
    let _ =
        writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">seconds</text>"#, left + pw / 2.0, h - 12.0);
    let _ = writeln!(
        s,
        r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">replicas</text>"#,
        top + ph / 2.0
    );
    for (i, o) in report.outcomes.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = o
            .run
            .series
            .iter()
            .map(|p| format!("{:.1},{:.1}", sx(p.t), top + (1.0 - f64::from(p.replicas) / y1) * ph))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.8"/>"#,
            pts.join(" ")
        );
        let (lx, ly) = (left + pw + 40.0, top + 14.0 + 20.0 * i as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            o.policy.as_str()
        );
    }
    let ly = top + 14.0 + 20.0 * report.outcomes.len() as f64;
    let _ = writeln!(
        s,
        r##"<rect x="{}" y="{}" width="22" height="8" fill="#ddd"/><text x="{}" y="{}">requests/s</text>"##,
        left + pw + 40.0,
        ly - 4.0,
        left + pw + 68.0,
        ly + 4.0
    );
    s.push_str("</svg>\n");
    s
}

fn smooth(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points
        .chunks(10)
        .map(|c| (c[c.len() - 1].0, c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64))
        .collect()
}
