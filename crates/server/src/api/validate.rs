//! Field checks; each error names the field.

use super::types::SubmitRequest;
use crate::error::ApiError;

fn bad(field: &str, why: &str) -> ApiError {
    ApiError::Unprocessable(format!("{field}: {why}"))
}

/// A non-empty argv with a non-empty program.
pub fn command(argv: &[String]) -> Result<(), ApiError> {
    match argv.first() {
        None => Err(bad("command", "must not be empty")),
        Some(p) if p.trim().is_empty() => Err(bad("command", "the program must not be empty")),
        Some(_) if argv.iter().map(String::len).sum::<usize>() > 64 * 1024 => {
            Err(bad("command", "longer than 64 KiB"))
        }
        Some(_) => Ok(()),
    }
}

/// GPUs or a slice, not both; sane sizes.
pub fn resources(r: &SubmitRequest) -> Result<(), ApiError> {
    if r.gpus > 64 {
        return Err(bad("gpus", "at most 64"));
    }
    if r.gpu_memory_mib > 0 && r.gpus > 0 {
        return Err(bad("gpu_memory_mib", "a slice is part of one GPU; do not combine it with gpus"));
    }
    if r.gpu_compute_pct > 100 {
        return Err(bad("gpu_compute_pct", "must be between 0 and 100"));
    }
    if r.gpu_compute_pct > 0 && r.gpu_memory_mib == 0 {
        return Err(bad("gpu_compute_pct", "needs gpu_memory_mib (it sizes a slice)"));
    }
    Ok(())
}

/// A name made of letters, digits, `-`, `_`, `.`.
pub fn word(field: &str, value: &str) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok { Ok(()) } else { Err(bad(field, "use 1 to 64 letters, digits, '-', '_' or '.'")) }
}

/// Free text up to 128 characters.
pub fn label(field: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > 128 || value.chars().any(char::is_control) {
        return Err(bad(field, "must be 1 to 128 printable characters"));
    }
    Ok(())
}
