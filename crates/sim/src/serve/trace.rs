//! LLM request traces in the Azure format: `TIMESTAMP,ContextTokens,GeneratedTokens`.
//!
//! `TIMESTAMP` is `YYYY-MM-DD HH:MM:SS[.fffffff]` (the Azure LLM inference traces of 2023), or
//! a plain number of seconds; arrivals are returned in seconds from the first request, sorted.
//! Every malformed line is a [`TraceError`] naming the file and line.

use std::path::Path;

use crate::trace::{Table, TraceError};

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRow {
    /// Arrival, seconds from the trace's first request.
    pub at_s: f64,
    /// Prompt tokens.
    pub context: u32,
    /// Output tokens (at least 1: the first token is the prefill's).
    pub generated: u32,
}

/// Reads a trace file.
pub fn read_requests(path: &Path) -> Result<Vec<RequestRow>, TraceError> {
    let mut table = Table::open(path, &["TIMESTAMP", "ContextTokens", "GeneratedTokens"])?;
    let mut rows = Vec::new();
    while let Some(row) = table.next_row()? {
        let stamp = row.text("TIMESTAMP")?.trim();
        let at_s = parse_timestamp(stamp).ok_or_else(|| {
            row.bad(
                "TIMESTAMP",
                format!("expected `YYYY-MM-DD HH:MM:SS.fffffff` or seconds, found `{stamp}`"),
            )
        })?;
        let context = row.int("ContextTokens")?;
        let generated = row.int("GeneratedTokens")?;
        if !(1..=1_000_000).contains(&context) {
            return Err(row.bad("ContextTokens", format!("expected 1 to 1000000 tokens, found {context}")));
        }
        if generated > 1_000_000 {
            return Err(
                row.bad("GeneratedTokens", format!("expected at most 1000000 tokens, found {generated}"))
            );
        }
        rows.push(RequestRow { at_s, context: context as u32, generated: generated.max(1) as u32 });
    }
    let mut rows = table.finish(rows)?;
    rows.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let first = rows.first().map_or(0.0, |r| r.at_s);
    for r in &mut rows {
        r.at_s -= first;
    }
    Ok(rows)
}

/// Seconds since 1970 for `YYYY-MM-DD HH:MM:SS[.f…]` (UTC, no zone), or a plain number.
pub fn parse_timestamp(s: &str) -> Option<f64> {
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, min) = (t.next()?.parse::<i64>().ok()?, t.next()?.parse::<i64>().ok()?);
    let sec: f64 = t.next()?.parse().ok()?;
    if d.next().is_some() || t.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    if !(0..24).contains(&h) || !(0..60).contains(&min) || !(0.0..61.0).contains(&sec) {
        return None;
    }
    Some((days_from_civil(y, m, day) * 86_400 + h * 3600 + min * 60) as f64 + sec)
}

/// Howard Hinnant's `days_from_civil`: days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_timestamps_are_seconds_with_their_fraction() {
        let a = parse_timestamp("2023-11-16 18:17:03.9799600").expect("valid");
        let b = parse_timestamp("2023-11-16 18:17:04.0319600").expect("valid");
        assert!((b - a - 0.052).abs() < 1e-6);
        assert_eq!(parse_timestamp("1970-01-02 00:00:00"), Some(86_400.0));
        assert_eq!(parse_timestamp("2023-13-01 00:00:00"), None);
    }

    #[test]
    fn a_malformed_line_is_named_with_its_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.csv");
        std::fs::write(
            &path,
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,10,2\nyesterday,4,4\n",
        )
        .expect("write");
        let e = read_requests(&path).expect_err("bad timestamp").to_string();
        assert!(e.contains("t.csv:3: column `TIMESTAMP`"), "{e}");
        std::fs::write(&path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,10\n")
            .expect("write");
        let e = read_requests(&path).expect_err("short row").to_string();
        assert!(e.contains("t.csv:2:"), "{e}");
    }

    #[test]
    fn the_excerpt_starts_at_zero_and_is_sorted() {
        let rows = read_requests(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/traces/azure-llm-2023/code-excerpt.csv"
        )))
        .expect("excerpt reads");
        assert_eq!(rows[0].at_s, 0.0);
        assert!(rows.windows(2).all(|w| w[0].at_s <= w[1].at_s));
    }
}
