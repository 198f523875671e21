//! `gantry jobs -w`: the jobs, then a line for each one that changes (kubectl's `get -w`), until
//! Ctrl-C. The list is polled (the API has no change stream yet): a job is printed again when its
//! state, stop, reason, attempt or node changed since the previous look. JSON and YAML print one
//! document per change, so a program can read the stream line by line (JSON) or per `---` (YAML).

use std::collections::HashMap;
use std::time::Duration;

use gantry_store::{Job, JobId};

use super::client::Api;
use super::jobs::{self, JobsOutput};
use super::table;

/// Time between two looks.
const POLL: Duration = Duration::from_secs(1);

type Seen = (String, Option<String>, u32, Option<String>);

fn seen(j: &Job) -> Seen {
    (jobs::state(j), j.reason.clone(), j.attempt, j.node_id.clone())
}

/// Watches the jobs `path` lists until the process is interrupted.
pub async fn watch(api: &Api, path: &str, output: JobsOutput) -> anyhow::Result<()> {
    let mut last: HashMap<JobId, Seen> = HashMap::new();
    let mut first = true;
    loop {
        let mut listed: Vec<Job> = api.get(path).await?;
        listed.reverse();
        let changed: Vec<Job> = listed.into_iter().filter(|j| last.get(&j.id) != Some(&seen(j))).collect();
        for j in &changed {
            last.insert(j.id, seen(j));
        }
        emit(&changed, output, first)?;
        first = false;
        tokio::time::sleep(POLL).await;
    }
}

fn emit(changed: &[Job], output: JobsOutput, first: bool) -> anyhow::Result<()> {
    match output {
        JobsOutput::Json => {
            for j in changed {
                println!("{}", serde_json::to_string(&jobs::with_times(j))?);
            }
        }
        JobsOutput::Yaml => {
            for j in changed {
                println!("---");
                table::yaml(&jobs::with_times(j))?;
            }
        }
        JobsOutput::Table | JobsOutput::Wide => {
            let (header, rows) = jobs::rows(changed, output == JobsOutput::Wide);
            if first {
                table::print(&header, &rows);
            } else {
                // Later rows are not aligned with the first table: columns may grow.
                for row in rows {
                    println!("{}", row.join("  ").trim_end());
                }
            }
        }
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    Ok(())
}
