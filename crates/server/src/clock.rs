//! The server's wall clock: the one place it reads the time of day, in the store's unit.

/// Milliseconds since the Unix epoch.
// The clock itself: the one place the server reads the time of day.
#[allow(clippy::disallowed_methods)]
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
