//! Field checks; each error names the field. Numbers are capped well below 2^63 because the
//! store keeps them as SQLite's signed 64-bit integers.

use super::types::{RegisterRequest, SubmitRequest};
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

/// Largest GPU memory in a request or an inventory: 16 TiB, in MiB.
pub const MAX_GPU_MEMORY_MIB: u64 = 16 << 20;
/// Largest CPU request or inventory: a million cores, in milli-cores.
pub const MAX_CPU_MILLI: u64 = 1_000_000_000;
/// Largest host memory request or inventory: 1 PiB, in MiB.
pub const MAX_MEMORY_MIB: u64 = 1 << 30;
/// Longest time limit: 31 days, in seconds.
pub const MAX_TIME_LIMIT_S: u64 = 31 * 86_400;
/// Latest time a query may name: the end of year 9999, in ms since the epoch (times are never
/// negative). Periods within it cannot overflow the store's GPU-millisecond sums.
pub const MAX_EPOCH_MS: u64 = 253_402_300_799_999;
/// Largest log offset: what a file offset (`i64`) can hold.
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// A number no larger than `max`. The store keeps numbers as SQLite's signed 64-bit integers,
/// so without these caps a value from 2^63 up would fail there as a 500 instead of a 422.
pub fn at_most(field: &str, value: u64, max: u64) -> Result<(), ApiError> {
    if value > max { Err(bad(field, &format!("must be at most {max}, not {value}"))) } else { Ok(()) }
}

/// A time in ms since the epoch, from 1970 to the end of year 9999.
pub fn epoch_ms(field: &str, value: i64) -> Result<(), ApiError> {
    if u64::try_from(value).is_ok_and(|v| v <= MAX_EPOCH_MS) {
        return Ok(());
    }
    Err(bad(field, &format!("must be a time in ms since 1970, from 0 to {MAX_EPOCH_MS}, not {value}")))
}

/// GPUs or a slice, not both; sane sizes.
pub fn resources(r: &SubmitRequest) -> Result<(), ApiError> {
    if r.gpus.min > 64 {
        return Err(bad("gpus", "at most 64"));
    }
    at_most("gpu_memory_mib", r.gpu_memory_mib, MAX_GPU_MEMORY_MIB)?;
    at_most("cpu_milli", r.cpu_milli, MAX_CPU_MILLI)?;
    at_most("memory_mib", r.memory_mib, MAX_MEMORY_MIB)?;
    if r.gpu_memory_mib > 0 && r.gpus.min > 0 {
        return Err(bad("gpu_memory_mib", "a slice is part of one GPU; do not combine it with gpus"));
    }
    if r.gpu_compute_pct > 100 {
        return Err(bad("gpu_compute_pct", "must be between 0 and 100"));
    }
    if r.gpu_compute_pct > 0 && r.gpu_memory_mib == 0 {
        return Err(bad("gpu_compute_pct", "needs gpu_memory_mib (it sizes a slice)"));
    }
    elastic(r)?;
    replicas(r)
}

/// An elastic job's range: from at least 1 GPU, not empty, whole GPUs of one job on one node.
fn elastic(r: &SubmitRequest) -> Result<(), ApiError> {
    let Some(max) = r.gpus.max else { return Ok(()) };
    if r.gpu_memory_mib > 0 {
        return Err(bad("gpus_max", "an elastic job takes whole GPUs; do not combine it with a slice"));
    }
    if r.replicas.is_some_and(|n| n > 1) {
        return Err(bad(
            "gpus_max",
            "elastic gangs are not supported: give replicas or a GPU range, not both",
        ));
    }
    if max > 64 {
        return Err(bad("gpus_max", "at most 64"));
    }
    r.gpus.check().map_err(|why| bad("gpus_max", &why))
}

/// Most workers in one gang.
pub const MAX_REPLICAS: u32 = 256;

/// A gang's workers each take whole GPUs.
fn replicas(r: &SubmitRequest) -> Result<(), ApiError> {
    match r.replicas {
        None | Some(1) => Ok(()),
        Some(n) if !(2..=MAX_REPLICAS).contains(&n) => Err(bad("replicas", "must be between 1 and 256")),
        Some(_) if r.gpus.min == 0 => {
            Err(bad("replicas", "a gang's workers each take whole GPUs: give gpus (at least 1 per worker)"))
        }
        Some(_) => Ok(()),
    }
}

/// The batch-workflow fields: dependencies, labels, GPU models, the work directory.
pub fn workflow(r: &SubmitRequest) -> Result<(), ApiError> {
    use gantry_api::workflow as w;
    if r.after.len() > w::MAX_DEPENDENCIES {
        return Err(bad("after", &format!("at most {} dependencies", w::MAX_DEPENDENCIES)));
    }
    if r.after.iter().any(|d| d.job <= 0) {
        return Err(bad("after", "job ids are positive"));
    }
    w::check_labels(&r.labels).map_err(ApiError::Unprocessable)?;
    if r.gpu_models.len() > 16 {
        return Err(bad("gpu_models", "at most 16"));
    }
    r.gpu_models.iter().try_for_each(|m| word("gpu_models", m))?;
    if !r.gpu_models.is_empty() && r.gpus.min == 0 && r.gpu_memory_mib == 0 {
        return Err(bad("gpu_models", "a GPU model needs a GPU (gpus or gpu_memory_mib)"));
    }
    if let Some(dir) = &r.workdir {
        w::check_workdir(dir).map_err(ApiError::Unprocessable)?;
    }
    if let Some(dir) = &r.chdir {
        w::check_chdir(dir).map_err(ApiError::Unprocessable)?;
        if r.workdir.is_some() || r.upload.is_some() {
            return Err(bad("chdir", "starts the job in a path on the node: not with workdir or upload"));
        }
    }
    if let Some(image) = &r.image {
        image_ref(image)?;
        if r.chdir.is_some() {
            return Err(bad(
                "chdir",
                "a path on the node is not in a container's file system: not with image",
            ));
        }
    }
    if r.image.is_none() && (r.entrypoint.is_some() || r.container_workdir.is_some()) {
        let field = if r.entrypoint.is_some() { "entrypoint" } else { "container_workdir" };
        return Err(bad(field, "applies to a container: give an image"));
    }
    if let Some(e) = &r.entrypoint
        && (e.is_empty() || e.len() > 4096 || e.contains('\0'))
    {
        return Err(bad("entrypoint", "an executable's path or name, 1 to 4096 bytes"));
    }
    if let Some(dir) = &r.container_workdir {
        w::check_chdir(dir)
            .map_err(|e| ApiError::Unprocessable(e.replacen("chdir", "container_workdir", 1)))?;
    }
    if r.array.is_some() && r.replicas.is_some_and(|n| n > 1) {
        return Err(bad("array", "an array of gangs is not supported: give array or replicas, not both"));
    }
    Ok(())
}

/// A node's inventory within the same caps as requests.
pub fn inventory(r: &RegisterRequest) -> Result<(), ApiError> {
    at_most("cpu_milli", r.cpu_milli, MAX_CPU_MILLI)?;
    at_most("memory_mib", r.memory_mib, MAX_MEMORY_MIB)?;
    if r.gpus.len() > 1024 {
        return Err(bad("gpus", "at most 1024 per node"));
    }
    r.gpus.iter().try_for_each(|g| at_most("gpus[].memory_mib", g.memory_mib, MAX_GPU_MEMORY_MIB))?;
    gantry_api::pools::check_node_labels(&r.labels).map_err(ApiError::Unprocessable)
}

/// An address a node's peers reach it at: a host name or an IP address.
pub fn address(field: &str, value: &str) -> Result<(), ApiError> {
    match gantry_api::types::address_problem(value) {
        Some(why) => Err(bad(field, why)),
        None => Ok(()),
    }
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

/// Declared environment: well-formed names Gantry does not set itself, at most 256 of them and
/// 64 KiB in all.
pub fn env(vars: &std::collections::BTreeMap<String, String>) -> Result<(), ApiError> {
    if vars.len() > 256 {
        return Err(bad("env", "at most 256 variables"));
    }
    if vars.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > 64 * 1024 {
        return Err(bad("env", "longer than 64 KiB in all"));
    }
    vars.iter().try_for_each(|(k, v)| crate::job_env::check(k, v).map_err(ApiError::Unprocessable))
}

/// A container image reference as `docker pull` reads it (422 with the sentence otherwise).
pub(crate) fn image_ref(image: &str) -> Result<(), ApiError> {
    gantry_image::Reference::parse(image)
        .map(drop)
        .map_err(|e| ApiError::Unprocessable(format!("image: {}", e.trim_start_matches("image "))))
}
