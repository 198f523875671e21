//! A service replica's port admits the node side only: the gateway, never another job.
//!
//! A replica's `$PORT` is published on its node (`portmap`) so that the gateway reaches it at
//! `NODE:PORT`. Published alone, it would also answer every job on the same node: a job on the
//! same bridge reaches the replica's own address directly (bridged frames never cross the node's
//! `iptables`), and one that connects to `NODE:PORT` or the bridge's address is DNATed into it.
//! A replica runs a team's model behind the gateway's authentication, balancing and metering;
//! a job of another team must not be able to skip all three.
//!
//! What tells the two apart is the source address the replica sees:
//!
//! - a job on the replica's bridge keeps its own address, which lies in the bridge's subnet;
//! - a job connecting to a published address is masqueraded by `portmap`'s hairpin rule (its
//!   source is in the subnet) to the bridge's own address, also in the subnet;
//! - a job on another bridge of this machine (another agent's, say) is masqueraded by its own
//!   bridge's `ipMasq` to the outgoing bridge's address: again the replica's subnet;
//! - the gateway on this node connects to the node's non-loopback address (`route_localnet`
//!   stays off), and its source is that address; a gateway on another machine keeps its own.
//!
//! So the rule, written into the replica's own namespace right after CNI ADD, is one line per
//! port and address family of the attachment: `INPUT -s SUBNET -p tcp --dport PORT -j REJECT
//! --reject-with tcp-reset`. It lives and dies with the namespace (DEL has nothing to remove)
//! and the job cannot change it: it runs as its team's user, without `CAP_NET_ADMIN` in a
//! namespace the agent made. Other ports of the replica (a gang's rendezvous port, anything it
//! binds besides `$PORT`) are left as they were. What this does not cover (jobs on other
//! nodes, jobs that share the node's network) is in `docs/security.md`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::netns;

/// The `iptables`/`ip6tables` argument lists that refuse `ports` from the subnets of a CNI
/// ADD `result` (its `ips[].address`, CIDR with the host part set, which iptables masks).
pub fn rules(result: &Value, ports: &[u16]) -> Vec<(&'static str, Vec<String>)> {
    let subnets = result
        .get("ips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.get("address")?.as_str())
        .filter(|cidr| cidr.contains('/'));
    let mut out = Vec::new();
    for subnet in subnets {
        let tool = if subnet.contains(':') { "ip6tables" } else { "iptables" };
        for port in ports {
            let args = ["-w", "-A", "INPUT", "-s", subnet, "-p", "tcp", "--dport", &port.to_string()]
                .into_iter()
                .chain(["-j", "REJECT", "--reject-with", "tcp-reset"])
                .map(str::to_owned)
                .collect();
            out.push((tool, args));
        }
    }
    out
}

/// Writes [`rules`] into the namespace at `ns`. An attachment without an address in its result
/// cannot be guarded: that is an error, so a replica is never published unguarded.
pub fn apply(ns: &Path, result: &Value, ports: &[u16]) -> Result<(), String> {
    if ports.is_empty() {
        return Ok(());
    }
    let rules = rules(result, ports);
    if rules.is_empty() {
        return Err(
            "the CNI result names no address, so the service port cannot be kept to the gateway".into()
        );
    }
    for (tool, args) in rules {
        let mut command = Command::new(tool);
        command.args(&args).env("PATH", super::env::DEFAULT_PATH);
        let out =
            netns::run_in(ns, command).map_err(|e| format!("running {tool} in the job's namespace: {e}"))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{tool} {} in the job's namespace: {}", args.join(" "), stderr.trim()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_port_is_refused_from_each_subnet_of_the_attachment_with_the_tool_of_its_family() {
        let result = json!({"ips": [
            {"address": "10.128.0.7/24", "gateway": "10.128.0.1"},
            {"address": "fd00::7/64"},
        ]});
        let rules = rules(&result, &[30001, 30002]);
        assert_eq!(rules.len(), 4);
        assert_eq!(rules[0].0, "iptables");
        assert_eq!(
            rules[0].1.join(" "),
            "-w -A INPUT -s 10.128.0.7/24 -p tcp --dport 30001 -j REJECT --reject-with tcp-reset"
        );
        assert_eq!(rules[3].0, "ip6tables");
        assert!(rules[3].1.join(" ").contains("-s fd00::7/64 -p tcp --dport 30002"));
    }

    #[test]
    fn a_result_without_an_address_refuses_to_publish_a_guarded_port_and_no_port_needs_nothing() {
        let err = apply(Path::new("/nonexistent"), &json!({}), &[30001]).expect_err("no address");
        assert!(err.contains("names no address"), "{err}");
        assert!(apply(Path::new("/nonexistent"), &json!({}), &[]).is_ok());
    }
}
