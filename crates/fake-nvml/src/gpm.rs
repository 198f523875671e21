//! GPM (GPU performance monitoring, Hopper and newer): a sample records its GPU and time;
//! metrics between two samples are the scripted percentages at the second sample's time.

use crate::{INVALID_ARGUMENT, NOT_SUPPORTED, Ret, SUCCESS, b, put, with_gpu, with_library};

fn sample_id(s: b::nvmlGpmSample_t) -> usize {
    s as usize
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: b::nvmlDevice_t,
    support: *mut b::nvmlGpmSupport_t,
) -> Ret {
    // SAFETY: `support` is null or valid (NVML's contract).
    match unsafe { support.as_ref() } {
        None => return INVALID_ARGUMENT,
        Some(s) if s.version != b::NVML_GPM_SUPPORT_VERSION => return crate::VERSION_MISMATCH,
        Some(_) => {}
    }
    let v = with_gpu("nvmlGpmQueryDeviceSupport", device, |c| {
        Ok(b::nvmlGpmSupport_t {
            version: b::NVML_GPM_SUPPORT_VERSION,
            isSupportedDevice: u32::from(c.gpu.gpm),
        })
    });
    // SAFETY: checked non-null above.
    unsafe { put(support, v) }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut b::nvmlGpmSample_t) -> Ret {
    let id = with_library(|l| {
        let id = l.id();
        l.samples.insert(id, None);
        Ok(std::ptr::without_provenance_mut(id))
    });
    // SAFETY: `sample` is null or valid.
    unsafe { put(sample, id) }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlGpmSampleFree(sample: b::nvmlGpmSample_t) -> Ret {
    with_library(|l| l.samples.remove(&sample_id(sample)).map(|_| ()).ok_or(INVALID_ARGUMENT))
        .err()
        .unwrap_or(SUCCESS)
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlGpmSampleGet(device: b::nvmlDevice_t, sample: b::nvmlGpmSample_t) -> Ret {
    let taken = with_gpu("nvmlGpmSampleGet", device, |c| {
        if c.gpu.gpm { Ok((c.index, c.now)) } else { Err(NOT_SUPPORTED) }
    });
    let r = taken.and_then(|t| {
        with_library(|l| {
            *l.samples.get_mut(&sample_id(sample)).ok_or(INVALID_ARGUMENT)? = Some(t);
            Ok(())
        })
    });
    r.err().unwrap_or(SUCCESS)
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut b::nvmlGpmMetricsGet_t) -> Ret {
    // SAFETY: `request` is null or valid (NVML's contract).
    let Some(req) = (unsafe { request.as_mut() }) else {
        return INVALID_ARGUMENT;
    };
    if req.version != b::NVML_GPM_METRICS_GET_VERSION {
        return crate::VERSION_MISMATCH;
    }
    let taken = with_library(|l| {
        let get = |s| l.samples.get(&sample_id(s)).copied().flatten().ok_or(INVALID_ARGUMENT);
        let ((g1, _), (g2, t2)) = (get(req.sample1)?, get(req.sample2)?);
        if g1 != g2 {
            return Err(INVALID_ARGUMENT);
        }
        let gpu = l.scenario.gpus.get(g2).ok_or(INVALID_ARGUMENT)?;
        Ok(gpu.reading_at(t2))
    });
    let reading = match taken {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some(metrics) = req.metrics.get_mut(..req.numMetrics as usize) else {
        return INVALID_ARGUMENT;
    };
    for m in metrics {
        let value = match m.metricId {
            b::nvmlGpmMetricId_t_NVML_GPM_METRIC_GRAPHICS_UTIL => reading.gpm_graphics_percent,
            b::nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL => reading.gpm_tensor_percent,
            b::nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL => reading.gpm_dram_percent,
            _ => None,
        };
        (m.nvmlReturn, m.value) = match value {
            Some(v) => (SUCCESS, v),
            None => (NOT_SUPPORTED, 0.0),
        };
    }
    SUCCESS
}
