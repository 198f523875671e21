//! `gantry service apply|create|get|delete` and `gantry services`: long-running replicas behind
//! the gateway.
//!
//! A service file is the API's `ServiceSpec` in YAML (the field names of issue 19), plus
//! `script:` (a file beside it, run with `/bin/sh`, instead of `command:`). A field the file does
//! not know is an error with its line; so is a bad `autoscale` block, checked here with the
//! core's types before anything is sent (the server checks it again).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gantry_api::service::{ReplicaRange, ServiceApplied, ServiceSpec, ServiceView};

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// `gantry service …`.
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Create or update a service from a file (the same file again changes nothing; a changed
    /// one replaces the replicas one at a time).
    Apply(ApplyArgs),
    /// Create a service from flags: `gantry service create echo --replicas 1..4 --port 8000 -- python3 server.py`.
    Create(CreateArgs),
    /// One service: replicas, traffic, the autoscaler's last decisions.
    Get(GetArgs),
    /// Delete a service: its replicas stop.
    Delete(DeleteArgs),
}

/// Arguments of `gantry service apply`.
#[derive(Debug, Args)]
#[command(after_help = "Example svc.yaml:
  name: echo
  replicas: 1..4            # or a number; 0..N allows scale to zero
  gpus: 1                   # or gpu_memory: 20000
  port: 8000
  command: [\"python3\", \"server.py\"]   # listens on the port in $PORT
  readiness: {path: /health, interval_s: 2, timeout_s: 1, initial_delay_s: 0, failure_threshold: 3}
  max_concurrency: 4
  scale_to_zero_after: 15m
  cold_start_timeout: 10m     # a held request gets 503 after this
  autoscale:
    sync_s: 15
    metrics: [{type: in_flight, target: 2}]
Then: gantry service apply -f svc.yaml
      curl -H \"Authorization: Bearer $TOKEN\" http://127.0.0.1:7080/<team>/echo/
      gantry service get echo")]
pub struct ApplyArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The service file (YAML; `-` reads stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    file: PathBuf,
    /// Do not upload the file's directory (as `upload: false` in the file): replicas start in
    /// an empty private directory.
    #[arg(long)]
    no_upload: bool,
}

/// Arguments of `gantry service create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The service's name.
    name: String,
    /// Replicas: a number or `MIN..MAX` (`0..N` allows scale to zero).
    #[arg(long, default_value = "1", value_parser = ReplicaRange::parse)]
    replicas: ReplicaRange,
    /// Whole GPUs per replica.
    #[arg(long, default_value_t = 0)]
    gpus: u32,
    /// A slice of one GPU per replica, MiB.
    #[arg(long, value_name = "MIB")]
    gpu_memory: Option<u64>,
    /// CPU cores per replica.
    #[arg(long)]
    cpu: Option<f64>,
    /// Host memory per replica, MiB.
    #[arg(long, value_name = "MIB")]
    memory: Option<u64>,
    /// The service's port (each replica listens on `$PORT`).
    #[arg(long)]
    port: u16,
    /// The team (default: yours).
    #[arg(long)]
    team: Option<String>,
    /// The readiness probe's path.
    #[arg(long, default_value = "/")]
    readiness_path: String,
    /// Requests one replica may have in flight at once.
    #[arg(long)]
    max_concurrency: Option<u32>,
    /// With `--replicas 0..N`: stop the last replica after this long without a request (`15m`).
    #[arg(long, value_parser = gantry_api::service::Duration::parse)]
    scale_to_zero_after: Option<gantry_api::service::Duration>,
    /// How long the gateway holds a request while a replica starts, then 503 (default `10m`).
    #[arg(long, value_parser = gantry_api::service::Duration::parse)]
    cold_start_timeout: Option<gantry_api::service::Duration>,
    /// Autoscale on requests in flight per replica, with this target (HPA's rules).
    #[arg(long, value_name = "N")]
    target_in_flight: Option<f64>,
    /// Anyone may call it through the gateway, without a token.
    #[arg(long)]
    public: bool,
    /// The command of each replica.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Arguments of `gantry service get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The service.
    name: String,
    /// Its team (default: yours).
    #[arg(long)]
    team: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Arguments of `gantry service delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The service.
    name: String,
    /// Its team (default: yours).
    #[arg(long)]
    team: Option<String>,
}

/// Arguments of `gantry services`.
#[derive(Debug, Args)]
pub struct ServicesArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Runs `gantry service …`.
pub fn run(command: ServiceCommand) -> anyhow::Result<()> {
    match command {
        ServiceCommand::Apply(a) => apply(a),
        ServiceCommand::Create(a) => create(a),
        ServiceCommand::Get(a) => get(a),
        ServiceCommand::Delete(a) => delete(a),
    }
}

fn apply(args: ApplyArgs) -> anyhow::Result<()> {
    let (text, base) = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading stdin")?;
        (text, PathBuf::from("."))
    } else {
        let text = std::fs::read_to_string(&args.file)
            .with_context(|| format!("cannot read {}", args.file.display()))?;
        (text, args.file.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf))
    };
    let upload = !args.no_upload && wants_upload(&text);
    let mut spec = parse(&text, &base)
        .with_context(|| format!("{} is not a valid service file", args.file.display()))?;
    if upload && spec.upload.is_none() {
        spec.upload = upload_dir(&args.server, spec.team.as_deref(), &base)?;
    }
    send(&args.server, &spec)
}

/// Whether the file asks for its directory to be uploaded (all but `upload: false`).
fn wants_upload(text: &str) -> bool {
    let value: Result<serde_json::Value, _> = serde_norway::from_str(text);
    !value.is_ok_and(|v| v.get("upload") == Some(&serde_json::Value::Bool(false)))
}

/// Packs `dir` (the service file's) and uploads what the team lacks, as `submit` does.
fn upload_dir(
    server: &ServerArgs,
    team: Option<&str>,
    dir: &Path,
) -> anyhow::Result<Option<gantry_api::upload::Upload>> {
    let root = std::fs::canonicalize(dir).with_context(|| format!("reading {}", dir.display()))?;
    let never: Vec<PathBuf> = super::client::config_path().into_iter().collect();
    let packed = super::upload::pack(&root, &never, gantry_api::upload::LIMIT_BYTES)?;
    if packed.manifest.entries.is_empty() {
        return Ok(None);
    }
    let api = Api::connect(server)?;
    let (done, sent) = super::upload::send(&api, team, &packed)?;
    eprintln!(
        "uploaded {}: {} files, {} ({}); {} new",
        root.display(),
        done.files,
        gantry_api::upload::human_bytes(done.bytes),
        super::upload::short(&done.digest),
        gantry_api::upload::human_bytes(sent.bytes)
    );
    Ok(Some(done))
}

fn create(a: CreateArgs) -> anyhow::Result<()> {
    let autoscale =
        a.target_in_flight.map(|t| serde_json::json!({"metrics": [{"type": "in_flight", "target": t}]}));
    let spec = ServiceSpec {
        name: a.name,
        team: a.team,
        replicas: a.replicas,
        gpus: a.gpus,
        gpu_memory: a.gpu_memory,
        cpu: a.cpu,
        memory: a.memory,
        port: a.port,
        command: a.command,
        env: Default::default(),
        labels: Default::default(),
        priority: 0,
        readiness: gantry_api::service::Readiness { path: a.readiness_path, ..Default::default() },
        max_concurrency: a.max_concurrency,
        scale_to_zero_after: a.scale_to_zero_after,
        cold_start_timeout: a.cold_start_timeout,
        autoscale,
        public: a.public,
        max_surge: None,
        max_unavailable: None,
        progress_deadline_s: None,
        drain_timeout_s: None,
        upload: None,
        image: None,
        registry_secret: None,
        volumes: Vec::new(),
    };
    checked(&spec)?;
    send(&a.server, &spec)
}

fn send(server: &ServerArgs, spec: &ServiceSpec) -> anyhow::Result<()> {
    let api = Api::connect(server)?;
    let applied: ServiceApplied = block_on(api.post("/v1/services", spec))??;
    println!(
        "service {}/{} {} (generation {})",
        applied.team, applied.name, applied.action, applied.generation
    );
    Ok(())
}

/// A service file: the spec's fields, with `script:` read beside the file.
pub fn parse(text: &str, base: &Path) -> anyhow::Result<ServiceSpec> {
    let mut value: serde_json::Value = serde_norway::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(map) = value.as_object_mut()
        && map.get("upload").is_some_and(serde_json::Value::is_boolean)
    {
        // `upload: false` (or true) says whether `service apply` uploads the directory.
        map.remove("upload");
    }
    if let Some(map) = value.as_object_mut()
        && let Some(script) = map.remove("script")
    {
        let Some(script) = script.as_str() else { bail!("script: must be a file name") };
        if map.get("command").is_some() {
            bail!("command and script: give one of them");
        }
        let path = base.join(script);
        let body = std::fs::read_to_string(&path)
            .with_context(|| format!("script: cannot read {}", path.display()))?;
        map.insert("command".into(), serde_json::json!(["/bin/sh", "-c", body]));
    }
    // Through YAML again, so that a field error names its line as the YAML reader says it.
    let spec: ServiceSpec = serde_json::from_value(value).map_err(|e| anyhow::anyhow!("{e}"))?;
    checked(&spec)?;
    Ok(spec)
}

/// The spec's own rules and the autoscale block with the core's types.
fn checked(spec: &ServiceSpec) -> anyhow::Result<()> {
    spec.check().map_err(anyhow::Error::msg)?;
    if let Some(block) = &spec.autoscale {
        let config: gantry_core::autoscale::AutoscaleConfig =
            serde_json::from_value(block.clone()).map_err(|e| anyhow::anyhow!("autoscale: {e}"))?;
        config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// `?team=T` when a team is named, else nothing.
pub(super) fn query(team: Option<&str>) -> String {
    team.map(|t| format!("?team={t}")).unwrap_or_default()
}

fn get(a: GetArgs) -> anyhow::Result<()> {
    let api = Api::connect(&a.server)?;
    let path = format!("/v1/services/{}{}", a.name, query(a.team.as_deref()));
    let v: ServiceView = block_on(api.get(&path))??;
    if table::structured(a.output, &v)? {
        return Ok(());
    }
    print!("{}", render(&v));
    Ok(())
}

/// The text `gantry service get` prints.
pub fn render(v: &ServiceView) -> String {
    let r = &v.replicas;
    let t = &v.traffic;
    let mut out = format!(
        "service   {}/{}  (generation {})\nendpoint  {}{}\nreplicas  {} desired, {} ready ({}..{})\n",
        v.team,
        v.name,
        v.generation,
        v.endpoint,
        if v.public { "  (public)" } else { "" },
        r.desired,
        r.ready,
        r.min,
        r.max
    );
    if let Some(why) = &v.reason {
        out.push_str(&format!("waiting   {why}\n"));
    }
    if let Some(why) = &v.rollout {
        out.push_str(&format!("rollout   {}\n", table::printable(why)));
    }
    out.push_str(&format!(
        "traffic   {:.1} req/s, {} in flight, {} queued, latency p50 {:.3} s p95 {:.3} s, first byte p50 {:.3} s p95 {:.3} s\n\n",
        t.rps, t.in_flight, t.queue_length, t.latency_p50_s, t.latency_p95_s, t.ttfb_p50_s, t.ttfb_p95_s
    ));
    let rows: Vec<Vec<String>> = v
        .replica_list
        .iter()
        .map(|x| {
            vec![
                x.job.to_string(),
                x.state.to_string(),
                x.generation.to_string(),
                if x.ready { "yes".into() } else { "no".into() },
                x.node.clone().unwrap_or_else(|| "-".into()),
                if x.gpus.is_empty() { "-".into() } else { x.gpus.join(",") },
                x.address.clone().unwrap_or_else(|| "-".into()),
                table::cut(x.reason.as_deref().unwrap_or("")).into_owned(),
            ]
        })
        .collect();
    out.push_str(&table::render(
        &["JOB", "STATE", "GEN", "READY", "NODE", "GPUS", "ADDRESS", "REASON"],
        &rows,
    ));
    out.push_str("\ndecisions (newest first):\n");
    for d in &v.decisions {
        let at = table::rfc3339(d.at);
        out.push_str(&format!("  {at}  {}\n", d.reason));
    }
    out
}

fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let api = Api::connect(&a.server)?;
    block_on(api.delete(&format!("/v1/services/{}{}", a.name, query(a.team.as_deref()))))??;
    println!("service {} deleted", a.name);
    Ok(())
}

/// Lists services.
pub fn list(a: ServicesArgs) -> anyhow::Result<()> {
    let api = Api::connect(&a.server)?;
    let services: Vec<ServiceView> = block_on(api.get("/v1/services"))??;
    if table::structured(a.output, &services)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = services
        .iter()
        .map(|s| {
            vec![
                s.team.clone(),
                s.name.clone(),
                format!("{}/{}", s.replicas.ready, s.replicas.desired),
                format!("{}..{}", s.replicas.min, s.replicas.max),
                format!("{:.1}", s.traffic.rps),
                s.traffic.in_flight.to_string(),
                s.endpoint.clone(),
            ]
        })
        .collect();
    table::print(&["TEAM", "NAME", "READY", "RANGE", "REQ/S", "IN FLIGHT", "ENDPOINT"], &rows);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issues_service_file_parses_and_a_typo_is_named() {
        let text = "name: echo\nreplicas: 1..4\ngpus: 1\nport: 8000\ncommand: [\"python3\", \"server.py\"]\n\
            readiness: {path: /health, interval_s: 2, timeout_s: 1, initial_delay_s: 0, failure_threshold: 3}\n\
            max_concurrency: 4\nscale_to_zero_after: 15m\nautoscale:\n  sync_s: 15\n  tolerance: 0.1\n  \
            metrics: [{type: in_flight, target: 2}]\n  behavior:\n    scale_up: {stabilization_window_s: 0, \
            select_policy: max, policies: [{type: pods, value: 4, period_s: 15}, {type: percent, value: 100, period_s: 15}]}\n    \
            scale_down: {stabilization_window_s: 300, policies: [{type: percent, value: 100, period_s: 15}]}\n";
        let spec = parse(text, Path::new(".")).expect("the issue's file");
        assert_eq!((spec.replicas.min, spec.replicas.max, spec.gpus, spec.port), (1, 4, 1, 8000));
        assert_eq!(spec.scale_to_zero_after_s(), 900);
        let typo = parse("name: echo\nport: 1\ncommand: [x]\nreplica: 2\n", Path::new("."));
        assert!(format!("{:#}", typo.expect_err("refused")).contains("unknown field `replica`"));
        let bad = parse(
            "name: echo\nport: 1\ncommand: [x]\nautoscale: {metrics: [{type: qps, target: 1}]}\n",
            Path::new("."),
        );
        assert!(format!("{:#}", bad.expect_err("refused")).contains("autoscale"));
    }
}
