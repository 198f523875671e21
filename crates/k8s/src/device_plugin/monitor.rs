//! GPU health for the device plugin: the GPU layer's [`Collector`] (events → health state
//! machine, re-probes, quiet period) on a thread of its own, published as one flag per GPU.
//!
//! A GPU serves — its devices are `Healthy` — while its state is healthy or suspect; it is
//! `Unhealthy` while unhealthy or recovering, and `Healthy` again once the state machine says so
//! (unlike NVIDIA's plugin, which never gives a GPU back before it restarts). When a whole
//! collection fails (the event poll itself errors), every GPU is reported unhealthy, as NVIDIA's
//! plugin does, until a collection succeeds again.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gantry_gpu::Collector;
use gantry_gpu::health::HealthState;
use tokio::sync::watch;

/// Whether a GPU in `state` may be given out.
pub fn serves(state: HealthState) -> bool {
    matches!(state, HealthState::Healthy | HealthState::Suspect)
}

/// The running monitor; dropping it stops the thread.
#[derive(Debug)]
pub struct HealthMonitor {
    health: watch::Receiver<Vec<bool>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HealthMonitor {
    /// Runs one collection now (so the first device list is real), then one every `interval`.
    pub fn start(mut collector: Collector, interval: Duration) -> std::io::Result<Self> {
        let start = Instant::now();
        let gpus = collector.backend().inventory().len();
        let first = cycle(&mut collector, start, gpus);
        let (tx, health) = watch::channel(first);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new().name("gpu-health".to_owned()).spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let now = cycle(&mut collector, start, gpus);
                tx.send_if_modified(|old| {
                    let changed = *old != now;
                    *old = now;
                    changed
                });
            }
        })?;
        Ok(Self { health, stop: Some(stop), thread: Some(thread) })
    }

    /// One flag per GPU (by index), updated on every change.
    pub fn subscribe(&self) -> watch::Receiver<Vec<bool>> {
        self.health.clone()
    }
}

impl Drop for HealthMonitor {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn cycle(collector: &mut Collector, start: Instant, gpus: usize) -> Vec<bool> {
    match collector.collect(start.elapsed()) {
        Ok(c) => {
            for t in &c.transitions {
                tracing::info!(gpu = t.gpu, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, "GPU health changed");
            }
            c.gpus.iter().map(|g| serves(g.health)).collect()
        }
        Err(e) => {
            tracing::warn!(error = %e, "GPU health collection failed; reporting every GPU unhealthy");
            vec![false; gpus]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_gpu::findings::FindingsConfig;
    use gantry_gpu::health::HealthConfig;
    use gantry_gpu::{FaultKind, FleetSpec, SimulatedBackend};

    #[test]
    fn a_fatal_xid_turns_a_gpu_unhealthy_and_it_serves_again_after_recovery() {
        let backend =
            SimulatedBackend::new(&FleetSpec::from_flag_or_file("2xH100", 1).expect("spec")).expect("fleet");
        let fleet = backend.handle();
        let cfg = HealthConfig {
            quiet_period: Duration::from_millis(50),
            probe_backoff_initial: Duration::from_millis(10),
            ..HealthConfig::default()
        };
        let monitor = HealthMonitor::start(
            Collector::new(Box::new(backend), cfg, FindingsConfig::default()),
            Duration::from_millis(5),
        )
        .expect("thread starts");
        let mut rx = monitor.subscribe();
        assert_eq!(*rx.borrow_and_update(), [true, true]);
        fleet.inject_now(1, FaultKind::Xid(79)).expect("inject");
        let wait_for = |rx: &mut watch::Receiver<Vec<bool>>, want: [bool; 2]| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while *rx.borrow_and_update() != want {
                assert!(Instant::now() < deadline, "health never became {want:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        wait_for(&mut rx, [true, false]);
        wait_for(&mut rx, [true, true]);
        fleet.inject_now(0, FaultKind::Xid(13)).expect("inject");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*rx.borrow(), [true, true], "an application XID does not take a GPU away");
    }
}
