//! `gantry bench load`: a mixed request load from many keep-alive clients against a `gantry
//! server` child process (so its resident memory can be read from `/proc/<pid>/status` apart
//! from the clients'), on a fresh store in a temporary directory. Half the requests submit a
//! job, 30 % get one of the client's own jobs, 20 % list the newest 100. There is no agent:
//! every job stays pending, so the queue the scheduler scans grows for the whole run.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use gantry_core::{RandomSource, SplitMix64};
use serde_json::{Value, json};

use crate::cmd::client::ClientContext;

/// Arguments of `gantry bench load`.
#[derive(Debug, Args)]
pub struct LoadBenchArgs {
    /// Concurrent keep-alive clients (each sends one request at a time).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    clients: u32,
    /// Seconds of load.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    duration: u64,
    /// Seconds to wait after the load before the last memory reading.
    #[arg(long, default_value_t = 10)]
    idle: u64,
    /// Serve over TLS (the clients pin the server's CA); without it the server runs `--no-tls`.
    #[arg(long)]
    tls: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Where the server keeps its store (default: a fresh directory under the system temp dir,
    /// removed after; a given one is kept, e.g. to restart a server on the queue the load left).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Submit,
    Get,
    List,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Submit => "submit",
            Kind::Get => "get",
            Kind::List => "list",
        }
    }
}

/// What one client saw.
#[derive(Debug, Default)]
struct Tally {
    latencies: BTreeMap<Kind, Vec<Duration>>,
    server_errors: u64,
    client_errors: u64,
    failures: u64,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        for (kind, mut l) in other.latencies {
            self.latencies.entry(kind).or_default().append(&mut l);
        }
        self.server_errors += other.server_errors;
        self.client_errors += other.client_errors;
        self.failures += other.failures;
    }
}

/// Runs the benchmark.
pub fn run(args: LoadBenchArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.data_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        return run_in(&args, dir);
    }
    let dir = tempfile_dir()?;
    let result = run_in(&args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("gantry-bench-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

fn run_in(args: &LoadBenchArgs, dir: &Path) -> anyhow::Result<()> {
    let mut server = Server::start(dir, args.tls)?;
    let outcome = tokio::runtime::Runtime::new()?.block_on(load(args, &server));
    server.stop();
    let (tally, wall, rss) = outcome?;
    let report = report(args, &tally, wall, &rss, server.pid);
    if args.json {
        println!("{report}");
    } else {
        print_text(&report);
    }
    Ok(())
}

/// The `gantry server` child.
struct Server {
    child: Child,
    pid: u32,
    url: String,
    config: ClientContext,
}

impl Server {
    fn start(dir: &Path, tls: bool) -> anyhow::Result<Self> {
        let config_path = dir.join("config.toml");
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.args(["server", "--listen", "127.0.0.1:0", "--data-dir"]).arg(dir.join("data"));
        // Plain HTTP unless asked, as the figures in docs/control-plane.md were measured; every
        // client comes from loopback, so the per-address cap must admit them all.
        cmd.arg(if tls { "--tls" } else { "--no-tls" });
        cmd.args(["--max-connections-per-address", "1000000"]);
        // Its own client config, so the user's is left alone; warnings only on stderr.
        cmd.env("GANTRY_CONFIG", &config_path).env("GANTRY_LOG", "warn").env_remove("GANTRY_DATA_DIR");
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?;
        let pid = child.id();
        let stdout = child.stdout.take().context("no stdout from gantry server")?;
        let mut url = None;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line?;
            if let Some(rest) = line.split_once(" is up at ").map(|(_, r)| r) {
                url = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
        }
        let Some(url) = url else {
            let _ = child.kill();
            bail!("gantry server exited before it was up");
        };
        let text = std::fs::read_to_string(&config_path)?;
        let config = crate::cmd::client::parse_config(&text)?.current().cloned().unwrap_or_default();
        Ok(Self { child, pid, url, config })
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Memory readings, KiB.
#[derive(Debug, Default)]
struct Rss {
    start: u64,
    peak: u64,
    after_load: u64,
    after_idle: u64,
    /// The heap and other private memory (RSS less file-backed and shared pages) after idle.
    anon_after_idle: u64,
    /// RSS once a second during the load.
    during: Vec<u64>,
}

async fn load(args: &LoadBenchArgs, server: &Server) -> anyhow::Result<(Tally, Duration, Rss)> {
    let ca = server.config.ca_pem()?;
    let admin = server.config.token.clone().context("gantry server saved no admin token")?;
    let http = gantry_agent::runner::client::builder(ca.as_deref(), None)?.build()?;
    let resp = http
        .post(format!("{}/v1/tokens", server.url))
        .bearer_auth(&admin)
        .json(&json!({"role": "user", "team": "bench", "name": "bench load"}))
        .send()
        .await?
        .error_for_status()?;
    let token = resp.json::<Value>().await?["token"].as_str().context("no token in the answer")?.to_owned();
    let mut rss = Rss { start: status_kib(server.pid, "VmRSS")?, ..Rss::default() };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration);
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let http = gantry_agent::runner::client::builder(ca.as_deref(), None)?
            .timeout(Duration::from_secs(30))
            .build()?;
        let (url, token) = (server.url.clone(), token.clone());
        tasks.push(tokio::spawn(client(http, url, token, u64::from(c), deadline)));
    }
    let pid = server.pid;
    let sampler = tokio::spawn(async move {
        let mut during = Vec::new();
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            during.extend(status_kib(pid, "VmRSS").ok());
        }
        during
    });
    let mut tally = Tally::default();
    for t in tasks {
        tally.merge(t.await?);
    }
    let wall = started.elapsed();
    rss.during = sampler.await?;
    rss.after_load = status_kib(pid, "VmRSS")?;
    rss.peak = status_kib(pid, "VmHWM")?;
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    rss.after_idle = status_kib(pid, "VmRSS")?;
    rss.anon_after_idle = status_kib(pid, "RssAnon")?;
    Ok((tally, wall, rss))
}

/// One keep-alive client: 50 % submit, 30 % get one of its own jobs, 20 % list the newest 100.
async fn client(http: reqwest::Client, url: String, token: String, seed: u64, deadline: Instant) -> Tally {
    let mut rng = SplitMix64::new(seed);
    let mut own: Vec<i64> = Vec::new();
    let mut tally = Tally::default();
    let mut n = 0u64;
    while Instant::now() < deadline {
        let roll = rng.below(100);
        let kind = match roll {
            _ if roll < 50 || own.is_empty() => Kind::Submit,
            _ if roll < 80 => Kind::Get,
            _ => Kind::List,
        };
        let req = match kind {
            Kind::Submit => {
                n += 1;
                let body = json!({"command": ["true"], "gpus": 1, "request_id": format!("load-{seed}-{n}")});
                http.post(format!("{url}/v1/jobs")).json(&body)
            }
            Kind::Get => http.get(format!("{url}/v1/jobs/{}", own[rng.index(own.len())])),
            Kind::List => http.get(format!("{url}/v1/jobs?limit=100")),
        };
        let t = Instant::now();
        let result = async {
            let resp = req.bearer_auth(&token).send().await?;
            let status = resp.status();
            let body = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        }
        .await;
        let elapsed = t.elapsed();
        match result {
            Ok((status, body)) if status.is_success() => {
                tally.latencies.entry(kind).or_default().push(elapsed);
                if kind == Kind::Submit
                    && let Some(id) =
                        serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["id"].as_i64())
                {
                    own.push(id);
                }
            }
            Ok((status, _)) if status.is_server_error() => tally.server_errors += 1,
            Ok(_) => tally.client_errors += 1,
            Err(_) => tally.failures += 1,
        }
    }
    tally
}

fn report(args: &LoadBenchArgs, tally: &Tally, wall: Duration, rss: &Rss, pid: u32) -> Value {
    let mut kinds = serde_json::Map::new();
    let mut total = 0;
    for (kind, latencies) in &tally.latencies {
        let mut sorted = latencies.clone();
        sorted.sort();
        total += sorted.len();
        let ms = |p: f64| gantry_agent::exporter::client::percentile(&sorted, p).as_secs_f64() * 1000.0;
        let rate = sorted.len() as f64 / wall.as_secs_f64();
        kinds.insert(
            kind.name().into(),
            json!({"count": sorted.len(), "per_s": rate, "p50_ms": ms(0.50), "p99_ms": ms(0.99), "max_ms": ms(1.0)}),
        );
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    json!({
        "clients": args.clients,
        "duration_s": wall.as_secs_f64(),
        "tls": args.tls,
        "server_pid": pid,
        "requests": total,
        "requests_per_s": total as f64 / wall.as_secs_f64(),
        "kinds": kinds,
        "server_errors": tally.server_errors,
        "client_errors": tally.client_errors,
        "failures": tally.failures,
        "rss_mib": {
            "start": mib(rss.start),
            "peak": mib(rss.peak),
            "after_load": mib(rss.after_load),
            "after_idle": mib(rss.after_idle),
            "anon_after_idle": mib(rss.anon_after_idle),
            "idle_s": args.idle,
            "during_load_each_second": rss.during.iter().map(|&k| (mib(k) * 10.0).round() / 10.0).collect::<Vec<_>>(),
        },
    })
}

fn print_text(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    println!(
        "gantry bench load: {} keep-alive clients for {:.1} s against gantry server (pid {}, {})",
        r["clients"],
        f(&r["duration_s"]),
        r["server_pid"],
        if r["tls"] == true { "TLS" } else { "plain HTTP on loopback" }
    );
    println!(
        "{} requests, {:.0}/s; 5xx: {}, other errors answered: {}, requests that failed: {}",
        r["requests"],
        f(&r["requests_per_s"]),
        r["server_errors"],
        r["client_errors"],
        r["failures"]
    );
    if let Some(kinds) = r["kinds"].as_object() {
        for (name, k) in kinds {
            println!(
                "  {name:<7} {:>8} ({:>6.0}/s)  p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>8.2} ms",
                k["count"],
                f(&k["per_s"]),
                f(&k["p50_ms"]),
                f(&k["p99_ms"]),
                f(&k["max_ms"])
            );
        }
    }
    let m = &r["rss_mib"];
    println!(
        "server RSS: {:.1} MiB at start, {:.1} MiB peak, {:.1} MiB after the load, {:.1} MiB after {} s idle \
         ({:.1} MiB of it heap and other private memory)",
        f(&m["start"]),
        f(&m["peak"]),
        f(&m["after_load"]),
        f(&m["after_idle"]),
        m["idle_s"],
        f(&m["anon_after_idle"])
    );
    if let Some(during) = m["during_load_each_second"].as_array() {
        let step = during.len().div_ceil(12).max(1);
        let shown: Vec<String> = during.iter().step_by(step).map(|v| format!("{:.0}", f(v))).collect();
        println!("server RSS during the load, every {step} s, MiB: {}", shown.join(" "));
    }
}

/// A `kB` line of `/proc/<pid>/status`, in KiB.
fn status_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}
