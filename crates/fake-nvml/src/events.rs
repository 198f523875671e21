//! Event sets: scripted XID and ECC events, each delivered once per set by
//! `nvmlEventSetWait_v2` once the fake's time reaches it. As with the driver, a set only sees
//! events that happen after the GPU was registered with it.

use crate::{INVALID_ARGUMENT, NOT_SUPPORTED, Ret, SUCCESS, TIMEOUT, b, put, with_gpu, with_library};
use std::collections::BTreeSet;
use std::ffi::{c_uint, c_ulonglong};
use std::time::{Duration, Instant};

/// One event set.
#[derive(Debug, Default)]
pub(crate) struct EventSet {
    /// GPU index, registered event types, time of registration.
    registered: Vec<(usize, u64, f64)>,
    /// (GPU index, event index) already delivered.
    delivered: BTreeSet<(usize, usize)>,
}

fn set_id(set: b::nvmlEventSet_t) -> usize {
    set as usize
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlEventSetCreate(set: *mut b::nvmlEventSet_t) -> Ret {
    let id = with_library(|l| {
        let id = l.id();
        l.event_sets.insert(id, EventSet::default());
        Ok(std::ptr::without_provenance_mut(id))
    });
    // SAFETY: `set` is null or valid.
    unsafe { put(set, id) }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlEventSetFree(set: b::nvmlEventSet_t) -> Ret {
    with_library(|l| l.event_sets.remove(&set_id(set)).map(|_| ()).ok_or(INVALID_ARGUMENT))
        .err()
        .unwrap_or(SUCCESS)
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlDeviceRegisterEvents(
    device: b::nvmlDevice_t,
    types: c_ulonglong,
    set: b::nvmlEventSet_t,
) -> Ret {
    let gpu = with_gpu("nvmlDeviceRegisterEvents", device, |c| {
        // Like the driver: asking for a type the GPU cannot report is NOT_SUPPORTED.
        if types & !c.gpu.event_mask() != 0 {
            return Err(NOT_SUPPORTED);
        }
        Ok((c.index, c.now))
    });
    let r = gpu.and_then(|(index, now)| {
        with_library(|l| {
            let s = l.event_sets.get_mut(&set_id(set)).ok_or(INVALID_ARGUMENT)?;
            s.registered.retain(|(g, _, _)| *g != index);
            s.registered.push((index, types, now));
            Ok(())
        })
    });
    r.err().unwrap_or(SUCCESS)
}

/// The earliest event due on `set` that it has not delivered yet, marked delivered.
fn next_event(set: b::nvmlEventSet_t) -> Result<Option<b::nvmlEventData_t>, Ret> {
    with_library(|l| {
        let now = l.now();
        let gpus = &l.scenario.gpus;
        let s = l.event_sets.get_mut(&set_id(set)).ok_or(INVALID_ARGUMENT)?;
        let due = s
            .registered
            .iter()
            .flat_map(|&(g, types, since)| {
                let events = gpus.get(g).map(|gpu| gpu.events.as_slice()).unwrap_or_default();
                events.iter().enumerate().filter_map(move |(i, e)| {
                    let (kind, data) = e.kind();
                    let wanted = types & kind.bit() != 0 && since <= e.at_s && e.at_s <= now;
                    wanted.then_some((e.at_s, g, i, kind.bit(), data))
                })
            })
            .filter(|(_, g, i, _, _)| !s.delivered.contains(&(*g, *i)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((_, g, i, kind, data)) = due else {
            return Ok(None);
        };
        s.delivered.insert((g, i));
        const NO_INSTANCE: c_uint = 0xFFFF_FFFF;
        Ok(Some(b::nvmlEventData_t {
            device: crate::system::device_handle(g),
            eventType: kind,
            eventData: data,
            gpuInstanceId: NO_INSTANCE,
            computeInstanceId: NO_INSTANCE,
        }))
    })
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlEventSetWait_v2(
    set: b::nvmlEventSet_t,
    data: *mut b::nvmlEventData_t,
    timeout_ms: c_uint,
) -> Ret {
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        match next_event(set) {
            Err(e) => return e,
            // SAFETY: `data` is null or valid.
            Ok(Some(ev)) => return unsafe { put(data, Ok(ev)) },
            Ok(None) if Instant::now() >= deadline => return TIMEOUT,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
