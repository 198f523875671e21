//! Library-wide calls: init and shutdown, versions, device count and handles.

use crate::scenario::InitError;
use crate::{INVALID_ARGUMENT, Ret, SUCCESS, UNINITIALIZED, UNKNOWN, b, lock, put, put_str, with_library};
use std::ffi::{CStr, c_char, c_int, c_uint};
use std::path::{Path, PathBuf};

/// Device handles point into this array: one byte per GPU, so a handle from another copy of the
/// library, or a made-up one, is recognised as invalid.
static DEVICES: [u8; crate::MAX_GPUS] = [0; crate::MAX_GPUS];

pub(crate) fn device_handle(index: usize) -> b::nvmlDevice_t {
    DEVICES.as_ptr().wrapping_add(index) as b::nvmlDevice_t
}

pub(crate) fn device_index(dev: b::nvmlDevice_t) -> Option<usize> {
    (dev as usize).checked_sub(DEVICES.as_ptr() as usize).filter(|i| *i < DEVICES.len())
}

/// The directory this copy of the library was loaded from.
pub(crate) fn own_dir() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let addr = DEVICES.as_ptr().cast::<libc::c_void>();
    // SAFETY: dladdr only reads the address and fills `info`.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path that lives as long as the mapping.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Path::new(std::ffi::OsStr::from_bytes(name.to_bytes())).parent().map(Path::to_path_buf)
}

fn init() -> Ret {
    let mut guard = lock();
    if guard.as_ref().is_none_or(|l| l.inits == 0) {
        match crate::load() {
            Ok(l) => *guard = Some(l),
            Err(e) => {
                eprintln!("gantry-fake-nvml: {e}");
                return UNKNOWN;
            }
        }
    }
    let Some(l) = guard.as_mut() else {
        return UNKNOWN;
    };
    match l.scenario.init_error {
        Some(InitError::DriverNotLoaded) => b::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        Some(InitError::NoPermission) => b::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        Some(InitError::Unknown) => UNKNOWN,
        None => {
            l.inits += 1;
            SUCCESS
        }
    }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlInit_v2() -> Ret {
    init()
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    init()
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlShutdown() -> Ret {
    match lock().as_mut() {
        Some(l) if l.inits > 0 => {
            l.inits -= 1;
            SUCCESS
        }
        _ => UNINITIALIZED,
    }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    let s: &'static CStr = match result {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        crate::NOT_SUPPORTED => c"Not Supported",
        crate::INSUFFICIENT_SIZE => c"Insufficient Size",
        crate::TIMEOUT => c"Timeout",
        crate::GPU_IS_LOST => c"GPU is lost",
        crate::VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> Ret {
    let v = with_library(|l| Ok(l.scenario.driver_version.clone()));
    // SAFETY: NVML's contract: `version` holds `length` bytes.
    unsafe { put_str(version, length, v) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> Ret {
    let v = with_library(|l| {
        let s = &l.scenario;
        let major = s.cuda_driver_version / 1000;
        Ok(s.nvml_version.clone().unwrap_or_else(|| format!("{major}.{}", s.driver_version)))
    });
    // SAFETY: as above.
    unsafe { put_str(version, length, v) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> Ret {
    let v = with_library(|l| Ok(l.scenario.cuda_driver_version));
    // SAFETY: `version` is null or valid (NVML's contract).
    unsafe { put(version, v) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> Ret {
    // SAFETY: same contract.
    unsafe { nvmlSystemGetCudaDriverVersion(version) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    let n = with_library(|l| Ok(l.scenario.gpus.len() as c_uint));
    // SAFETY: `count` is null or valid.
    unsafe { put(count, n) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut b::nvmlDevice_t,
) -> Ret {
    let h = with_library(|l| {
        let i = index as usize;
        let gpu = l.scenario.gpus.get(i).ok_or(INVALID_ARGUMENT)?;
        // The driver cannot hand out a GPU that fell off the bus.
        if gpu.lost_at(l.now()) {
            return Err(crate::GPU_IS_LOST);
        }
        Ok(device_handle(i))
    });
    // SAFETY: `device` is null or valid.
    unsafe { put(device, h) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetIndex(device: b::nvmlDevice_t, index: *mut c_uint) -> Ret {
    let i = crate::with_gpu("nvmlDeviceGetIndex", device, |c| Ok(c.index as c_uint));
    // SAFETY: `index` is null or valid.
    unsafe { put(index, i) }
}
