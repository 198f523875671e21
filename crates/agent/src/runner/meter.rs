//! The input meter: what each running job feeds its GPUs with, read from its cgroup, and the
//! data-stall verdict of each of its GPU samples ([`gantry_gpu::stall`] holds the rule).
//!
//! Per heartbeat and running attempt, the meter reads the attempt's cgroup v2 `io.stat`
//! (`rbytes` of every device), `cpu.stat` (`usage_usec`) and `cpu.max`, and turns the change
//! since the previous heartbeat into a read rate and a CPU saturation. On a simulated fleet a
//! process whose profile models its input (`GANTRY_SIM_PROFILE=input_stall:SHARE`) says it
//! instead. Each GPU report that names the job's activity (`sample.jobs`, from
//! [`super::jobs::Jobs::attribute`]) then gets `sample.stalls`: per job, the judged
//! [`gantry_gpu::stall::StallSample`] (`activity`, `read_bytes_per_s`, `cpu_busy`, `lost`),
//! which the store adds up into the job's stalled GPU time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gantry_api::model::{GpuReport, JobId};
use gantry_gpu::stall::{self, InputActivity, StallConfig};
use serde_json::Value;

use super::cgroup::Cgroup;
use super::gpus::Gpus;
use super::jobs::Jobs;

/// One attempt's counters at one heartbeat.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    read_bytes: u64,
    cpu_usec: u64,
}

/// The previous reading of each running attempt.
#[derive(Debug, Default)]
pub struct InputMeter {
    last: HashMap<(JobId, u32), Reading>,
    cfg: StallConfig,
}

impl InputMeter {
    /// Reads every running job's input side and adds `sample.stalls` to the GPU reports.
    pub fn judge(&mut self, reports: &mut [GpuReport], jobs: &Jobs, gpus: &Gpus) {
        let running = jobs.running();
        let now = Instant::now();
        let mut inputs: HashMap<String, InputActivity> = HashMap::new();
        for (job, attempt, cgroup, sim_pids) in &running {
            let simulated = sim_pids.iter().find_map(|pid| gpus.sim_input(*pid));
            let measured = cgroup.as_ref().and_then(|c| self.measure((*job, *attempt), c, now));
            if let Some(input) = simulated.or(measured) {
                inputs.insert(job.to_string(), input);
            }
        }
        self.last.retain(|key, _| running.iter().any(|(j, a, _, _)| (*j, *a) == *key));
        for report in reports.iter_mut() {
            let Some(sample) = report.sample.as_mut().and_then(Value::as_object_mut) else { continue };
            let Some(own) = sample.get("jobs").and_then(Value::as_object) else { continue };
            let reading = sample.get("sample");
            let read = |k: &str| reading.and_then(|r| r.get(k)).and_then(Value::as_f64);
            let alone = own.len() == 1;
            let mut stalls = serde_json::Map::new();
            for (job, util) in own {
                let Some(input) = inputs.get(job) else { continue };
                let activity =
                    stall::activity(util.as_f64(), read("gpu_util_percent"), read("sm_active"), alone);
                if let Some(activity) = activity {
                    let verdict = stall::judge(&self.cfg, activity, *input);
                    stalls.insert(job.clone(), serde_json::to_value(verdict).unwrap_or(Value::Null));
                }
            }
            if !stalls.is_empty() {
                sample.insert("stalls".into(), stalls.into());
            }
        }
    }

    /// The attempt's read rate and CPU saturation since its previous reading (none on the
    /// first, or where the cgroup has no `io.stat` and `cpu.stat`).
    fn measure(&mut self, key: (JobId, u32), cgroup: &Arc<Cgroup>, now: Instant) -> Option<InputActivity> {
        let text = |name: &str| cgroup.file(name).and_then(|p| std::fs::read_to_string(p).ok());
        let io = text("io.stat");
        let cpu = text("cpu.stat").as_deref().and_then(stall::cpu_stat_usage_usec);
        if io.is_none() && cpu.is_none() {
            return None;
        }
        let reading = Reading {
            at: now,
            read_bytes: io.as_deref().map_or(0, stall::io_stat_read_bytes),
            cpu_usec: cpu.unwrap_or(0),
        };
        let before = self.last.insert(key, reading)?;
        let interval_usec = u64::try_from(now.duration_since(before.at).as_micros()).unwrap_or(u64::MAX);
        if interval_usec == 0 {
            return None;
        }
        let node_cpus = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        let cpus =
            text("cpu.max").as_deref().and_then(stall::cpu_max_cpus).unwrap_or(node_cpus).min(node_cpus);
        let read = reading.read_bytes.saturating_sub(before.read_bytes) as f64;
        Some(InputActivity {
            read_bytes_per_s: read * 1e6 / interval_usec as f64,
            cpu_busy: stall::cpu_busy(reading.cpu_usec.saturating_sub(before.cpu_usec), interval_usec, cpus),
        })
    }
}
