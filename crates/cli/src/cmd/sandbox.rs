//! The job sandbox flags `gantry up` and `gantry agent` share, and `--log-limit`'s size syntax.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use gantry_agent::runner::cni::Conflist;
use gantry_agent::runner::mounts::{DEFAULT_TMP_BYTES, MountConfig};
use gantry_agent::runner::network::NetworkConfig;
use gantry_agent::runner::sandbox::{
    ANY_TEAM, DEFAULT_PIDS_LIMIT, DefaultLimit, JobDefaults, NodeReserve, running_as_root,
};
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
    /// Memory limit of a job that asks for none (`--memory`), e.g. `2GiB`; `none` leaves such
    /// jobs unlimited (the node reserve still holds). Default: its GPUs' share of the node's
    /// memory less the reserve (a job on half the GPUs gets half), on a node without GPUs a
    /// quarter.
    #[arg(long, value_name = "SIZE|none")]
    default_job_memory: Option<String>,
    /// CPU limit of a job that asks for none (`--cpu`), in cores, e.g. `1`, `0.5` or `500m`;
    /// `none` leaves such jobs unlimited. Default: its GPUs' share of the node's cores less the
    /// reserve, and at least one core.
    #[arg(long, value_name = "CORES|none")]
    default_job_cpu: Option<String>,
    /// Most processes and threads of a job whose team sets no `pids_limit`.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PIDS_LIMIT)]
    job_pids_limit: u64,
    /// Where users' persistent homes are kept, `<DIR>/<team>/<user>` (each job's `$HOME`): a
    /// shared file system mounted on every node makes a user's home follow them from node to
    /// node (default: `homes` under `--work-dir`, on this node).
    #[arg(long, value_name = "DIR")]
    home_root: Option<PathBuf>,
    /// Memory kept for the agent, the server and the system, e.g. `2GiB`: the node advertises
    /// its memory less this, and all jobs together are held below it.
    #[arg(long, value_name = "SIZE")]
    reserve_memory: Option<String>,
    /// CPU kept for the agent, the server and the system, in cores (as `--default-job-cpu`).
    #[arg(long, value_name = "CORES")]
    reserve_cpu: Option<String>,
    /// Size of each job's private `/tmp` (a tmpfs, counted in the job's memory), root only.
    #[arg(long, value_name = "SIZE")]
    job_tmp_size: Option<String>,
    /// Size of each job's private `/dev/shm` (default: the job's memory limit), root only.
    #[arg(long, value_name = "SIZE")]
    job_shm_size: Option<String>,
    /// Most bytes the node's dataset cache holds (declared inputs, staged before their jobs
    /// start; `gantry cache` lists it), e.g. `500GiB`: the least recently used datasets no
    /// running job reads are evicted to make room.
    #[arg(long, value_name = "SIZE", default_value = "100GiB")]
    cache_size: String,
    /// Most bytes one team's datasets may hold in the node's cache (default: half of
    /// `--cache-size`, so one team's inputs cannot empty the cache of every other's).
    #[arg(long, value_name = "SIZE")]
    cache_team_quota: Option<String>,
    /// A network jobs' inputs, outputs and S3 endpoints may reach although it is the node's or
    /// private (CIDR or one address, e.g. `10.20.0.0/16` for an internal S3; repeatable). By
    /// default loopback, link-local (the cloud metadata service), private ranges and the node's
    /// own addresses are refused.
    #[arg(long = "allow-source-net", value_name = "CIDR")]
    allow_source_nets: Vec<String>,
    /// A host name jobs' sources may reach whatever it resolves to (e.g. `minio.internal`;
    /// repeatable).
    #[arg(long = "allow-source-host", value_name = "HOST")]
    allow_source_hosts: Vec<String>,
    /// A registry (`HOST:PORT`) jobs' images are pulled from over plain HTTP, which may be on
    /// the node's own networks (a site's registry; repeatable). TLS for every other.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    insecure_registries: Vec<String>,
    /// The OCI runtime that runs jobs' containers: `runc`, `crun` or a path (default: runc
    /// where it is installed, else crun).
    #[arg(long, value_name = "RUNTIME")]
    oci_runtime: Option<String>,
    /// An image pull that receives nothing for this many seconds fails (no overall cap: a large
    /// image that keeps arriving is never cut off).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pull_stall_timeout: u64,
    /// Most bytes the node's pulled images may hold, e.g. `100GiB` (default: a fifth of the
    /// disk holding the agent's state). Unused images go first, least recently used first.
    #[arg(long, value_name = "SIZE")]
    image_cache_limit: Option<String>,
}

impl SandboxArgs {
    /// Where jobs' sources may connect (`--allow-source-net`, `--allow-source-host`).
    pub fn egress(&self) -> anyhow::Result<std::sync::Arc<gantry_agent::runner::egress::Egress>> {
        let e = gantry_agent::runner::egress::Egress::new(&self.allow_source_nets, &self.allow_source_hosts)
            .map_err(anyhow::Error::msg)
            .context("--allow-source-net/--allow-source-host")?;
        Ok(std::sync::Arc::new(e))
    }

    /// How the node pulls and runs container images.
    pub fn images(&self) -> anyhow::Result<gantry_agent::runner::images::ImagesConfig> {
        for r in &self.insecure_registries {
            let ok = r.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                anyhow::bail!("--insecure-registry {r}: give a HOST:PORT, e.g. 127.0.0.1:5000");
            }
        }
        if self.pull_stall_timeout == 0 {
            anyhow::bail!("--pull-stall-timeout must be at least 1 second");
        }
        Ok(gantry_agent::runner::images::ImagesConfig {
            insecure_registries: self.insecure_registries.clone(),
            runtime: self.oci_runtime.clone(),
            stall_timeout: std::time::Duration::from_secs(self.pull_stall_timeout),
            cache_limit: self
                .image_cache_limit
                .as_deref()
                .map(parse_size)
                .transpose()
                .context("--image-cache-limit")?,
        })
    }

    /// The dataset cache's limits.
    pub fn cache(&self) -> anyhow::Result<gantry_agent::runner::cache::CacheConfig> {
        let size_bytes = parse_size(&self.cache_size).context("--cache-size")?;
        let team_quota_bytes = match &self.cache_team_quota {
            Some(q) => parse_size(q).context("--cache-team-quota")?,
            None => size_bytes / 2,
        };
        Ok(gantry_agent::runner::cache::CacheConfig { size_bytes, team_quota_bytes })
    }

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
        let mib = |flag: &str, v: &Option<String>| -> anyhow::Result<u64> {
            v.as_deref()
                .map_or(Ok(0), |v| parse_size(v).map(|b| b >> 20).with_context(|| format!("--{flag}")))
        };
        let milli = |flag: &str, v: &Option<String>| -> anyhow::Result<u64> {
            v.as_deref().map_or(Ok(0), |v| parse_cpu(v).with_context(|| format!("--{flag}")))
        };
        let default = |flag: &str, v: &Option<String>, parse: &dyn Fn(&str) -> anyhow::Result<u64>| {
            Ok::<_, anyhow::Error>(match v.as_deref() {
                None => DefaultLimit::GpuShare,
                Some("none") => DefaultLimit::None,
                Some(v) => match parse(v).with_context(|| format!("--{flag}"))? {
                    0 => DefaultLimit::None,
                    v => DefaultLimit::Fixed(v),
                },
            })
        };
        let defaults = JobDefaults {
            memory: default("default-job-memory", &self.default_job_memory, &|v| Ok(parse_size(v)? >> 20))?,
            cpu: default("default-job-cpu", &self.default_job_cpu, &parse_cpu)?,
            pids_max: self.job_pids_limit,
        };
        let reserve = NodeReserve {
            memory_mib: mib("reserve-memory", &self.reserve_memory)?,
            cpu_milli: milli("reserve-cpu", &self.reserve_cpu)?,
        };
        let size = |flag: &str, v: &Option<String>| {
            v.as_deref().map(parse_size).transpose().with_context(|| format!("--{flag}"))
        };
        let mounts = MountConfig {
            tmp_bytes: size("job-tmp-size", &self.job_tmp_size)?.unwrap_or(DEFAULT_TMP_BYTES),
            shm_bytes: size("job-shm-size", &self.job_shm_size)?,
        };
        let home_root = self.home_root.clone();
        if home_root.as_ref().is_some_and(|r| !r.is_absolute()) {
            bail!("--home-root takes an absolute path");
        }
        Ok(SandboxConfig {
            work_dir,
            job_users,
            network: self.network()?,
            mounts,
            defaults,
            reserve,
            home_root,
        })
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

/// Parses CPU cores: `2`, `1.5` or milli-cores `500m`; returns milli-cores.
pub fn parse_cpu(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    let milli = match text.strip_suffix('m') {
        Some(m) => m.parse::<u64>().ok(),
        None => text
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && *c >= 0.0 && *c < 1e9)
            .map(|c| (c * 1000.0).round() as u64),
    };
    milli.with_context(|| format!("`{text}` is not a number of cores (e.g. 2, 0.5 or 500m)"))
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
        "T" | "TiB" => 40,
        other => bail!("`{text}`: unknown unit `{other}` (use KiB, MiB, GiB or TiB)"),
    };
    let number: u64 = number.parse().with_context(|| format!("`{text}` is not a size"))?;
    number.checked_mul(1 << shift).with_context(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use gantry_agent::runner::network::Mode;

    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: SandboxArgs,
    }

    fn parse<T: Into<std::ffi::OsString> + Clone>(argv: impl IntoIterator<Item = T>) -> SandboxArgs {
        Wrapper::try_parse_from(argv).expect("parsed").args
    }

    #[test]
    fn sizes_are_bytes_or_binary_units() {
        assert_eq!(parse_size("1048576").ok(), Some(1 << 20));
        assert_eq!(parse_size("64MiB").ok(), Some(64 << 20));
        assert_eq!(parse_size("2 GiB").ok(), Some(2 << 30));
        assert_eq!(parse_size("512K").ok(), Some(512 << 10));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    /// Every flag at its default.
    fn defaults() -> SandboxArgs {
        parse(["x"])
    }

    #[test]
    fn the_job_network_is_auto_cni_or_shared_and_a_subnet_goes_with_the_default_conflist_only() {
        for (mode, want) in [("auto", Mode::Auto), ("cni", Mode::Cni), ("shared", Mode::Shared)] {
            let config = SandboxArgs { job_network: mode.into(), ..defaults() }.config(Path::new("/d"));
            assert_eq!(config.expect("valid").network.mode, want);
        }
        let err = SandboxArgs { job_network: "host".into(), ..defaults() }.config(Path::new("/d"));
        assert!(err.expect_err("refused").to_string().contains("auto, cni or shared"));
        let both = SandboxArgs {
            cni_conf: Some("/etc/cni/net.d/x.conflist".into()),
            cni_subnet: Some("10.88.0.0/24".into()),
            ..defaults()
        };
        assert!(both.config(Path::new("/d")).expect_err("refused").to_string().contains("--cni-conf"));
        let missing = SandboxArgs { cni_conf: Some("/nonexistent.conflist".into()), ..defaults() };
        assert!(missing.config(Path::new("/d")).expect_err("refused").to_string().contains("/nonexistent"));
    }

    #[test]
    fn cores_are_decimal_or_milli() {
        assert_eq!(parse_cpu("2").ok(), Some(2000));
        assert_eq!(parse_cpu("0.5").ok(), Some(500));
        assert_eq!(parse_cpu("250m").ok(), Some(250));
        for bad in ["", "two", "-1", "1.5m", "NaN"] {
            assert!(parse_cpu(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn job_defaults_and_the_reserve_take_sizes_and_cores() {
        let args = parse([
            "x",
            "--default-job-memory",
            "2GiB",
            "--default-job-cpu",
            "1.5",
            "--reserve-memory",
            "512MiB",
            "--reserve-cpu",
            "500m",
            "--job-shm-size",
            "64MiB",
        ]);
        let config = args.config(Path::new("/data")).expect("valid");
        assert_eq!(
            (config.defaults.memory, config.defaults.cpu, config.defaults.pids_max),
            (DefaultLimit::Fixed(2048), DefaultLimit::Fixed(1500), 4096)
        );
        let unset = parse(["x"]).config(Path::new("/data")).expect("valid");
        assert_eq!(
            (unset.defaults.memory, unset.defaults.cpu),
            (DefaultLimit::GpuShare, DefaultLimit::GpuShare)
        );
        let off = parse(["x", "--default-job-memory", "none", "--default-job-cpu", "none"]);
        let off = off.config(Path::new("/data")).expect("valid");
        assert_eq!((off.defaults.memory, off.defaults.cpu), (DefaultLimit::None, DefaultLimit::None));
        assert_eq!((config.reserve.memory_mib, config.reserve.cpu_milli), (512, 500));
        assert_eq!((config.mounts.tmp_bytes, config.mounts.shm_bytes), (1 << 30, Some(64 << 20)));
        let bad = parse(["x", "--default-job-memory", "lots"]);
        let err = bad.config(Path::new("/data")).expect_err("refused");
        assert!(format!("{err:#}").contains("--default-job-memory"), "{err:#}");
    }

    #[test]
    fn job_users_are_team_equals_user() {
        let args = parse(["x", "--work-dir", "/w", "--job-user", "a=alice", "--job-user", "*=nobody"]);
        let config = args.config(Path::new("/data")).expect("valid");
        assert_eq!(config.job_users.get("a").map(String::as_str), Some("alice"));
        assert_eq!(config.job_users.get("*").map(String::as_str), Some("nobody"));
        for bad in ["alice", "=alice", "a=", "a=x,a=y"] {
            let mut argv = vec!["x".to_owned()];
            for pair in bad.split(',') {
                argv.extend(["--job-user".to_owned(), pair.to_owned()]);
            }
            let args = parse(argv);
            assert!(args.config(Path::new("/data")).is_err(), "{bad}");
        }
    }
}
