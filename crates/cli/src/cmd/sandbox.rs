//! The job sandbox flags `gantry up` and `gantry agent` share, and `--log-limit`'s size syntax.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use gantry_agent::runner::cni::Conflist;
use gantry_agent::runner::network::NetworkConfig;
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
    /// Each job's network: `auto` gives every attempt a network namespace of its own through
    /// the CNI plugins when the agent is root and finds them (else jobs share the node's, and
    /// the agent says so); `cni` insists (the agent does not start without); `shared` keeps
    /// jobs in the node's network.
    #[arg(long, value_name = "auto|cni|shared", default_value = "auto")]
    job_network: String,
    /// A directory holding the CNI plugins (repeatable; default /usr/lib/cni and /opt/cni/bin).
    #[arg(long = "cni-bin-dir", value_name = "DIR")]
    cni_bin_dirs: Vec<PathBuf>,
    /// A CNI network configuration list to use instead of the agent's default (bridge with
    /// host-local addresses and NAT, portmap, firewall; written to `<data dir>/agent/cni/`).
    #[arg(long, value_name = "FILE")]
    cni_conf: Option<PathBuf>,
    /// The default conflist's subnet for job addresses (an IPv4 CIDR; default a /24 in
    /// 10.128.0.0/10 picked per agent).
    #[arg(long, value_name = "CIDR")]
    cni_subnet: Option<String>,
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
        Ok(SandboxConfig { work_dir, job_users, network: self.network()? })
    }

    fn network(&self) -> anyhow::Result<NetworkConfig> {
        let mode = self.job_network.parse().map_err(anyhow::Error::msg)?;
        if self.cni_conf.is_some() && self.cni_subnet.is_some() {
            bail!("--cni-subnet sets the default conflist's subnet; with --cni-conf set it in that file");
        }
        if let Some(conf) = &self.cni_conf {
            Conflist::load(conf)?;
        }
        Ok(NetworkConfig {
            mode,
            bin_dirs: self.cni_bin_dirs.clone(),
            conf: self.cni_conf.clone(),
            subnet: self.cni_subnet.clone(),
        })
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
    use gantry_agent::runner::network::Mode;

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

    fn defaults(work_dir: Option<PathBuf>) -> SandboxArgs {
        SandboxArgs {
            work_dir,
            job_users: Vec::new(),
            job_network: "auto".into(),
            cni_bin_dirs: Vec::new(),
            cni_conf: None,
            cni_subnet: None,
        }
    }

    #[test]
    fn the_job_network_is_auto_cni_or_shared_and_a_subnet_goes_with_the_default_conflist_only() {
        for (mode, want) in [("auto", Mode::Auto), ("cni", Mode::Cni), ("shared", Mode::Shared)] {
            let config = SandboxArgs { job_network: mode.into(), ..defaults(None) }.config(Path::new("/d"));
            assert_eq!(config.expect("valid").network.mode, want);
        }
        let err = SandboxArgs { job_network: "host".into(), ..defaults(None) }.config(Path::new("/d"));
        assert!(err.expect_err("refused").to_string().contains("auto, cni or shared"));
        let both = SandboxArgs {
            cni_conf: Some("/etc/cni/net.d/x.conflist".into()),
            cni_subnet: Some("10.88.0.0/24".into()),
            ..defaults(None)
        };
        assert!(both.config(Path::new("/d")).expect_err("refused").to_string().contains("--cni-conf"));
        let missing = SandboxArgs { cni_conf: Some("/nonexistent.conflist".into()), ..defaults(None) };
        assert!(missing.config(Path::new("/d")).expect_err("refused").to_string().contains("/nonexistent"));
    }

    #[test]
    fn job_users_are_team_equals_user() {
        let args = SandboxArgs {
            job_users: vec!["a=alice".into(), "*=nobody".into()],
            ..defaults(Some("/w".into()))
        };
        let config = args.config(Path::new("/data")).expect("valid");
        assert_eq!(config.job_users.get("a").map(String::as_str), Some("alice"));
        assert_eq!(config.job_users.get("*").map(String::as_str), Some("nobody"));
        for bad in ["alice", "=alice", "a=", "a=x,a=y"] {
            let job_users = bad.split(',').map(str::to_owned).collect();
            let args = SandboxArgs { job_users, ..defaults(None) };
            assert!(args.config(Path::new("/data")).is_err(), "{bad}");
        }
    }
}
