//! `gantry events`: what happened, newest first, like `kubectl get events`: nodes registering,
//! going silent or lost, GPU health changes, jobs kept, requeued or preempted. Members see their
//! teams' events, operators and admins the cluster's too. `-w` goes on printing new ones.

use std::time::Duration;

use clap::Args;
use gantry_api::model::Event;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry events`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry events                    # the latest 100, newest first
  gantry events --since 1h --node gpu-2
  gantry events --job 12 -w        # then each new event of job 12 as it happens, until Ctrl-C")]
pub struct EventsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Only events of the last DURATION: `90s`, `30m`, `2h`, `1d`. Example: `--since 1h`.
    #[arg(long, value_name = "DURATION", value_parser = super::submit::parse_time)]
    since: Option<u64>,
    /// Only events of this job (an array member as `12_3` is its own job id).
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// Only events of this node.
    #[arg(long, value_name = "NODE", conflicts_with = "job")]
    node: Option<String>,
    /// At most this many (newest first).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    limit: u32,
    /// Go on printing new events as they happen, until Ctrl-C.
    #[arg(short, long)]
    watch: bool,
    /// Output format (JSON and YAML add `at_rfc3339`).
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

const HEADER: [&str; 4] = ["TIME", "KIND", "SUBJECT", "MESSAGE"];

/// Lists events.
pub fn run(args: EventsArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let subject = match (&args.job, &args.node) {
        (Some(job), _) => Some(format!("job/{}", block_on(super::jobs::resolve(&api, job))??)),
        (None, node) => node.clone(),
    };
    let mut query = vec![("limit".to_owned(), args.limit.to_string())];
    if let Some(s) = args.since {
        query.push(("since".into(), super::jobs::since_ms(s).to_string()));
    }
    if let Some(subject) = &subject {
        query.push(("subject".into(), subject.clone()));
    }
    let events: Vec<Event> = block_on(api.get(&path(&query)))??;
    let mut values = serde_json::to_value(&events)?;
    if let Some(list) = values.as_array_mut() {
        list.iter_mut().for_each(|e| table::add_times(e, &["at"]));
    }
    if !args.watch && table::structured(args.output, &values)? {
        return Ok(());
    }
    if !args.watch || args.output == table::Structured::Table {
        table::print(&HEADER, &events.iter().map(row).collect::<Vec<_>>());
    }
    if !args.watch {
        return Ok(());
    }
    let mut last = events.first().map_or(0, |e| e.id);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let mut q = query.clone();
        q.retain(|(k, _)| k != "since");
        q.push(("after".into(), last.to_string()));
        let mut new: Vec<Event> = block_on(api.get(&path(&q)))??;
        new.reverse();
        for e in &new {
            match args.output {
                table::Structured::Table => {
                    let cells: Vec<String> =
                        row(e).iter().map(|c| table::printable(c).into_owned()).collect();
                    println!("{}", cells.join("  "));
                }
                _ => println!("{}", serde_json::to_string(e)?),
            }
            last = last.max(e.id);
        }
    }
}

/// `/v1/events?…` with the query's values percent-encoded.
pub(super) fn path(query: &[(String, String)]) -> String {
    let encode = |v: &str| {
        v.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let pairs: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    format!("/v1/events?{}", pairs.join("&"))
}

fn row(e: &Event) -> Vec<String> {
    vec![table::when(e.at), e.kind.clone(), e.subject.clone(), e.message.clone()]
}
