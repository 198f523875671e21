//! The server's wall clock: the one place it reads the time of day, in the store's unit.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
