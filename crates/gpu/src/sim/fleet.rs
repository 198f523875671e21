//! State of a simulated fleet and the physics that turns load into readings.

use super::fault::{Fault, FaultKind};
use super::models::ModelSpec;
use super::noise::{mix, noise};
use super::process::SimProcess;
use super::spec::FleetSpec;
use crate::{GpuError, GpuEvent, GpuEventKind, GpuInfo, GpuSample, MIB, ProcessUsage, Throttle};
use std::collections::BTreeMap;
use std::time::Duration;

/// Mutable state of one simulated GPU.
#[derive(Debug)]
pub(crate) struct SimGpu {
    pub model: &'static ModelSpec,
    pub lost: bool,
    pub throttled_until: Option<Duration>,
    pub last_xid: u32,
    pub sbe: u64,
    pub dbe: u64,
    pub remapped_correctable: u64,
    pub remapped_uncorrectable: u64,
    pub remap_failure: bool,
    pub energy_mj: f64,
    pub nvlink_bytes: f64,
}

/// The whole fleet: GPUs, processes, pending faults and undelivered events.
#[derive(Debug)]
pub(crate) struct Fleet {
    pub seed: u64,
    pub gpus: Vec<SimGpu>,
    pub processes: BTreeMap<u32, SimProcess>,
    pub faults: Vec<Fault>,
    pub events: Vec<GpuEvent>,
    pub now: Duration,
}

const CH_UTIL: u32 = 1;
const CH_POWER: u32 = 2;
const CH_TEMP: u32 = 3;
const CH_DRAM: u32 = 4;

impl Fleet {
    pub fn new(spec: &FleetSpec) -> Self {
        let gpus = spec.gpus.iter().map(|&model| SimGpu::new(model)).collect();
        Self {
            seed: spec.seed,
            gpus,
            processes: BTreeMap::new(),
            faults: spec.faults.clone(),
            events: Vec::new(),
            now: Duration::ZERO,
        }
    }

    /// Moves the clock to `now`: integrates energy and traffic, fires due faults in time order.
    pub fn advance(&mut self, now: Duration) -> Result<(), GpuError> {
        if now < self.now {
            return Err(GpuError::TimeWentBackwards { now, last: self.now });
        }
        let dt = (now - self.now).as_secs_f64();
        for i in 0..self.gpus.len() {
            let util = self.util_percent(i, now);
            let power = self.power_watts(i, util, now);
            let g = &mut self.gpus[i];
            g.energy_mj += power * dt * 1000.0;
            if g.model.nvlinks > 0 {
                g.nvlink_bytes += util / 100.0 * 120e9 * dt;
            }
        }
        self.now = now;
        self.faults.sort_by_key(|f| f.at);
        let due = self.faults.iter().take_while(|f| f.at <= now).count();
        let fired: Vec<Fault> = self.faults.drain(..due).collect();
        for f in fired {
            self.fire(f, now);
        }
        Ok(())
    }

    fn fire(&mut self, f: Fault, now: Duration) {
        let Some(g) = self.gpus.get_mut(f.gpu as usize) else {
            return;
        };
        let event = match f.kind {
            FaultKind::Xid(n) => {
                g.last_xid = n;
                Some(GpuEventKind::Xid(n))
            }
            FaultKind::SingleBitEcc => {
                g.sbe += 1;
                g.remapped_correctable += 1;
                Some(GpuEventKind::SingleBitEcc)
            }
            FaultKind::DoubleBitEcc => {
                g.dbe += 1;
                g.remapped_uncorrectable += 1;
                Some(GpuEventKind::DoubleBitEcc)
            }
            FaultKind::RowRemapFailure => {
                // Like NVML: no event, the failure shows in the readings.
                g.remap_failure = true;
                None
            }
            FaultKind::ThermalThrottle(d) => {
                g.throttled_until = Some(f.at + d);
                None
            }
            FaultKind::FallOffBus => {
                g.lost = true;
                Some(GpuEventKind::Lost)
            }
            FaultKind::ReturnToBus => {
                g.lost = false;
                None
            }
        };
        if let Some(kind) = event {
            self.events.push(GpuEvent { gpu_index: f.gpu, at: now, kind });
        }
    }

    fn util_percent(&self, gpu: usize, now: Duration) -> f64 {
        let sum: f64 = self.on_gpu(gpu).map(|p| p.profile.percent_at(now.saturating_sub(p.started_at))).sum();
        if sum <= 0.0 {
            return 0.0;
        }
        let jitter = 1.5 * noise(self.seed, gpu as u32, CH_UTIL, millis(now));
        (sum + jitter).clamp(0.0, 100.0)
    }

    fn power_watts(&self, gpu: usize, util: f64, now: Duration) -> f64 {
        let m = self.gpus[gpu].model;
        let base = m.idle_watts + (m.power_limit_watts - m.idle_watts) * util / 100.0;
        let jitter = 0.02 * base * noise(self.seed, gpu as u32, CH_POWER, millis(now));
        (base + jitter).min(m.power_limit_watts)
    }

    fn on_gpu(&self, gpu: usize) -> impl Iterator<Item = &SimProcess> {
        self.processes.values().filter(move |p| p.gpu as usize == gpu)
    }

    pub fn memory_used_bytes(&self, gpu: usize) -> u64 {
        self.on_gpu(gpu).map(|p| p.memory_bytes).sum()
    }

    pub fn memory_free_bytes(&self, gpu: usize) -> u64 {
        let m = self.gpus[gpu].model;
        ((m.memory_mib - m.reserved_mib) * MIB).saturating_sub(self.memory_used_bytes(gpu))
    }

    /// One reading of GPU `gpu` at the fleet's current time.
    pub fn sample(&self, gpu: usize) -> Result<GpuSample, GpuError> {
        let g = &self.gpus[gpu];
        let index = gpu as u32;
        if g.lost {
            return Err(GpuError::Lost { index });
        }
        let (m, now) = (g.model, self.now);
        let util = self.util_percent(gpu, now);
        let busy = util / 100.0;
        let thermal = g.throttled_until.is_some_and(|until| now < until);
        let temp_noise = 0.5 * noise(self.seed, index, CH_TEMP, millis(now));
        let mut temp = 31.0 + 44.0 * busy + temp_noise;
        let mut sm_clock = if util > 0.0 { m.max_sm_clock_mhz } else { m.idle_sm_clock_mhz };
        if thermal {
            temp = m.slowdown_celsius + 1.0 + temp_noise.abs();
            sm_clock = sm_clock * 3 / 5;
        }
        let dram = (busy * 0.45 + 0.02 * noise(self.seed, index, CH_DRAM, millis(now))).clamp(0.0, 1.0);
        let pcie = if util > 0.0 { Some(busy * 6.0e9) } else { Some(0.0) };
        Ok(GpuSample {
            index,
            gpu_util_percent: Some(util.round()),
            mem_copy_util_percent: Some((dram * 100.0).round()),
            encoder_util_percent: Some(0.0),
            decoder_util_percent: Some(0.0),
            sm_clock_mhz: Some(sm_clock),
            mem_clock_mhz: Some(m.mem_clock_mhz),
            power_watts: Some(self.power_watts(gpu, util, now)),
            energy_millijoules: Some(g.energy_mj as u64),
            gpu_temp_celsius: Some(temp.round()),
            memory_temp_celsius: m.hbm.then(|| (temp + 4.0).round()),
            memory_used_bytes: self.memory_used_bytes(gpu),
            memory_free_bytes: self.memory_free_bytes(gpu),
            memory_reserved_bytes: m.reserved_mib * MIB,
            pcie_replay_count: Some(0),
            pcie_tx_bytes_per_second: pcie,
            pcie_rx_bytes_per_second: pcie.map(|b| b * 1.5),
            ecc_single_bit_volatile: Some(g.sbe),
            ecc_double_bit_volatile: Some(g.dbe),
            remapped_rows_correctable: m.hbm.then_some(g.remapped_correctable),
            remapped_rows_uncorrectable: m.hbm.then_some(g.remapped_uncorrectable),
            row_remap_failure: m.hbm.then_some(g.remap_failure),
            throttle: Throttle { power: false, thermal, hardware: false },
            gr_engine_active: Some((busy * 0.98).clamp(0.0, 1.0)),
            tensor_active: Some((busy * m.tensor_share).clamp(0.0, 1.0)),
            dram_active: Some(dram),
            sm_active: Some((busy * 0.9).clamp(0.0, 1.0)),
            nvlink_bytes_total: (m.nvlinks > 0).then_some(g.nvlink_bytes as u64),
            last_xid: g.last_xid,
        })
    }

    pub fn processes(&self) -> Vec<ProcessUsage> {
        self.processes
            .iter()
            .filter(|(_, p)| !self.gpus[p.gpu as usize].lost)
            .map(|(&pid, p)| ProcessUsage {
                pid,
                gpu_index: p.gpu,
                memory_used_bytes: p.memory_bytes,
                job_id: p.job_id.clone(),
                util_percent: Some(p.profile.percent_at(self.now.saturating_sub(p.started_at)).round() as u32),
            })
            .collect()
    }

    /// Inventory entries derived from the seed: stable UUIDs and bus ids.
    pub fn inventory(&self) -> Vec<GpuInfo> {
        const BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];
        let bus = |i: usize| BUSES.get(i).copied().unwrap_or(0x100 + i as u32);
        let bus_id = |i: usize| format!("00000000:{:02X}:00.0", bus(i));
        let linked: Vec<usize> = (0..self.gpus.len()).filter(|&i| self.gpus[i].model.nvlinks > 0).collect();
        (0..self.gpus.len())
            .map(|i| {
                let m = self.gpus[i].model;
                let h = mix(self.seed ^ mix(i as u64 + 1));
                let h2 = mix(h);
                let peers = if m.nvlinks > 0 {
                    linked.iter().filter(|&&j| j != i).map(|&j| bus_id(j)).collect()
                } else {
                    Vec::new()
                };
                GpuInfo {
                    index: i as u32,
                    uuid: format!(
                        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                        h >> 32,
                        (h >> 16) & 0xffff,
                        h & 0xffff,
                        h2 >> 48,
                        h2 & 0xffff_ffff_ffff
                    ),
                    name: m.product_name.to_owned(),
                    pci_bus_id: bus_id(i),
                    memory_total_bytes: m.memory_mib * MIB,
                    power_limit_watts: Some(m.power_limit_watts),
                    max_sm_clock_mhz: Some(m.max_sm_clock_mhz),
                    nvlink_peers: peers,
                    mig_enabled: false,
                }
            })
            .collect()
    }
}

impl SimGpu {
    fn new(model: &'static ModelSpec) -> Self {
        Self {
            model,
            lost: false,
            throttled_until: None,
            last_xid: 0,
            sbe: 0,
            dbe: 0,
            remapped_correctable: 0,
            remapped_uncorrectable: 0,
            remap_failure: false,
            energy_mj: 0.0,
            nvlink_bytes: 0.0,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
