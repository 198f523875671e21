//! `gantry logs --timestamps` and `--since` (kubectl's flags): the server keeps, beside each
//! stream, when each part of it was written (`/v1/jobs/{id}/logs/times`, records at least
//! 100 ms apart); a line is dated by the last record at or before its first byte, and `--since`
//! starts at the first record inside the window.

use gantry_api::job_log_times::{self, Written};

use super::client::Api;

/// What `--timestamps` and `--since` ask of the output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dating {
    /// Prefix each line with its time (RFC 3339, UTC, milliseconds).
    pub timestamps: bool,
    /// Only output written at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
}

impl Dating {
    /// Whether the output needs its times at all.
    pub fn needed(&self) -> bool {
        self.timestamps || self.since_ms.is_some()
    }
}

/// The records of one stream of one attempt from `offset` on (every page).
pub async fn fetch(
    api: &Api,
    id: i64,
    stream: &str,
    attempt: Option<u32>,
    offset: u64,
) -> anyhow::Result<Vec<Written>> {
    let attempt = attempt.map(|a| format!("&attempt={a}")).unwrap_or_default();
    let mut all: Vec<Written> = Vec::new();
    let mut at = offset;
    loop {
        let path = format!("/v1/jobs/{id}/logs/times?stream={stream}&offset={at}{attempt}");
        let page: Vec<Written> = api.get(&path).await?;
        let full = page.len() >= 100_000;
        let skip = all.last().map_or(0, |l| page.iter().take_while(|w| w.offset <= l.offset).count());
        all.extend(page.into_iter().skip(skip));
        match all.last() {
            Some(last) if full && last.offset + 1 > at => at = last.offset + 1,
            _ => return Ok(all),
        }
    }
}

/// Where `--since` starts reading: the first record in the window; `None` when nothing was
/// written in it.
pub fn start(records: &[Written], since_ms: i64) -> Option<u64> {
    job_log_times::first_since(records, since_ms)
}

/// `bytes` (output from position `base` on) with each line prefixed by `prefix` and, with
/// `timestamps`, its time. A last line without a newline gets one only when prefixed, so that
/// the next prefix starts a line.
pub fn render(bytes: &[u8], base: u64, records: &[Written], timestamps: bool, prefix: &str) -> Vec<u8> {
    if !timestamps && prefix.is_empty() {
        return bytes.to_vec();
    }
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 8);
    let mut at = base;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        if timestamps {
            let when =
                job_log_times::time_of(records, at).map_or_else(|| "-".repeat(24), super::table::rfc3339);
            out.extend_from_slice(when.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            out.push(b'\n');
        }
        at += line.len() as u64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(offset: u64, at_ms: i64) -> Written {
        Written { offset, at_ms }
    }

    #[test]
    fn each_line_is_dated_by_the_record_at_or_before_its_first_byte() {
        let records = [w(0, 0), w(6, 1_500)];
        let out = render(b"hello\nworld\nagain", 0, &records, true, "");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "1970-01-01T00:00:00.000Z hello\n1970-01-01T00:00:01.500Z world\n1970-01-01T00:00:01.500Z again\n"
        );
        // Output read from a later position keeps its own positions.
        let out = render(b"world\n", 6, &records, true, "[rank 1] ");
        assert_eq!(String::from_utf8_lossy(&out), "[rank 1] 1970-01-01T00:00:01.500Z world\n");
        assert_eq!(render(b"as is", 0, &records, false, ""), b"as is");
    }

    #[test]
    fn since_starts_at_the_first_record_in_the_window() {
        let records = [w(0, 0), w(6, 1_500), w(20, 9_000)];
        assert_eq!(start(&records, 1_000), Some(6));
        assert_eq!(start(&records, 9_000), Some(20));
        assert_eq!(start(&records, 9_001), None);
    }
}
