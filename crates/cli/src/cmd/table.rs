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

/// Prints rows as aligned columns under a header (cells through [`printable`]).
pub fn print(header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().map(|c| printable(c).into_owned()).collect()).collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
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
}
