//! `gantry jobs` and `gantry job <id>`.

pub mod watch;

use clap::Args;
use clap::builder::PossibleValuesParser;
use gantry_api::types::JobDetail;
use gantry_store::{Job, JobState};

use crate::cmd::client::{Api, ServerArgs, block_on};
use crate::cmd::table;

/// How `gantry jobs` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JobsOutput {
    /// Aligned columns, GPUs by short id.
    Table,
    /// Also the node, full GPU UUIDs and start time.
    Wide,
    /// JSON for programs (times also as RFC 3339: `submitted_rfc3339`, …).
    Json,
    /// YAML, with the same fields as JSON.
    Yaml,
    /// `job/ID` per line, for scripts (`kubectl get -o name`).
    Name,
}

/// Arguments of `gantry jobs`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry jobs --state running -o wide
  gantry jobs --state pending,running --user alice --since 2h -o name   # job/12 per line
  gantry jobs -o json | jq '.[] | select(.state == \"failed\") | .id'
  gantry jobs -l exp=lr-sweep -o yaml     # only jobs labelled exp=lr-sweep
  gantry jobs -w                          # then a line per change, until Ctrl-C
  gantry jobs --array 12                  # the members of array 12 (ARRAY column: 12_0, 12_1, …)")]
pub struct JobsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: JobsOutput,
    /// Only jobs in these states (comma-separated). Example: `--state pending,running`.
    #[arg(long, value_delimiter = ',',
        value_parser = PossibleValuesParser::new(JobState::ALL.iter().map(|s| s.as_str())))]
    state: Vec<String>,
    /// Only this team's jobs.
    #[arg(long)]
    team: Option<String>,
    /// Only jobs this user submitted.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Only jobs submitted in the last DURATION: `90s`, `30m`, `2h`, `1d`. Example: `--since 2h`.
    #[arg(long, value_name = "DURATION", value_parser = crate::cmd::submit::parse_time)]
    since: Option<u64>,
    /// At most this many (up to 1000); without it every job. Newest first either way.
    #[arg(long)]
    limit: Option<u32>,
    /// Only jobs with these labels: `-l KEY=VALUE[,KEY=VALUE…]` (every pair must match).
    /// Example: `-l exp=lr-sweep`.
    #[arg(short = 'l', long = "selector", value_name = "KEY=VALUE", value_parser = parse_selector)]
    selector: Option<String>,
    /// Only the members of this array.
    #[arg(long, value_name = "ARRAY_ID")]
    array: Option<i64>,
    /// Watch: print the jobs, then a line for each job that changes, until Ctrl-C (JSON and
    /// YAML: one document per change). Example: `gantry jobs -w -l exp=lr-sweep`.
    #[arg(short = 'w', long)]
    watch: bool,
}

fn parse_selector(text: &str) -> Result<String, String> {
    gantry_api::workflow::parse_selector(text).map(|_| text.to_owned())
}

/// Jobs per request when listing them all.
const PAGE: u32 = 1000;

/// Lists jobs.
pub fn list(args: JobsArgs) -> anyhow::Result<()> {
    let mut query = Vec::new();
    if let [s] = args.state.as_slice() {
        query.push(format!("state={s}"));
    }
    if let Some(t) = &args.team {
        query.push(format!("team={t}"));
    }
    if let Some(l) = &args.selector {
        query.push(format!("label={l}"));
    }
    if let Some(a) = args.array {
        query.push(format!("array={a}"));
    }
    query.push(format!("limit={}", args.limit.unwrap_or(PAGE)));
    let path = format!("/v1/jobs?{}", query.join("&"));
    let api = Api::connect(&args.server)?;
    if args.watch {
        return block_on(watch::watch(&api, &path, args.output))?;
    }
    let filtered = args.state.len() > 1 || args.user.is_some() || args.since.is_some();
    let mut jobs = if args.limit.is_some() && !filtered {
        block_on(api.get::<Vec<Job>>(&path))??
    } else {
        block_on(all_pages(&api, &path))??
    };
    let since = args.since.map(since_ms);
    jobs.retain(|j| {
        (args.state.is_empty() || args.state.iter().any(|s| s == j.state.as_str()))
            && args.user.as_ref().is_none_or(|u| j.user.as_ref() == Some(u))
            && since.is_none_or(|t| j.submitted_at >= t)
    });
    if let Some(limit) = args.limit {
        jobs.truncate(limit as usize);
    }
    print(&jobs, args.output)
}

/// Prints jobs in the chosen format.
pub fn print(jobs: &[Job], output: JobsOutput) -> anyhow::Result<()> {
    let (header, rows) = rows(jobs, output == JobsOutput::Wide);
    match output {
        JobsOutput::Json => table::json(&jobs.iter().map(with_times).collect::<Vec<_>>()),
        JobsOutput::Yaml => table::yaml(&jobs.iter().map(with_times).collect::<Vec<_>>()),
        JobsOutput::Name => {
            jobs.iter().for_each(|j| println!("job/{}", j.id));
            Ok(())
        }
        JobsOutput::Table | JobsOutput::Wide => {
            table::print(&header, &rows);
            Ok(())
        }
    }
}

/// The table's header and rows; an ARRAY column (`12_3`) when a job is in an array.
pub fn rows(jobs: &[Job], wide: bool) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let now = gantry_server::now_ms();
    let arrays = jobs.iter().any(|j| j.array.is_some());
    let mut header = vec!["ID"];
    if arrays {
        header.push("ARRAY");
    }
    header.extend(["NAME", "TEAM", "USER", "STATE", "ASKED", "GPUS", "AGE", "ELAPSED", "REASON"]);
    if wide {
        header.extend(["NODE", "STARTED", "PRIORITY", "LABELS"]);
    }
    let rows = jobs
        .iter()
        .map(|j| {
            let mut cells = row(j, now, wide);
            if arrays {
                cells.insert(1, j.array.map(|a| format!("{}_{}", a.id, a.index)).unwrap_or_default());
            }
            cells
        })
        .collect();
    (header, rows)
}

/// The job as the API gives it plus its times in RFC 3339 (the epoch-ms fields stay: scripts
/// read them).
pub fn with_times(j: &Job) -> serde_json::Value {
    let mut value = serde_json::to_value(j).expect("a job serializes");
    if let Some(map) = value.as_object_mut() {
        for (field, ms) in
            [("submitted", Some(j.submitted_at)), ("started", j.started_at), ("finished", j.finished_at)]
        {
            map.insert(format!("{field}_rfc3339"), ms.map(table::rfc3339).into());
        }
    }
    value
}

/// The time `seconds` ago, ms since the epoch (`--since`).
pub fn since_ms(seconds: u64) -> i64 {
    gantry_server::now_ms().saturating_sub(i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX))
}

/// Follows `x-next-before` until the last page; newest first.
pub async fn all_pages(api: &Api, path: &str) -> anyhow::Result<Vec<Job>> {
    let (mut all, mut next): (Vec<Job>, _) = api.get_page(path).await?;
    while let Some(before) = next {
        let (page, after): (Vec<Job>, _) = api.get_page(&format!("{path}&before={before}")).await?;
        all.extend(page);
        next = after;
    }
    Ok(all)
}

fn row(j: &Job, now: i64, wide: bool) -> Vec<String> {
    let gpus = if !j.state.is_active() {
        String::new()
    } else if wide {
        j.gpu_uuids.join(",")
    } else {
        j.gpu_uuids.iter().map(|u| short_gpu(u)).collect::<Vec<_>>().join(",")
    };
    let elapsed = j.started_at.map(|s| table::span(j.finished_at.unwrap_or(now) - s)).unwrap_or_default();
    let mut cells = vec![
        j.id.to_string(),
        j.name.clone(),
        j.team.clone(),
        j.user.clone().unwrap_or_else(|| "-".into()),
        state(j),
        asked(j),
        gpus,
        table::span(now - j.submitted_at),
        elapsed,
        j.reason.clone().unwrap_or_default(),
    ];
    if wide {
        cells.push(j.node_id.clone().unwrap_or_default());
        cells.push(j.started_at.map(table::when).unwrap_or_default());
        cells.push(j.priority.to_string());
        cells.push(j.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","));
    }
    cells
}

/// The state, `cancelling` for a running job whose cancel the agent has not yet confirmed.
pub fn state(j: &Job) -> String {
    match j.stop.as_deref() {
        Some("cancel") if j.state.is_active() => "cancelling".into(),
        _ => j.state.to_string(),
    }
}

/// `GPU-1a2b3c4d-…` as `1a2b3c4d`, enough to tell a node's GPUs apart.
fn short_gpu(uuid: &str) -> String {
    let id = uuid.strip_prefix("GPU-").unwrap_or(uuid);
    id.chars().take(8).collect()
}

pub fn asked(j: &Job) -> String {
    let r = &j.request;
    match (r.gpus, r.gpu_memory_mib, &j.gang) {
        (n, _, Some(g)) if !g.is_worker() => format!("{}x{n} GPU", g.replicas),
        (n, _, Some(g)) => format!("{n} GPU, rank {} of gang {}", g.rank.unwrap_or(0), g.id),
        (0, 0, _) => "cpu".into(),
        (0, mib, _) => format!("{mib} MiB slice"),
        (n, _, _) => match r.gpus_max {
            // An elastic job: its width now (while placed) and its range.
            Some(max) if j.state.is_active() => format!("{} GPU ({n}..{max})", j.gpu_uuids.len()),
            Some(max) => format!("{n}..{max} GPU"),
            None => format!("{n} GPU"),
        },
    }
}

/// A gang in one line: its size and, once placed, the rendezvous.
fn gang_line(g: &gantry_store::Gang) -> String {
    let place = match (g.rank, &g.master_addr, g.master_port) {
        (Some(rank), _, _) => format!("worker rank {rank} of gang {}", g.id),
        (None, _, _) => format!("{} workers", g.replicas),
    };
    match (&g.master_addr, g.master_port) {
        (Some(addr), Some(port)) => format!("{place}; rendezvous {addr}:{port} (WORLD_SIZE {})", g.replicas),
        _ => place,
    }
}

/// Arguments of `gantry job <id>`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry job 12
  gantry job 12_3 -o yaml   # member 3 of array 12; times also as RFC 3339")]
pub struct JobArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Job id, or an array member as `ARRAY_INDEX` (`12_3`).
    id: String,
    /// Output format (JSON and YAML add RFC 3339 times: `submitted_rfc3339`, …).
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

impl JobArgs {
    /// `gantry job ID` as a table, for `gantry describe`.
    pub fn table(server: ServerArgs, id: String) -> Self {
        Self { server, id, output: table::Structured::Table }
    }
}

/// Shows one job and its history.
pub fn show(args: JobArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let id = block_on(resolve(&api, &args.id))??;
    let detail: JobDetail = block_on(api.get(&format!("/v1/jobs/{id}")))??;
    let mut value = serde_json::to_value(&detail)?;
    value["job"] = with_times(&detail.job);
    if let Some(ts) = value.get_mut("transitions").and_then(serde_json::Value::as_array_mut) {
        ts.iter_mut().for_each(|t| table::add_times(t, &["at"]));
    }
    if table::structured(args.output, &value)? {
        return Ok(());
    }
    let j = &detail.job;
    println!("job {}  {}  ({})", j.id, state(j), table::printable(&j.name));
    println!("team      {}  priority {}", j.team, j.priority);
    match script_of(&j.command) {
        Some((interpreter, name, text)) => {
            println!("script    {} (run by {})", table::printable(name), table::printable(&interpreter));
            for line in text.lines() {
                println!("  | {}", table::printable(line));
            }
        }
        None => println!("command   {}", table::printable(&j.command.join(" "))),
    }
    println!("asked     {}", asked(j));
    if let Some(limit) = j.time_limit_s {
        println!(
            "time      at most {} a run (then SIGTERM, the grace period, SIGKILL)",
            table::span(limit as i64 * 1000)
        );
    }
    println!(
        "attempt   {}  (runs lost to node or GPU failures are retried {} times)",
        j.attempt, j.max_retries
    );
    if let Some(node) = &j.node_id {
        println!("node      {node}  gpus {}", j.gpu_uuids.join(","));
    }
    if let Some(g) = &j.gang {
        println!("gang      {}", gang_line(g));
    }
    for loan in &detail.loans {
        println!("{}", loan_line(j.id, loan));
    }
    if let Some(max) = j.request.gpus_max {
        let now =
            if j.state.is_active() { format!("runs on {} GPUs; ", j.gpu_uuids.len()) } else { String::new() };
        println!(
            "elastic   {now}{}..{max} GPUs on one node, resized by the scheduler (WORLD_SIZE = its GPUs)",
            j.request.gpus
        );
    }
    for w in &detail.workers {
        let rank = w.gang.as_ref().and_then(|g| g.rank).map_or("-".into(), |r| r.to_string());
        let local = w.gang.as_ref().and_then(|g| g.local_rank).map_or("-".into(), |r| r.to_string());
        let node = w.node_id.as_deref().unwrap_or("-");
        println!(
            "  rank {rank:>3}  job {:<6} {:<10} node {node}  local rank {local}  gpus {}",
            w.id,
            state(w),
            w.gpu_uuids.join(",")
        );
    }
    if let Some(code) = j.exit_code {
        println!("exit      {code}");
    }
    if let Some(reason) = &j.reason {
        println!("reason    {}", table::printable(reason));
    }
    if let Some(a) = j.array {
        let limit = a.max_running.map(|n| format!(", at most {n} at once")).unwrap_or_default();
        println!("array     {}_{} (member {} of array {}{limit})", a.id, a.index, a.index, a.id);
    }
    if !j.after.is_empty() {
        println!("after     {}", j.after.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
    }
    if !j.labels.is_empty() {
        println!(
            "labels    {}",
            j.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
        );
    }
    if !j.gpu_models.is_empty() {
        println!("models    {}", j.gpu_models.join(","));
    }
    if let Some(u) = &j.upload {
        println!(
            "upload    {} files, {} ({})",
            u.files,
            gantry_api::upload::human_bytes(u.bytes),
            table::printable(&u.digest)
        );
    }
    if let Some(image) = &j.image {
        let digest =
            image.digest.as_deref().unwrap_or("not resolved yet (the node that pulls it records it)");
        println!("image     {}  {}", table::printable(&image.reference), table::printable(digest));
    }
    if let Some(dir) = &j.chdir {
        println!("chdir     {} (on the node)", table::printable(dir));
    }
    for i in &j.inputs {
        let staged = match (i.bytes, i.cache_hit, i.staged_s) {
            (Some(b), Some(hit), Some(s)) => {
                let how = if hit { "cache hit" } else { "copied" };
                format!(" ({}, {how} in {s:.1} s)", gantry_api::upload::human_bytes(b))
            }
            _ => String::new(),
        };
        println!("input     {}={}{staged}", i.name, table::printable(&i.url));
    }
    for o in &j.outputs {
        println!("output    {}", table::printable(&o.line()));
    }
    if !j.node_selector.is_empty() {
        let pairs: Vec<String> = j.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("nodes     {}", pairs.join(","));
    }
    if let Some(dir) = &j.workdir {
        let inside = if j.upload.is_some() { "the uploaded directory" } else { "the job's own directory" };
        println!("workdir   {} (inside {inside})", table::printable(dir));
    }
    if detail.log_limit_bytes > 0 {
        println!(
            "logs      at most {} per stream kept (older output is rotated away)",
            size(detail.log_limit_bytes)
        );
    }
    if let Some(st) = &detail.stall {
        println!(
            "stalled   {:.0} % of its GPU time waiting for input ({:.3} of {:.3} GPU-hours judged)",
            st.share * 100.0,
            st.stalled_gpu_hours,
            st.measured_gpu_hours
        );
    }
    if let Some(l) = &detail.limits {
        println!("limits    {}", limits(l));
    }
    print_attempts(&detail);
    for t in &detail.transitions {
        let from = t.from.map_or("-".to_owned(), |f| f.to_string());
        let after = (t.at - j.submitted_at) as f64 / 1000.0;
        let attempt = t.attempt.map_or("  ".to_owned(), |a| format!("#{a}"));
        println!(
            "  +{after:>8.3}s  {attempt:<3} {from} -> {}  {}",
            t.to,
            table::printable(t.reason.as_deref().unwrap_or(""))
        );
    }
    Ok(())
}

/// A batch script's interpreter, name and text, from the argv `submit SCRIPT` made of it
/// (`INTERPRETER… -c TEXT NAME ARGS…`), so `gantry job` prints it as lines, not escapes.
fn script_of(command: &[String]) -> Option<(String, &str, &str)> {
    let c = command.iter().position(|w| w == "-c")?;
    let (text, name) = (command.get(c + 1)?, command.get(c + 2)?);
    text.contains('\n').then(|| (command[..c].join(" "), name.as_str(), text.as_str()))
}

/// One line per attempt: where it ran, when, and how it ended.
fn print_attempts(detail: &JobDetail) {
    if detail.attempts.is_empty() {
        return;
    }
    println!("attempts");
    for a in &detail.attempts {
        let started = a.started_at.map_or("-".to_owned(), table::rfc3339);
        let ended = a.finished_at.map_or("-".to_owned(), table::rfc3339);
        let exit = a.exit_code.map_or("-".to_owned(), |c| c.to_string());
        let outcome = match a.outcome {
            None => "running".to_owned(),
            Some(JobState::Pending) => "requeued".to_owned(),
            Some(state) => state.to_string(),
        };
        println!(
            "  #{:<3} node {}  started {started}  ended {ended}  exit {exit}  {outcome}",
            a.attempt, a.node_id
        );
        if let Some(reason) = &a.reason {
            println!("        {}", table::printable(reason));
        }
    }
    println!("events");
}

/// What a loan means to job `id`: its owner or its borrower.
fn loan_line(id: i64, l: &gantry_api::idle::Loan) -> String {
    let since = table::rfc3339(l.lent_at);
    if l.owner == id {
        let to = l.borrower.map_or("no job borrows it yet".to_owned(), |b| format!("borrowed by job {b}"));
        format!(
            "lent      {} since {since} (idle): {to}; it is its own again as soon as it computes",
            l.gpu_uuid
        )
    } else {
        format!(
            "borrows   {} from job {} (idle since {since}): preempted when job {} computes again",
            l.gpu_uuid, l.owner, l.owner
        )
    }
}

/// A job id from `12` or an array member's `12_3` (array 12, index 3).
pub async fn resolve(api: &Api, text: &str) -> anyhow::Result<i64> {
    let bad = || anyhow::anyhow!("`{text}` is not a job id (e.g. `12`, or `12_3` for index 3 of array 12)");
    let Some((array, index)) = text.split_once('_') else {
        return text.trim().parse().map_err(|_| bad());
    };
    let (array, index): (i64, u32) = (array.parse().map_err(|_| bad())?, index.parse().map_err(|_| bad())?);
    let members = all_pages(api, &format!("/v1/jobs?array={array}&limit={PAGE}")).await?;
    members
        .iter()
        .find(|j| j.array.is_some_and(|a| a.index == index))
        .map(|j| j.id)
        .ok_or_else(|| anyhow::anyhow!("array {array} has no member {index} (job {text} not found)"))
}

/// A byte count in the largest binary unit that divides it (`64 MiB`), else in bytes.
/// `memory 2 GiB, cpu 1.5, pids 4096` (`none` for a limit not set).
fn limits(l: &gantry_api::model::JobLimits) -> String {
    let memory = if l.memory_mib > 0 { size(l.memory_mib << 20) } else { "none".to_owned() };
    let cpu = if l.cpu_milli > 0 { format!("{}", l.cpu_milli as f64 / 1000.0) } else { "none".to_owned() };
    let pids = if l.pids_max > 0 { l.pids_max.to_string() } else { "none".to_owned() };
    format!("memory {memory}, cpu {cpu}, pids {pids} (on its node)")
}

fn size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_line_names_each_limit_or_none() {
        let l = gantry_api::model::JobLimits {
            memory_mib: 2048,
            cpu_milli: 1500,
            pids_max: 4096,
            ..Default::default()
        };
        assert_eq!(limits(&l), "memory 2 GiB, cpu 1.5, pids 4096 (on its node)");
        let none = gantry_api::model::JobLimits::default();
        assert_eq!(limits(&none), "memory none, cpu none, pids none (on its node)");
    }
}
