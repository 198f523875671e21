//! Where the gateway reaches a replica: its node's address, resolved, and its port.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use gantry_store::Node;

use super::replica::port;

/// Where the gateway reaches a running replica: its node's address and its port.
pub(super) fn address(
    job: &gantry_store::Job,
    addrs: &HashMap<String, Option<IpAddr>>,
) -> Option<SocketAddr> {
    let ip = addrs.get(job.node_id.as_deref()?)?.as_ref()?;
    Some(SocketAddr::new(*ip, port(job)?))
}

/// Each node's address: its advertised address, else its host name, resolved.
///
/// A node whose jobs have network namespaces publishes a replica's port with `portmap`, whose
/// rule catches connections to the node's own addresses but, with `route_localnet` off (the
/// agent keeps it off so that jobs never reach the node's loopback), not to `127.0.0.0/8`. A node
/// that names itself by a loopback address is this machine: the gateway reaches its replicas
/// through one of this machine's other addresses instead.
pub(super) async fn resolve(nodes: &[Node]) -> HashMap<String, Option<IpAddr>> {
    let mut out = HashMap::new();
    for n in nodes {
        let host = n.advertise_addr.clone().unwrap_or_else(|| n.hostname.clone());
        let ip = match host.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => tokio::net::lookup_host((host.as_str(), 0))
                .await
                .ok()
                .and_then(|mut a| a.next())
                .map(|a| a.ip()),
        };
        let ip = match ip {
            Some(ip) if ip.is_loopback() && n.network == gantry_store::NodeNetwork::Cni => {
                Some(own_address().unwrap_or(ip))
            }
            other => other,
        };
        out.insert(n.id.clone(), ip);
    }
    out
}

/// A non-loopback address of this machine: the source of its route toward a private address
/// (a UDP "connection" sends nothing).
fn own_address() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    socket.connect(("10.255.255.254", 9)).ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}
