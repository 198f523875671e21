//! The one printer for tables and JSON.

use serde::Serialize;

/// Text from the server made safe for a terminal: control characters (ESC, BEL, C1 codes,
/// newlines…) and bidirectional overrides are shown escaped (`\u{1b}`), so a job's name,
/// command or reason cannot move the cursor, retitle the window, write the clipboard of whoever
/// reads it, or make a row read as something else.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.contains(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let escaped = text
        .chars()
        .map(|c| if unsafe_char(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect();
    std::borrow::Cow::Owned(escaped)
}

/// The widest a table cell is shown, in characters: longer ones are cut, ending in `…`. Cells
/// come from the server (a job's program name, an audit row's target) and may be as long as a
/// request allows; padding a cell that wide would also panic (`format!` widths stop at 65,535).
pub const MAX_CELL: usize = 120;

/// `text` cut to at most [`MAX_CELL`] characters, the last one `…` when it was cut.
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(MAX_CELL) {
        None => std::borrow::Cow::Borrowed(text),
        Some(_) => {
            let kept: String = text.chars().take(MAX_CELL - 1).collect();
            std::borrow::Cow::Owned(kept + "…")
        }
    }
}

/// Prints rows as aligned columns under a header (cells through [`printable`] and [`cut`]).
pub fn print(header: &[&str], rows: &[Vec<String>]) {
    print!("{}", render(header, rows));
}

/// The text [`print`] writes.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().map(|c| cut(&printable(c)).into_owned()).collect()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            text.extend(std::iter::repeat_n(' ', w.saturating_sub(cell.chars().count())));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// Prints a value as pretty JSON.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints a value as YAML.
pub fn yaml<T: Serialize>(value: &T) -> anyhow::Result<()> {
    print!("{}", serde_norway::to_string(value)?);
    Ok(())
}

/// `table`, `json` or `yaml` (times in RFC 3339 beside the epoch-ms fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Structured {
    /// Aligned columns for people.
    Table,
    /// JSON for programs.
    Json,
    /// YAML for programs and people.
    Yaml,
}

/// Prints `value` as JSON or YAML; `false` for a table (the caller prints it).
pub fn structured<T: Serialize>(format: Structured, value: &T) -> anyhow::Result<bool> {
    match format {
        Structured::Table => Ok(false),
        Structured::Json => json(value).map(|()| true),
        Structured::Yaml => yaml(value).map(|()| true),
    }
}

/// Adds `<field>_rfc3339` beside each named epoch-ms field of a JSON object.
pub fn add_times(value: &mut serde_json::Value, fields: &[&str]) {
    let Some(map) = value.as_object_mut() else { return };
    for field in fields {
        let ms = map.get(*field).and_then(serde_json::Value::as_i64);
        let name = format!("{}_rfc3339", field.trim_end_matches("_at"));
        map.insert(name, ms.map(rfc3339).into());
    }
}

/// A time (ms since the Unix epoch) as `YYYY-MM-DD HH:MM UTC`.
pub fn when(ms: i64) -> String {
    let (date, h, m, _) = civil(ms);
    format!("{date} {h:02}:{m:02} UTC")
}

/// A time (ms since the Unix epoch) as RFC 3339 in UTC with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    let (date, h, m, s) = civil(ms);
    format!("{date}T{h:02}:{m:02}:{s:02}.{:03}Z", ms.rem_euclid(1000))
}

/// A span as `45s`, `12m`, `3h20m`, `2d4h`.
pub fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The date, hour, minute and second of a time (ms since the Unix epoch), UTC.
fn civil(ms: i64) -> (String, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (format!("{year:04}-{month:02}-{day:02}"), rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(super::when(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::when(1_796_037_262_716), "2026-11-30 11:14 UTC");
        assert_eq!(super::when(951_827_696_000), "2000-02-29 12:34 UTC");
        assert_eq!(super::rfc3339(951_827_696_007), "2000-02-29T12:34:56.007Z");
        assert_eq!(super::span(3_725_000), "1h02m");
    }

    #[test]
    fn a_cell_of_a_hundred_thousand_characters_is_cut_in_every_column_of_every_width() {
        // Before, a cell wider than 65,535 characters made `format!` panic ("Formatting
        // argument out of range"), on every call that printed it. Every table goes through
        // `render`; these are widths from 1 to 12 columns, the long cell in each column.
        let long = "x".repeat(100_000);
        for columns in 1..=12 {
            let header: Vec<String> = (0..columns).map(|c| format!("COL{c}")).collect();
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            for at in 0..columns {
                let row: Vec<String> =
                    (0..columns).map(|c| if c == at { long.clone() } else { "short".into() }).collect();
                let text = super::render(&header, &[row]);
                let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
                assert!(widest <= columns * (super::MAX_CELL + 2), "{columns} columns: a line of {widest}");
                assert!(text.contains('…'), "the cut is marked");
            }
        }
    }

    #[test]
    fn short_cells_are_left_whole_and_aligned() {
        let text =
            super::render(&["A", "B"], &[vec!["héllo".into(), "1".into()], vec!["x".into(), "2".into()]]);
        assert_eq!(text, "A      B\nhéllo  1\nx      2\n");
        let exact = "y".repeat(super::MAX_CELL);
        assert_eq!(super::cut(&exact), exact.as_str());
    }
}
