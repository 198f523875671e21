//! Shared helpers: an exporter over a backend (the simulated fleet, or NVML on the fake
//! library), and a text-format parser.

use gantry_agent::exporter::{Exporter, ExporterConfig, server};
use gantry_gpu::findings::FindingsConfig;
use gantry_gpu::health::HealthConfig;
use gantry_gpu::{Collector, FleetHandle, FleetSpec, GpuBackend, SimulatedBackend};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// One sample line of the text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses sample lines and `# TYPE` lines (enough for our own output: no escapes inside values
/// other than the ones `escape` writes, which the tests do not use).
pub fn parse(body: &str) -> (Vec<Series>, BTreeMap<String, String>) {
    let mut types = BTreeMap::new();
    let mut series = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line has a type");
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (head, value) = line.rsplit_once(' ').expect("sample line has a value");
        let (name, labels) = match head.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (head, ""),
        };
        let labels = labels
            .split("\",")
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once("=\"").expect("label pair");
                (k.to_owned(), v.trim_end_matches('"').to_owned())
            })
            .collect();
        series.push(Series { name: name.to_owned(), labels, value: value.parse().expect("numeric value") });
    }
    (series, types)
}

/// The value of `name` on GPU `gpu`.
pub fn gpu_value(series: &[Series], name: &str, gpu: u32) -> Option<f64> {
    series.iter().find(|s| s.name == name && s.labels.get("gpu") == Some(&gpu.to_string())).map(|s| s.value)
}

/// A simulated fleet behind an exporter served on an OS-chosen loopback port.
pub struct Running {
    pub addr: SocketAddr,
    pub fleet: FleetHandle,
    exporting: Exporting,
}

impl Running {
    pub fn start(spec: &str, interval: Duration, health: HealthConfig) -> Self {
        let backend = SimulatedBackend::new(&FleetSpec::parse(spec, 11).expect("spec")).expect("fleet");
        let fleet = backend.handle();
        let exporting = Exporting::start(Box::new(backend), interval, health, PathBuf::from("/nonexistent"));
        Self { addr: exporting.addr, fleet, exporting }
    }

    /// Body of `/metrics`.
    pub fn scrape(&self) -> String {
        self.exporting.scrape()
    }

    /// Scrapes until `pred` holds (bounded), returning the last parse.
    pub fn scrape_until(&self, what: &str, pred: impl Fn(&[Series]) -> bool) -> Vec<Series> {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (series, _) = parse(&self.scrape());
            if pred(&series) {
                return series;
            }
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An exporter over any backend, served on an OS-chosen loopback port; stopped when dropped.
pub struct Exporting {
    pub addr: SocketAddr,
    _exporter: Exporter,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl Exporting {
    /// Starts the sampler over `backend` (processes attributed from `proc_root`) and serves it.
    pub fn start(
        backend: Box<dyn GpuBackend>,
        interval: Duration,
        health: HealthConfig,
        proc_root: PathBuf,
    ) -> Self {
        let collector = Collector::new(backend, health, FindingsConfig::default());
        let cfg = ExporterConfig {
            interval,
            hostname: "test-node".to_owned(),
            proc_root,
            pods: None,
            pod_logs: None,
        };
        let exporter = Exporter::start(collector, cfg).expect("sampler starts");
        let router = server::router(exporter.cell(), interval * 5);
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("local addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("tokio listener");
                server::serve(listener, router, async move {
                    let _ = rx.await;
                })
                .await
                .expect("server runs");
            });
        });
        Self { addr, _exporter: exporter, shutdown: Some(tx), server: Some(server) }
    }

    /// Body of `/metrics`.
    pub fn scrape(&self) -> String {
        let r = gantry_agent::exporter::client::get(self.addr, "/metrics", Duration::from_secs(5))
            .expect("scrape");
        assert_eq!(r.status, 200);
        r.body
    }
}

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
}

/// Health settings short enough for tests.
pub fn quick_health() -> HealthConfig {
    HealthConfig {
        quiet_period: Duration::from_secs(3),
        probe_backoff_initial: Duration::from_millis(500),
        ..HealthConfig::default()
    }
}
