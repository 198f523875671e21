//! Checking the allocation history: was any GPU ever given beyond its capacity?

use std::collections::HashMap;

use crate::model::{Allocation, Gpu};

/// Replays the allocation history in order and returns one sentence per moment a GPU held more
/// than one whole GPU of compute share or more memory than it has. Empty means no GPU was ever
/// given to two jobs that together did not fit.
pub fn conflicts(history: &[Allocation], gpus: &[Gpu]) -> Vec<String> {
    let capacity: HashMap<&str, u64> =
        gpus.iter().map(|g| (g.info.uuid.as_str(), g.info.memory_mib)).collect();
    let mut held: HashMap<&str, Vec<&Allocation>> = HashMap::new();
    let mut found = Vec::new();
    for a in history {
        let on_gpu = held.entry(a.gpu_uuid.as_str()).or_default();
        on_gpu.retain(|old| old.released_after.is_none_or(|after| after >= a.id));
        on_gpu.push(a);
        let share: u32 = on_gpu.iter().map(|x| x.share_milli).sum();
        let memory: u64 = on_gpu.iter().map(|x| x.memory_mib).sum();
        let cap = capacity.get(a.gpu_uuid.as_str()).copied().unwrap_or(u64::MAX);
        if share > 1000 || memory > cap {
            let jobs: Vec<String> = on_gpu.iter().map(|x| x.job_id.to_string()).collect();
            found.push(format!(
                "gpu {} held by jobs {} at allocation {} ({share} milli-GPU, {memory} MiB)",
                a.gpu_uuid,
                jobs.join(", "),
                a.id
            ));
        }
    }
    found
}
