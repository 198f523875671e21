//! File descriptors: the server raises its soft `RLIMIT_NOFILE` to the hard limit at start and
//! fits every listener's connection cap under what it then has, with a reserve.
//!
//! Debian starts processes with a soft limit of 1,024 while the gateway admitted 10,000
//! connections: 1,100 idle gateway connections took every descriptor, the API timed out and a
//! replica failed ("Too many open files" creating its cgroup). The soft limit is a default, not
//! a policy (Go's runtime raises it at start for the same reason); the hard limit is the
//! administrator's. What is left after the reserve (the store, logs, jobs' processes and
//! pipes, probes, outgoing connections) is shared: the API at most a quarter, the gateway the
//! rest at two descriptors a connection (the client's and its replica's).

use crate::config::ServerConfig;

/// Descriptors kept for everything but the listeners' connections (the unix socket's
/// [`SOCKET_CONNECTIONS`] included).
pub const RESERVE: u64 = 512;

/// Open connections at most on the API's unix socket (the local CLI and agent).
pub const SOCKET_CONNECTIONS: usize = 64;

/// Raises the soft limit on open files to the hard limit (once is enough; again is harmless);
/// the soft limit in force afterwards.
#[allow(unsafe_code)] // reason: getrlimit(2) and setrlimit(2) have no wrapper in std.
pub fn raise_soft_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: `raised` is a valid rlimit; raising the soft limit up to the hard one needs no
        // privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur;
        }
        tracing::warn!(soft = lim.rlim_cur, hard = lim.rlim_max, "could not raise the open-files limit");
    }
    lim.rlim_cur
}

/// Lowers `config`'s connection caps so that all of them together, with [`RESERVE`], stay
/// within `limit` descriptors; the caps it changed, as a sentence for the log.
pub fn fit(config: &mut ServerConfig, limit: u64) -> Option<String> {
    let budget = usize::try_from(limit.saturating_sub(RESERVE).max(64)).unwrap_or(usize::MAX);
    let (api_was, gateway_was) = (config.max_connections, config.gateway.max_connections);
    let api = api_was.min((budget / 4).max(16));
    let gateway = gateway_was.min((budget.saturating_sub(api) / 2).max(16));
    config.max_connections = api;
    config.max_connections_per_address = config.max_connections_per_address.min(api);
    config.gateway.max_connections = gateway;
    config.gateway.max_connections_per_address = config.gateway.max_connections_per_address.min(gateway);
    (api != api_was || gateway != gateway_was).then(|| {
        format!(
            "{limit} open files allowed: the API takes at most {api} connections (was {api_was}) and the \
             gateway {gateway} (was {gateway_was}); raise the hard limit (LimitNOFILE=) for more"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_a_limit_of_1024_the_caps_and_the_reserve_fit_and_a_large_limit_changes_nothing() {
        let mut c = ServerConfig::local("/tmp/logs".into());
        let said = fit(&mut c, 1024).expect("lowered");
        let used = c.max_connections + 2 * c.gateway.max_connections + RESERVE as usize;
        assert!(used <= 1024, "{used} descriptors: {said}");
        assert!(c.max_connections_per_address <= c.max_connections);
        assert!(c.gateway.max_connections_per_address <= c.gateway.max_connections);
        assert!(c.max_connections >= 100 && c.gateway.max_connections >= 150, "{said}");
        let mut big = ServerConfig::local("/tmp/logs".into());
        let before = (big.max_connections, big.gateway.max_connections);
        assert_eq!(fit(&mut big, 1 << 20), None);
        assert_eq!((big.max_connections, big.gateway.max_connections), before);
        // A cap set lower than the descriptors allow stays as set.
        let mut small = ServerConfig { max_connections: 2, ..ServerConfig::local("/tmp/logs".into()) };
        fit(&mut small, 1024);
        assert_eq!(small.max_connections, 2);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let soft = raise_soft_limit();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        #[allow(unsafe_code)] // reason: reading the limit back.
        // SAFETY: `lim` is a valid, writable rlimit.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
        assert!(ok);
        assert_eq!(soft, lim.rlim_cur);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
