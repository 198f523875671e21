//! `gantry jobs -w`: the jobs, then a line for each one that changes (kubectl's `get -w`), until
//! Ctrl-C. The list is polled (the API has no change stream yet): a job is printed again when its
//! state, stop, reason, attempt or node changed since the previous look. JSON and YAML print one
//! document per change, so a program can read the stream line by line (JSON) or per `---` (YAML).

use std::collections::HashMap;
use std::time::Duration;

use gantry_store::{Job, JobId};

use super::{self as jobs, JobsOutput};
use crate::cmd::client::Api;
use crate::cmd::table;

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
    let mut widths = Vec::new();
    loop {
        let mut listed: Vec<Job> = api.get(path).await?;
        listed.reverse();
        let changed: Vec<Job> = listed.into_iter().filter(|j| last.get(&j.id) != Some(&seen(j))).collect();
        for j in &changed {
            last.insert(j.id, seen(j));
        }
        emit(&changed, output, first, &mut widths)?;
        first = false;
        tokio::time::sleep(POLL).await;
    }
}

/// Columns are padded to at most this many characters (longer cells stay whole).
const MAX_PAD: usize = 64;

fn emit(changed: &[Job], output: JobsOutput, first: bool, widths: &mut Vec<usize>) -> anyhow::Result<()> {
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
        JobsOutput::Name => {
            for j in changed {
                println!("job/{} {}", j.id, jobs::state(j));
            }
        }
        JobsOutput::Table | JobsOutput::Wide => {
            let (header, rows) = jobs::rows(changed, output == JobsOutput::Wide);
            let mut lines: Vec<Vec<String>> =
                rows.iter().map(|r| r.iter().map(|c| table::printable(c).into_owned()).collect()).collect();
            if first {
                lines.insert(0, header.iter().map(|h| (*h).to_owned()).collect());
            }
            // Later lines line up under the first table's columns (which only ever widen), as
            // `kubectl get -w` does.
            for line in &lines {
                widths.resize(widths.len().max(line.len()), 0);
                for (w, cell) in widths.iter_mut().zip(line) {
                    *w = (*w).max(cell.chars().count().min(MAX_PAD));
                }
            }
            for line in lines {
                let padded: Vec<String> =
                    line.iter().zip(widths.iter()).map(|(c, w)| format!("{c:<w$}")).collect();
                println!("{}", padded.join("  ").trim_end());
            }
        }
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    Ok(())
}
