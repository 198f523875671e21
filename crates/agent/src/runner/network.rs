//! A network namespace per attempt, set up by the standard CNI plugins (Nomad's bridge mode).
//!
//! Without it a job shares the node's network: whatever it binds on `127.0.0.1` or `::1` is the
//! node's loopback, so a job could take the API's port during a restart or answer
//! `http://localhost:PORT/` first, and it reaches every loopback service of the node. With it
//! (the agent is root and finds the plugins), each attempt gets a namespace of its own
//! ([`super::netns`]) whose `lo` is its own, and one interface `eth0` that the conflist plugs
//! into the node ([`super::cni`]). The default conflist, written to `<state>/cni/gantry.conflist`
//! at every start (an operator passes their own with `--cni-conf`):
//!
//! - `bridge` on a bridge of this agent's own (`gtr<scope>`), the node its gateway, with
//!   `host-local` addresses from a private subnet (`--cni-subnet`, else a /24 in 10.128.0.0/10
//!   chosen from the agent's scope so two agents on one machine differ) and `ipMasq`: jobs reach
//!   the outside through NAT; `hairpinMode` lets a job reach its own published port;
//! - `portmap` publishes a gang's rendezvous port on rank 0's node (hostPort = containerPort =
//!   `MASTER_PORT`), with `snat` so workers on the same node reach it through the gateway;
//! - `firewall` adds the attempt's address to the CNI forward chains.
//!
//! `portmap` with `snat` turns on `route_localnet` on the bridge (so that the node's own
//! `127.0.0.1` may be DNATed into a job); the agent turns it off again after every ADD and checks
//! that it is off: then no packet to `127.0.0.0/8` is ever routed between a job and the node,
//! and the node's loopback services (the API, the exporter) are unreachable from jobs.
//!
//! A gang worker whose `MASTER_ADDR` names this node by a loopback address or its host name gets
//! the bridge's gateway address instead, which is a local address of the node: `portmap`'s rule
//! sends it to rank 0 wherever rank 0 runs on this machine.
//!
//! The attachment outlives the agent like the job does: its [`NetRef`] travels in the shim's
//! spec and the attempt's record, and whoever ends the attempt (the shim, or the agent for an
//! attempt whose shim died) runs DEL, unmounts the namespace and removes its files. A
//! restarted agent removes the namespaces of attempts it did not adopt.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::cni::{Attachment, Conflist};
use super::error::AgentError;
use super::netns;

/// Where the CNI plugins are looked for when `--cni-bin-dir` is not given.
pub const DEFAULT_BIN_DIRS: &[&str] = &["/usr/lib/cni", "/opt/cni/bin"];

/// The interface a job sees.
const IFNAME: &str = "eth0";

/// `--job-network`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// A namespace per attempt when the agent is root and the plugins are there, else shared.
    #[default]
    Auto,
    /// A namespace per attempt, or the agent does not start.
    Cni,
    /// Jobs share the node's network.
    Shared,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "cni" => Ok(Self::Cni),
            "shared" => Ok(Self::Shared),
            other => Err(format!("--job-network takes auto, cni or shared, not `{other}`")),
        }
    }
}

/// Network settings of the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    /// `--job-network`.
    pub mode: Mode,
    /// `--cni-bin-dir` (empty: [`DEFAULT_BIN_DIRS`]).
    pub bin_dirs: Vec<PathBuf>,
    /// `--cni-conf`: the operator's conflist instead of the default one.
    pub conf: Option<PathBuf>,
    /// `--cni-subnet`: the default conflist's subnet (IPv4 CIDR).
    pub subnet: Option<String>,
}

/// The CNI network of this agent's attempts.
#[derive(Debug)]
pub struct Network {
    conflist: Conflist,
    conf: PathBuf,
    dirs: Vec<PathBuf>,
    /// `<state>/netns`: namespace files and cached results.
    run: PathBuf,
    scope: String,
    /// Whether the conflist is the agent's default (its bridge is this agent's alone).
    own_conf: bool,
}

/// One attempt's attachment, as the shim and the attempt's record keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRef {
    /// The conflist it was added with.
    pub conf: PathBuf,
    /// `CNI_PATH`.
    pub dirs: Vec<PathBuf>,
    /// The namespace file (the cached ADD result and the published ports are beside it, `.json`).
    pub netns: PathBuf,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// Published TCP ports (hostPort = containerPort).
    #[serde(default)]
    pub ports: Vec<u16>,
}

/// An attempt plugged in: what to keep, and the gateway (the node, seen from the job).
#[derive(Debug, Clone)]
pub struct Attached {
    /// What ends it.
    pub net: NetRef,
    /// The bridge's address, when the result names one.
    pub gateway: Option<IpAddr>,
}

/// Whether every plugin the default conflist needs is in one of `dirs`.
pub fn plugins_found(dirs: &[PathBuf]) -> bool {
    ["bridge", "host-local", "portmap", "firewall"].iter().all(|p| dirs.iter().any(|d| d.join(p).is_file()))
}

/// Whether this process could give jobs namespaces with the default settings: it is root and
/// the plugins are in [`DEFAULT_BIN_DIRS`]. For tests that need it: with
/// `GANTRY_REQUIRE_NETNS_TESTS=1` (CI, once it installed the plugins) a `false` is a failure.
pub fn available_for_tests(test: &str) -> bool {
    let dirs: Vec<PathBuf> = DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect();
    if super::sandbox::running_as_root() && plugins_found(&dirs) {
        return true;
    }
    assert!(
        std::env::var("GANTRY_REQUIRE_NETNS_TESTS").as_deref() != Ok("1"),
        "{test}: GANTRY_REQUIRE_NETNS_TESTS=1 but this is not root or the CNI plugins are not in {DEFAULT_BIN_DIRS:?}"
    );
    eprintln!("note: {test} needs root and the CNI plugins in {DEFAULT_BIN_DIRS:?}, and was skipped");
    false
}

impl Network {
    /// The network for `config`: `Ok(Err(why))` when jobs share the node's network (why, for
    /// the start-up warning); an error when `--job-network cni` cannot be had.
    pub fn build(
        config: &NetworkConfig,
        state: &Path,
        scope: &str,
        root: bool,
    ) -> Result<Result<Self, String>, AgentError> {
        let dirs: Vec<PathBuf> = if config.bin_dirs.is_empty() {
            DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect()
        } else {
            config.bin_dirs.clone()
        };
        let shown = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        let why = match (config.mode, root) {
            (Mode::Shared, _) => Some("--job-network shared".to_owned()),
            (_, false) => Some("the agent is not root".to_owned()),
            _ if config.conf.is_none() && !plugins_found(&dirs) => Some(format!(
                "the CNI plugins bridge, host-local, portmap and firewall are not in {shown} \
                 (install containernetworking-plugins or pass --cni-bin-dir)"
            )),
            _ => None,
        };
        if let Some(why) = why {
            if config.mode == Mode::Cni {
                return Err(AgentError::Sandbox(format!("--job-network cni cannot be had: {why}")));
            }
            return Ok(Err(format!(
                "jobs share the node's network ({why}): a job can reach the node's loopback services \
                 and bind ports on the node's loopback"
            )));
        }
        let run = state.join("netns");
        let cni_dir = state.join("cni");
        for dir in [&run, &cni_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|e| AgentError::Sandbox(format!("creating {}: {e}", dir.display())))?;
        }
        let conf = match &config.conf {
            Some(path) => path.clone(),
            None => {
                let subnet = match &config.subnet {
                    Some(s) => check_subnet(s).map_err(AgentError::Sandbox)?,
                    None => {
                        let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
                        pick_subnet(scope_index(scope), &routed_elsewhere(&routes, &bridge_name(scope)))
                    }
                };
                let path = cni_dir.join("gantry.conflist");
                let text = default_conflist(scope, &subnet, &cni_dir.join("ipam")).to_string();
                std::fs::write(&path, text)
                    .map_err(|e| AgentError::Sandbox(format!("writing {}: {e}", path.display())))?;
                path
            }
        };
        let conflist = Conflist::load(&conf).map_err(|e| AgentError::Sandbox(e.to_string()))?;
        let own_conf = config.conf.is_none();
        Ok(Ok(Self { conflist, conf, dirs, run, scope: scope.to_owned(), own_conf }))
    }

    /// One line for the agent's start-up message.
    pub fn describe(&self) -> String {
        format!("network namespaces by CNI ({}: {})", self.conf.display(), self.conflist.types().join(", "))
    }

    /// Makes attempt `<job>-<attempt>`'s namespace and plugs it in, publishing `ports`; those
    /// also in `guarded` (a service replica's `$PORT`) admit the node side only, not other jobs
    /// ([`super::guard`]). Blocks (the plugins run `iptables`). On failure nothing is left behind.
    pub fn attach(
        &self,
        job_id: i64,
        attempt: u32,
        ports: &[u16],
        guarded: &[u16],
    ) -> Result<Attached, AgentError> {
        let fail = |why: String| AgentError::Sandbox(format!("the job's network: {why}"));
        let published = published_ports();
        for port in ports {
            if std::net::TcpListener::bind(("0.0.0.0", *port)).is_err() {
                return Err(fail(format!("port {port} is in use on this node and cannot be published")));
            }
            if published.contains(port) {
                return Err(fail(format!("port {port} is already published on this node by another job")));
            }
        }
        let stem = format!("{job_id}-{attempt}");
        let net = NetRef {
            conf: self.conf.clone(),
            dirs: self.dirs.clone(),
            netns: self.run.join(&stem),
            container_id: format!("gantry-{}-{stem}", self.scope),
            ports: ports.to_vec(),
        };
        // Left over from a run that died half-way: start clean.
        let _ = net.detach();
        netns::create(&net.netns).map_err(|e| fail(format!("creating the namespace: {e}")))?;
        let plugged = (|| {
            let runtime = net.runtime();
            let result =
                self.conflist.add(&net.dirs, &net.attachment(&runtime)).map_err(|e| fail(e.to_string()))?;
            let cached = json!({ "result": result, "ports": net.ports });
            std::fs::write(net.cache(), cached.to_string())
                .map_err(|e| fail(format!("keeping the result: {e}")))?;
            localnet_off(&self.conflist.bridges()).map_err(fail)?;
            super::guard::apply(&net.netns, &result, guarded).map_err(fail)?;
            Ok(gateway(&result))
        })();
        match plugged {
            Ok(gateway) => Ok(Attached { net, gateway }),
            Err(e) => {
                let _ = net.detach();
                Err(e)
            }
        }
    }

    /// Removes this agent's own bridge once no attempt is attached (a clean stop): the default
    /// conflist's bridge is this agent's alone. An operator's conflist's bridges are left.
    pub fn release(&self) {
        let attached = std::fs::read_dir(&self.run).map_or(0, |d| d.flatten().count());
        if attached > 0 || !self.own_conf {
            return;
        }
        for bridge in self.conflist.bridges() {
            let deleted = std::process::Command::new("ip")
                .args(["link", "delete", &bridge, "type", "bridge"])
                .env("PATH", super::env::DEFAULT_PATH)
                .stderr(std::process::Stdio::null())
                .status();
            if !deleted.is_ok_and(|s| s.success()) && Path::new("/sys/class/net").join(&bridge).exists() {
                tracing::warn!(%bridge, "could not remove the jobs' bridge");
            }
        }
    }

    /// Detaches and removes the namespaces of attempts not in `keep` (`<job>-<attempt>`).
    pub fn remove_orphans(&self, keep: &HashSet<String>) {
        let Ok(entries) = std::fs::read_dir(&self.run) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") || keep.contains(&name) {
                continue;
            }
            let net = NetRef {
                conf: self.conf.clone(),
                dirs: self.dirs.clone(),
                netns: entry.path(),
                container_id: format!("gantry-{}-{name}", self.scope),
                ports: Vec::new(),
            };
            if let Err(e) = net.detach() {
                tracing::warn!(error = %e, netns = %net.netns.display(), "could not remove a job's network");
            }
        }
    }
}

impl NetRef {
    /// Runs DEL (with the cached result), unmounts and removes the namespace and the cache.
    /// Blocks. Every step is tried; the first error is returned.
    pub fn detach(&self) -> Result<(), AgentError> {
        let cached: Option<Value> =
            std::fs::read_to_string(self.cache()).ok().and_then(|t| serde_json::from_str(&t).ok());
        // The cache also keeps the published ports, for a namespace found without its record.
        let mut net = self.clone();
        let kept = cached.as_ref().and_then(|c| c["ports"].as_array()).into_iter().flatten();
        net.ports
            .extend(kept.filter_map(|p| u16::try_from(p.as_u64()?).ok()).filter(|p| !self.ports.contains(p)));
        let cached = cached.map(|mut c| c["result"].take());
        let del = if cached.is_some() || netns::is_mounted(&self.netns) {
            let runtime = net.runtime();
            Conflist::load(&self.conf)
                .and_then(|c| c.del(&self.dirs, &self.attachment(&runtime), cached.as_ref()))
                .map_err(|e| AgentError::Sandbox(format!("removing the job's network: {e}")))
        } else {
            Ok(())
        };
        let removed = netns::remove(&self.netns).map_err(|source| AgentError::Io {
            what: format!("removing the network namespace {}", self.netns.display()),
            source,
        });
        let _ = std::fs::remove_file(self.cache());
        del.and(removed)
    }

    /// Opens the namespace for the job to enter.
    pub fn open(&self) -> std::io::Result<std::fs::File> {
        std::fs::File::open(&self.netns)
    }

    fn cache(&self) -> PathBuf {
        self.netns.with_extension("json")
    }

    fn runtime(&self) -> Map<String, Value> {
        let maps: Vec<Value> = self
            .ports
            .iter()
            .map(|p| json!({"hostPort": p, "containerPort": p, "protocol": "tcp"}))
            .collect();
        let mut runtime = Map::new();
        if !maps.is_empty() {
            runtime.insert("portMappings".into(), Value::Array(maps));
        }
        runtime
    }

    fn attachment<'a>(&'a self, runtime: &'a Map<String, Value>) -> Attachment<'a> {
        Attachment { container_id: &self.container_id, netns: &self.netns, ifname: IFNAME, runtime }
    }
}

/// Whether a gang's `MASTER_ADDR` names this node in a way a job's own namespace would take
/// for itself: a loopback address, `localhost`, or the node's host name.
pub fn names_this_node(addr: &str, hostname: &str) -> bool {
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    addr.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        || addr.eq_ignore_ascii_case("localhost")
        || addr.eq_ignore_ascii_case(hostname)
}

/// The TCP ports `portmap` publishes on this machine now (any agent's, any network's), from
/// its `CNI-HOSTPORT-DNAT` chain; empty when there is none.
fn published_ports() -> Vec<u16> {
    let out = std::process::Command::new("iptables")
        .args(["-w", "-t", "nat", "-S", "CNI-HOSTPORT-DNAT"])
        .env("PATH", super::env::DEFAULT_PATH)
        .stderr(std::process::Stdio::null())
        .output();
    out.map(|o| dports(&String::from_utf8_lossy(&o.stdout))).unwrap_or_default()
}

/// The ports of every `--dports A,B` in `iptables -S` output.
fn dports(rules: &str) -> Vec<u16> {
    rules
        .lines()
        .filter_map(|l| l.split_once("--dports ")?.1.split_whitespace().next())
        .flat_map(|list| list.split(',').filter_map(|p| p.parse().ok()))
        .collect()
}

/// The first gateway in a CNI result.
fn gateway(result: &Value) -> Option<IpAddr> {
    result.get("ips")?.as_array()?.iter().find_map(|ip| ip.get("gateway")?.as_str()?.parse().ok())
}

/// Turns `route_localnet` off on `bridges` (portmap's `snat` turns it on) and checks it is off.
fn localnet_off(bridges: &[String]) -> Result<(), String> {
    for bridge in bridges {
        let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
        std::fs::write(&path, "0").map_err(|e| format!("turning {path} off: {e}"))?;
        if std::fs::read_to_string(&path).map_err(|e| e.to_string())?.trim() != "0" {
            return Err(format!("{path} stays on"));
        }
    }
    Ok(())
}

/// `gtr` and the first 8 characters of the scope (an interface name has at most 15).
pub fn bridge_name(scope: &str) -> String {
    format!("gtr{}", scope.chars().take(8).collect::<String>())
}

/// The /24s of 10.128.0.0/10 that a default subnet is picked from.
const SUBNETS: u32 = 1 << 14;

/// Which /24 of 10.128.0.0/10 the scope names.
fn scope_index(scope: &str) -> u32 {
    u32::from_str_radix(&scope.chars().take(6).collect::<String>(), 16).unwrap_or(0) % SUBNETS
}

/// A /24 in 10.128.0.0/10 picked from the scope.
#[cfg(test)]
fn default_subnet(scope: &str) -> String {
    pick_subnet(scope_index(scope), &[])
}

/// The /24 number `start` of 10.128.0.0/10, or the next one no route of another interface
/// overlaps: a bridge another agent left behind (a `kill -9` does not remove it) or any network
/// of the node keeps its subnet, and two bridges with one subnet would route jobs' replies into
/// the wrong one.
fn pick_subnet(start: u32, taken: &[(u32, u32)]) -> String {
    let net = |i: u32| (10 << 24) | ((128 + (i >> 8)) << 16) | ((i & 0xff) << 8);
    let free = |n: u32| taken.iter().all(|(t, mask)| (n & mask) != (t & mask) || *mask == 0);
    let n = (0..SUBNETS).map(|k| net((start + k) % SUBNETS)).find(|n| free(*n)).unwrap_or(net(start));
    format!("{}.{}.{}.0/24", n >> 24, (n >> 16) & 0xff, (n >> 8) & 0xff)
}

/// The (network, mask) of each route in `/proc/net/route` text whose interface is not `own`,
/// as host-order IPv4 numbers (the file has them in little-endian hex); the default route is
/// left out.
fn routed_elsewhere(routes: &str, own: &str) -> Vec<(u32, u32)> {
    routes
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (iface, dest, mask) = (f.first()?, f.get(1)?, f.get(7)?);
            let parse = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::swap_bytes);
            let (dest, mask) = (parse(dest)?, parse(mask)?);
            (*iface != own && mask != 0).then_some((dest, mask))
        })
        .collect()
}

/// An IPv4 CIDR with a prefix of 8 to 29 bits.
fn check_subnet(s: &str) -> Result<String, String> {
    let bad = || format!("--cni-subnet takes an IPv4 subnet such as 10.88.0.0/24, not `{s}`");
    let (ip, len) = s.split_once('/').ok_or_else(bad)?;
    ip.parse::<std::net::Ipv4Addr>().map_err(|_| bad())?;
    len.parse::<u8>().ok().filter(|l| (8..=29).contains(l)).ok_or_else(bad)?;
    Ok(s.to_owned())
}

/// The default conflist: bridge + host-local, portmap, firewall.
fn default_conflist(scope: &str, subnet: &str, ipam: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": format!("gantry-{scope}"),
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge_name(scope),
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": subnet }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": ipam,
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true },
            { "type": "firewall" },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_localhost_and_the_host_name_name_this_node_and_other_addresses_do_not() {
        for addr in ["127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost", "Node-A"] {
            assert!(names_this_node(addr, "node-a"), "{addr}");
        }
        for addr in ["10.0.0.1", "node-b", "node-a.example"] {
            assert!(!names_this_node(addr, "node-a"), "{addr}");
        }
    }

    #[test]
    fn the_default_conflist_is_bridge_portmap_and_firewall_on_a_subnet_of_the_scope() {
        let value = default_conflist("0123abcd4567", &default_subnet("0123abcd4567"), Path::new("/s/ipam"));
        let list = Conflist::parse(&value).expect("a conflist");
        assert_eq!(list.types(), ["bridge", "portmap", "firewall"]);
        assert_eq!(list.bridges(), ["gtr0123abcd"]);
        assert_eq!(value["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.163.171.0/24");
        assert_ne!(default_subnet("0123abcd4567"), default_subnet("ffffff000000"));
    }

    #[test]
    fn a_subnet_another_interface_routes_is_skipped_for_the_next_free_one() {
        // /proc/net/route as the kernel writes it: a stale bridge holds 10.128.5.0/24, eth0 the
        // default route and 192.168.1.0/24, and the agent's own bridge is not counted.
        let routes = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            gtrstale0\t0005800A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            gtrmine00\t0006800A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let taken = routed_elsewhere(routes, "gtrmine00");
        assert_eq!(taken.len(), 2, "the default route and the agent's own bridge are left out: {taken:?}");
        assert_eq!(pick_subnet(5, &taken), "10.128.6.0/24", "10.128.5.0/24 is taken");
        assert_eq!(pick_subnet(6, &taken), "10.128.6.0/24", "its own bridge's subnet stays its own");
        assert_eq!(pick_subnet(SUBNETS - 1, &[]), "10.191.255.0/24");
        // A route covering the whole 10/8 leaves nothing free: the scope's own is kept.
        assert_eq!(pick_subnet(7, &[(10 << 24, 0xff00_0000)]), "10.128.7.0/24");
        assert!(check_subnet("10.88.0.0/24").is_ok());
        for bad in ["10.88.0.0", "10.88.0/24", "10.88.0.0/31", "fd00::/64"] {
            assert!(check_subnet(bad).is_err(), "{bad}");
        }
    }

    fn config(mode: Mode, bin: &Path) -> NetworkConfig {
        NetworkConfig { mode, bin_dirs: vec![bin.to_path_buf()], ..NetworkConfig::default() }
    }

    #[test]
    fn without_root_or_plugins_jobs_share_the_nodes_network_with_a_warning_and_cni_refuses_to_start() {
        let (state, bin) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let shared =
            |mode, root| Network::build(&config(mode, bin.path()), state.path(), "0123abcd4567", root);
        let why = shared(Mode::Auto, false).expect("not fatal").expect_err("shared");
        assert!(why.contains("not root") && why.contains("loopback"), "{why}");
        let why = shared(Mode::Auto, true).expect("not fatal").expect_err("shared");
        assert!(why.contains("are not in") && why.contains("containernetworking-plugins"), "{why}");
        assert!(
            shared(Mode::Shared, true)
                .expect("not fatal")
                .expect_err("shared")
                .contains("--job-network shared")
        );
        let err = shared(Mode::Cni, true).expect_err("refused");
        assert!(err.to_string().contains("--job-network cni cannot be had"), "{err}");
        for plugin in ["bridge", "host-local", "portmap", "firewall"] {
            std::fs::write(bin.path().join(plugin), "").expect("plugin");
        }
        let network = shared(Mode::Cni, true).expect("built").expect("namespaces");
        assert!(network.describe().contains("bridge, portmap, firewall"), "{}", network.describe());
        let written =
            std::fs::read_to_string(state.path().join("cni/gantry.conflist")).expect("conflist written");
        assert!(written.contains("10.163.171.0/24"), "{written}");
    }

    #[test]
    fn the_ports_portmap_publishes_are_read_from_its_dnat_chain() {
        let rules = "-N CNI-HOSTPORT-DNAT\n\
            -A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"n\\\" id: \\\"c\\\"\" -m multiport --dports 29501 -j CNI-DN-cc5\n\
            -A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 8080,9090 -j CNI-DN-aa1\n";
        assert_eq!(dports(rules), [29501, 8080, 9090]);
        assert!(dports("").is_empty());
    }

    #[test]
    fn a_result_names_its_gateway() {
        let result = json!({"ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1"}]});
        assert_eq!(gateway(&result), "10.1.2.1".parse().ok());
        assert_eq!(gateway(&json!({})), None);
    }
}
