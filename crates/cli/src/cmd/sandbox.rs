//! The job sandbox flags `gantry up` and `gantry agent` share, and `--log-limit`'s size syntax.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use gantry_agent::runner::sandbox::{ANY_TEAM, running_as_root};
use gantry_agent::runner::{Sandbox, SandboxConfig};

/// Where and as whom jobs run.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Root of the jobs' work directories (default `/var/lib/gantry/work` as root, else
    /// `<data dir>/work`). Job users must be able to reach it.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Run team TEAM's jobs as USER, which must exist (repeatable; TEAM `*` means every team
    /// not listed). By default each team runs as a user of its own, `gantry-t-<team>`
    /// (cleaned, with a hash of the team name when the name is not a valid user name as it
    /// is), created on the team's first job on the node, so that teams cannot read or signal
    /// each other's jobs. `--job-user '*=gantry-job'` puts every team back in one shared user
    /// (created if missing): teams are then not isolated from each other. Needs root; without
    /// root jobs run as the agent's user.
    #[arg(long = "job-user", value_name = "TEAM=USER")]
    job_users: Vec<String>,
}

impl SandboxArgs {
    /// Validated settings; `data` is the agent's data directory.
    pub fn config(&self, data: &Path) -> anyhow::Result<SandboxConfig> {
        let work_dir = match &self.work_dir {
            Some(dir) => dir.clone(),
            None if running_as_root() => PathBuf::from("/var/lib/gantry/work"),
            None => data.join("work"),
        };
        let mut job_users = BTreeMap::new();
        for pair in &self.job_users {
            let Some((team, user)) = pair.split_once('=').filter(|(t, u)| !t.is_empty() && !u.is_empty())
            else {
                bail!("--job-user takes TEAM=USER (TEAM may be `{ANY_TEAM}`), not `{pair}`");
            };
            if job_users.insert(team.to_owned(), user.to_owned()).is_some() {
                bail!("--job-user names team `{team}` twice");
            }
        }
        Ok(SandboxConfig { work_dir, job_users })
    }

    /// Builds the sandbox and says once how jobs will run, with any warning.
    pub fn build(&self, data: &Path, state: &Path) -> anyhow::Result<Arc<Sandbox>> {
        let sandbox = Sandbox::build(&self.config(data)?, state).context("cannot set up the job sandbox")?;
        eprintln!("{}", sandbox.describe());
        for warning in sandbox.warnings() {
            eprintln!("warning: {warning}");
        }
        Ok(Arc::new(sandbox))
    }
}

/// Parses a size: bytes, or a number with `KiB`, `MiB` or `GiB` (also `K`, `M`, `G`).
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => bail!("`{text}`: unknown unit `{other}` (use KiB, MiB or GiB)"),
    };
    let number: u64 = number.parse().with_context(|| format!("`{text}` is not a size"))?;
    number.checked_mul(1 << shift).with_context(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bytes_or_binary_units() {
        assert_eq!(parse_size("1048576").ok(), Some(1 << 20));
        assert_eq!(parse_size("64MiB").ok(), Some(64 << 20));
        assert_eq!(parse_size("2 GiB").ok(), Some(2 << 30));
        assert_eq!(parse_size("512K").ok(), Some(512 << 10));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn job_users_are_team_equals_user() {
        let args =
            SandboxArgs { work_dir: Some("/w".into()), job_users: vec!["a=alice".into(), "*=nobody".into()] };
        let config = args.config(Path::new("/data")).expect("valid");
        assert_eq!(config.job_users.get("a").map(String::as_str), Some("alice"));
        assert_eq!(config.job_users.get("*").map(String::as_str), Some("nobody"));
        for bad in ["alice", "=alice", "a=", "a=x,a=y"] {
            let job_users = bad.split(',').map(str::to_owned).collect();
            let args = SandboxArgs { work_dir: None, job_users };
            assert!(args.config(Path::new("/data")).is_err(), "{bad}");
        }
    }
}
