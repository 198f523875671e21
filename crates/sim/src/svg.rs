//! What every chart the simulators draw starts with: the `<svg>` element, a white background and
//! a centred title (escaped).

use std::fmt::Write;

/// A `w` × `h` drawing with `title` centred over `center_x`; the caller appends and closes it.
pub(crate) fn open(w: f64, h: f64, title: &str, center_x: f64) -> String {
    let title = title.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{center_x}" y="22" text-anchor="middle" font-size="15">{title}</text>"#);
    s
}
