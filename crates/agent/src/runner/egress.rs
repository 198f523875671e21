//! Where the agent may fetch a job's data from: never the node or its networks.
//!
//! The agent stages inputs and uploads outputs as root, on the node's network, with the node's
//! view of its loopback services, its link-local cloud metadata service (169.254.169.254,
//! `fe80::/10`) and the private networks behind it. A URL or an S3 endpoint a member chose must
//! not turn that view into theirs (server-side request forgery: a `--input
//! cred=http://169.254.169.254/latest/meta-data/iam/security-credentials/node-role` handed the
//! node role's keys to the job). So every connection a member's source opens is checked at the
//! address it connects to, after resolution ([`Egress::resolver`]: the name is resolved once per
//! connection and what the check passed is what is dialled, so a name that changes its answer
//! between a check and a connect gains nothing), and so is every redirect's target
//! ([`Egress::redirects`]; an IP literal skips resolution, so the URL itself is checked,
//! [`Egress::check_url`]).
//!
//! Refused unless an admin allowed it (`--allow-source-net CIDR`, `--allow-source-host HOST`):
//! loopback, link-local, unspecified, multicast and broadcast addresses, the private ranges
//! (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), IPv4 in IPv6 of any of those, and the
//! node's own addresses (an address the agent can bind is one of the node's).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

/// Most redirects a source may answer before the fetch is given up.
const MAX_REDIRECTS: usize = 5;

/// Longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What an admin opened to sources beyond the public internet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Egress {
    /// Networks sources may reach (`--allow-source-net`).
    nets: Vec<IpNet>,
    /// Host names sources may reach whatever they resolve to (`--allow-source-host`), lower case.
    hosts: Vec<String>,
}

impl Egress {
    /// The allow-list: networks as CIDR (`10.0.0.0/8`, `fd00::/8`, or one address) and host names.
    pub fn new(nets: &[String], hosts: &[String]) -> Result<Self, String> {
        let nets = nets
            .iter()
            .map(|n| {
                let n = n.trim();
                n.parse::<IpNet>()
                    .or_else(|_| n.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("`{n}` is not a network: give CIDR (10.20.0.0/16) or one address"))
            })
            .collect::<Result<_, _>>()?;
        let hosts = hosts
            .iter()
            .map(|h| {
                let h = h.trim().trim_end_matches('.').to_ascii_lowercase();
                if h.is_empty() || h.contains(['/', ':', ' ']) {
                    Err(format!("`{h}` is not a host name (give the name alone, without scheme or port)"))
                } else {
                    Ok(h)
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { nets, hosts })
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Whether a source may connect to `ip` (reached through `host`).
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        if self.host_allowed(host) || self.nets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match forbidden(ip) {
            Some(what) => Err(refusal(host, ip, what)),
            None => Ok(()),
        }
    }

    /// Checks a URL before it is fetched: `http` or `https`, and an IP literal host allowed (a
    /// name is checked at each connection by [`Egress::resolver`]).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("`{}` is not an http(s) URL", url.scheme()));
        }
        let host = url.host_str().ok_or_else(|| "the URL names no host".to_owned())?;
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => self.check_ip(host, ip),
            Err(_) => Ok(()),
        }
    }

    /// A DNS resolver that hands reqwest only the addresses this allow-list lets a source reach.
    pub fn resolver(self: &Arc<Self>) -> Arc<Guarded> {
        Arc::new(Guarded(Arc::clone(self)))
    }

    /// A redirect policy that follows at most [`MAX_REDIRECTS`], each to a URL [`check_url`]
    /// passes (its name is checked again when it is connected to).
    ///
    /// [`check_url`]: Egress::check_url
    pub fn redirects(self: &Arc<Self>) -> reqwest::redirect::Policy {
        let me = Arc::clone(self);
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match me.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(format!("redirected: {e}")),
            }
        })
    }

    /// A reqwest client for a member's sources: guarded resolution and redirects, no proxy
    /// from the environment, the system's roots.
    pub fn client(self: &Arc<Self>) -> Result<reqwest::Client, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .dns_resolver(self.resolver())
            .redirect(self.redirects())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("building an HTTP client: {e}"))
    }
}

/// The sentence of a refused address (never longer than a reason may be).
fn refusal(host: &str, ip: IpAddr, what: &str) -> String {
    let host: String = host.chars().take(80).collect();
    let at = if host == ip.to_string() { host } else { format!("{host} ({ip})") };
    format!(
        "{at} is {what}: a job's sources may not reach the node or its networks \
         (an admin opens one with --allow-source-net or --allow-source-host)"
    )
}

/// What makes `ip` off limits to a member's source, if anything.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4).or_else(|| own(ip)),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped().or_else(|| nat64_or_compat(v6)) {
                return forbidden_v4(v4).or_else(|| own(IpAddr::V4(v4)));
            }
            forbidden_v6(v6).or_else(|| own(ip))
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_link_local() {
        Some("a link-local address (the cloud metadata service's)")
    } else if ip.is_unspecified() || a == 0 {
        Some("an unspecified address")
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        Some("a multicast, broadcast or reserved address")
    } else if ip.is_private() {
        Some("a private address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared (carrier-grade NAT) address")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address (the cloud metadata service's)")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if first & 0xffc0 == 0xfec0 {
        Some("a site-local address")
    } else {
        None
    }
}

/// The IPv4 address inside an IPv4-compatible (`::a.b.c.d`) or NAT64 (`64:ff9b::/96`) address.
fn nat64_or_compat(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compat = s[..6].iter().all(|&x| x == 0) && !ip.is_loopback() && !ip.is_unspecified();
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0);
    (compat || nat64).then_some(low)
}

/// One of the node's own addresses: the agent can bind it.
fn own(ip: IpAddr) -> Option<&'static str> {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok().then_some("one of the node's own addresses")
}

/// A resolver that drops the addresses a source may not reach, and fails when none is left.
#[derive(Debug)]
pub struct Guarded(Arc<Egress>);

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let egress = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match egress.check_ip(&host, a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused.get_or_insert(e);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let why = refused.unwrap_or_else(|| format!("{host} resolves to no address"));
                return Err(why.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// object_store's HTTP client for a member's S3 endpoint: every connection through
/// [`Guarded`], no redirect followed, no proxy from the environment.
#[derive(Debug)]
pub struct S3Connector {
    egress: Arc<Egress>,
    allow_http: bool,
}

impl S3Connector {
    /// For endpoints this allow-list lets a source reach; plain `http` only when `allow_http`.
    pub fn new(egress: Arc<Egress>, allow_http: bool) -> Self {
        Self { egress, allow_http }
    }
}

impl object_store::client::HttpConnector for S3Connector {
    fn connect(
        &self,
        options: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        use object_store::ClientConfigKey;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let duration = |key| {
            options.get_config_value(&key).and_then(|v| humantime_secs(&v)).map(Duration::from_secs_f64)
        };
        let mut b = reqwest::Client::builder()
            .dns_resolver(self.egress.resolver())
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .https_only(!self.allow_http)
            .connect_timeout(duration(ClientConfigKey::ConnectTimeout).unwrap_or(CONNECT_TIMEOUT))
            .pool_idle_timeout(Duration::from_secs(15));
        if let Some(t) = duration(ClientConfigKey::Timeout) {
            b = b.timeout(t);
        }
        let client =
            b.build().map_err(|e| object_store::Error::Generic { store: "S3", source: Box::new(e) })?;
        Ok(object_store::client::HttpClient::new(client))
    }
}

/// Seconds of a duration as object_store writes its settings (`30s`, `5s`, `1.5s`, `100ms`).
fn humantime_secs(v: &str) -> Option<f64> {
    let v = v.trim();
    if let Some(ms) = v.strip_suffix("ms") {
        return ms.trim().parse::<f64>().ok().map(|m| m / 1000.0);
    }
    v.strip_suffix('s').unwrap_or(v).trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn an_address_the_node_can_bind_is_its_own_and_refused_whatever_its_range() {
        // Loopback is the one address every node has; a public address it has (a cloud VM's
        // elastic IP on its interface) is refused the same way, by being bindable.
        assert_eq!(own(ip("127.0.0.1")), Some("one of the node's own addresses"));
        assert_eq!(own(ip("8.8.8.8")), None, "not an address of this machine");
        assert_eq!(own(ip("198.51.100.7")), None);
    }

    #[test]
    fn the_node_its_metadata_service_and_private_networks_are_refused_and_the_internet_is_not() {
        let none = Egress::default();
        for bad in [
            "127.0.0.1",
            "127.0.1.7",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            let err = none.check_ip("h", ip(bad)).expect_err(bad);
            assert!(err.contains("may not reach the node"), "{bad}: {err}");
            assert!(err.len() <= 300, "{err}");
        }
        for good in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1"] {
            none.check_ip("h", ip(good)).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn an_admin_opens_a_network_or_a_host_and_nothing_else() {
        let e = Egress::new(&["10.20.0.0/16".into(), "127.0.0.2".into()], &["s3.internal.".into()])
            .expect("valid");
        assert!(e.check_ip("x", ip("10.20.3.4")).is_ok());
        assert!(e.check_ip("x", ip("10.21.0.1")).is_err());
        assert!(e.check_ip("x", ip("127.0.0.2")).is_ok());
        assert!(e.check_ip("x", ip("127.0.0.1")).is_err());
        assert!(e.check_ip("S3.Internal", ip("192.168.0.9")).is_ok());
        assert!(Egress::new(&["10.0.0.0/33".into()], &[]).is_err());
        assert!(Egress::new(&[], &["http://x".into()]).is_err());
    }

    #[test]
    fn a_url_with_an_address_is_checked_before_any_connection() {
        let e = Egress::default();
        let url = |s: &str| reqwest::Url::parse(s).expect("url");
        assert!(e.check_url(&url("http://169.254.169.254/latest/meta-data/")).is_err());
        assert!(e.check_url(&url("http://[::1]:8080/x")).is_err());
        assert!(e.check_url(&url("http://2130706433/")).is_err(), "127.0.0.1 as a number");
        assert!(e.check_url(&url("ftp://example.com/x")).is_err());
        assert!(e.check_url(&url("https://example.com/x")).is_ok());
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_at_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let client = Arc::new(Egress::default()).client().expect("client");
        let err = client.get(format!("http://localhost:{port}/")).send().await.expect_err("refused");
        let chain = {
            let mut s = err.to_string();
            let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(&err);
            while let Some(c) = cur {
                s.push_str(&format!(": {c}"));
                cur = c.source();
            }
            s
        };
        assert!(chain.contains("loopback"), "{chain}");
    }
}
