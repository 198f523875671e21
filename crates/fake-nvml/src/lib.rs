//! A fake `libnvidia-ml.so.1` for tests: the real NVML adapter (`gantry-gpu`'s `NvmlBackend`,
//! through `nvml-wrapper`) loads it instead of NVIDIA's library and reads scripted GPUs.
//!
//! What it is: a `cdylib` exporting the NVML C functions the adapter calls (and the three its
//! wrapper's destructors call), with the types and signatures of the bindings `nvml-wrapper`
//! loads them through — `signatures.rs` fails to compile if one drifts. Behaviour comes from a
//! scenario file ([`scenario`]): GPUs and their readings over time in NVML's units, compute
//! processes, XID and ECC events delivered through event sets, a GPU that falls off the bus,
//! functions that answer `NOT_SUPPORTED`, MIG mode, GPM, an old driver version.
//!
//! What it is not: a model of a GPU. It answers what the scenario says and checks only what a
//! caller could get wrong (null pointers, struct versions, buffer sizes, unknown handles).
//! `nvml-wrapper` resolves every symbol when it loads the library but only fails when one that
//! is missing is called, so a function the adapter starts calling must be added here (until
//! then a required call fails with "the NVIDIA driver is too old (its library lacks …)" and an
//! optional reading is absent).
//!
//! Where the scenario comes from, first match wins: `fake-nvml.toml` in the directory the
//! library was loaded from (tests copy the library into a temporary directory with a scenario
//! beside it, so parallel tests never share one), the file named by `GANTRY_FAKE_NVML_SCENARIO`,
//! else the built-in `scenarios/h200.toml`. Time is seconds since `nvmlInit_v2`, or, with
//! `clock = "file"`, the number in `fake-nvml.now` beside the scenario.
//!
//! Start reading at [`scenario`], then `system.rs` (init, handles) and `device.rs`.

#![allow(unsafe_code)] // reason: this crate is a C library: it exports `#[no_mangle] extern "C"` functions and writes through the pointers its callers pass.

mod device;
mod events;
mod gpm;
pub mod scenario;
mod signatures;
mod system;

use nvml_wrapper_sys::bindings as b;
use scenario::{Clock, Gpu, Reading, Scenario};
use std::collections::BTreeMap;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// The scenario file looked for beside the library.
pub const SCENARIO_FILE: &str = "fake-nvml.toml";
/// The clock file looked for beside the scenario when `clock = "file"`.
pub const CLOCK_FILE: &str = "fake-nvml.now";
/// The variable naming a scenario file.
pub const SCENARIO_ENV: &str = "GANTRY_FAKE_NVML_SCENARIO";
/// The scenario used when no other is found: two H200s, one busy.
pub const DEFAULT_SCENARIO: &str = include_str!("../scenarios/h200.toml");
/// GPUs a scenario may hold (device handles point into a static array this long).
pub const MAX_GPUS: usize = 64;

pub(crate) type Ret = b::nvmlReturn_t;
pub(crate) const SUCCESS: Ret = b::nvmlReturn_enum_NVML_SUCCESS;
pub(crate) const UNINITIALIZED: Ret = b::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub(crate) const INVALID_ARGUMENT: Ret = b::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub(crate) const NOT_SUPPORTED: Ret = b::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub(crate) const INSUFFICIENT_SIZE: Ret = b::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub(crate) const TIMEOUT: Ret = b::nvmlReturn_enum_NVML_ERROR_TIMEOUT;
pub(crate) const GPU_IS_LOST: Ret = b::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub(crate) const VERSION_MISMATCH: Ret = b::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub(crate) const UNKNOWN: Ret = b::nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// What one loaded copy of the library knows. Each copy (each file) has its own.
#[derive(Debug)]
pub(crate) struct Library {
    pub scenario: Scenario,
    /// Directory of the scenario file (for the clock file); `None` for the built-in one.
    pub dir: Option<PathBuf>,
    pub started: Instant,
    /// `nvmlInit_v2` calls not yet matched by `nvmlShutdown`.
    pub inits: u32,
    pub event_sets: BTreeMap<usize, events::EventSet>,
    /// GPM samples: the GPU and time they were taken, once taken.
    pub samples: BTreeMap<usize, Option<(usize, f64)>>,
    pub next_id: usize,
}

impl Library {
    /// The fake's time in seconds.
    pub fn now(&self) -> f64 {
        match (self.scenario.clock, &self.dir) {
            (Clock::Wall, _) => self.started.elapsed().as_secs_f64(),
            (Clock::File, Some(dir)) => std::fs::read_to_string(dir.join(CLOCK_FILE))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0.0),
            (Clock::File, None) => 0.0,
        }
    }

    /// A fresh id for an event set or GPM sample (never 0: handles are non-null).
    pub fn id(&mut self) -> usize {
        self.next_id += 1;
        self.next_id
    }
}

static LIBRARY: Mutex<Option<Library>> = Mutex::new(None);

pub(crate) fn lock() -> MutexGuard<'static, Option<Library>> {
    LIBRARY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` on the initialised library, or answers `NVML_ERROR_UNINITIALIZED`.
pub(crate) fn with_library<R>(f: impl FnOnce(&mut Library) -> Result<R, Ret>) -> Result<R, Ret> {
    match lock().as_mut() {
        Some(l) if l.inits > 0 => f(l),
        _ => Err(UNINITIALIZED),
    }
}

/// One GPU at one moment, for a device query.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub gpu: &'a Gpu,
    pub index: usize,
    pub now: f64,
    pub reading: Reading,
}

/// Runs a device query: checks the handle, a lost GPU, and whether `call` is scripted as not
/// supported, then hands `f` the GPU's readings at the current time.
pub(crate) fn with_gpu<R>(
    call: &str,
    dev: b::nvmlDevice_t,
    f: impl FnOnce(&Ctx<'_>) -> Result<R, Ret>,
) -> Result<R, Ret> {
    with_library(|l| {
        let index =
            system::device_index(dev).filter(|i| *i < l.scenario.gpus.len()).ok_or(INVALID_ARGUMENT)?;
        let gpu = &l.scenario.gpus[index];
        let now = l.now();
        if gpu.lost_at(now) && call != "nvmlDeviceGetIndex" {
            return Err(GPU_IS_LOST);
        }
        if l.scenario.not_supported.iter().chain(&gpu.not_supported).any(|n| n == call) {
            return Err(NOT_SUPPORTED);
        }
        f(&Ctx { gpu, index, now, reading: gpu.reading_at(now) })
    })
}

/// Writes an answer through an out pointer.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, answer: Result<T, Ret>) -> Ret {
    match answer {
        Err(e) => e,
        // SAFETY: the caller passes a pointer NVML's contract says is valid or null.
        Ok(v) => match unsafe { out.as_mut() } {
            Some(o) => {
                *o = v;
                SUCCESS
            }
            None => INVALID_ARGUMENT,
        },
    }
}

/// Writes a string into a caller's buffer of `len` bytes, NUL-terminated.
///
/// # Safety
/// `out` is null or valid for writes of `len` bytes.
pub(crate) unsafe fn put_str(out: *mut c_char, len: u32, answer: Result<String, Ret>) -> Ret {
    let s = match answer {
        Ok(s) => s,
        Err(e) => return e,
    };
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    if s.len() + 1 > len as usize {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: `out` holds `len` bytes and `s.len() + 1 <= len`.
    let buf = unsafe { std::slice::from_raw_parts_mut(out, s.len() + 1) };
    fill(buf, &s);
    SUCCESS
}

/// Copies `s` into a fixed C string field, truncating, always NUL-terminated.
pub(crate) fn fill(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, c) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = c as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// Finds and parses the scenario (see the crate docs for the order).
pub(crate) fn load() -> Result<Library, String> {
    let beside = system::own_dir().map(|d| d.join(SCENARIO_FILE)).filter(|p| p.is_file());
    let named = std::env::var_os(SCENARIO_ENV).map(PathBuf::from);
    let (text, dir) = match beside.or(named) {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            (text, path.parent().map(Path::to_path_buf))
        }
        None => (DEFAULT_SCENARIO.to_owned(), None),
    };
    let scenario = Scenario::parse(&text, signatures::EXPORTED).map_err(|e| format!("bad scenario: {e}"))?;
    if scenario.gpus.len() > MAX_GPUS {
        return Err(format!("bad scenario: at most {MAX_GPUS} GPUs"));
    }
    Ok(Library {
        scenario,
        dir,
        started: Instant::now(),
        inits: 0,
        event_sets: BTreeMap::new(),
        samples: BTreeMap::new(),
        next_id: 0,
    })
}
