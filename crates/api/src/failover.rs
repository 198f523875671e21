//! Failing over between control-plane replicas: the part of the contract clients and servers
//! share.
//!
//! A client (the CLI, an agent) is given several server addresses and sends each request to the
//! one that last worked. When that one cannot be reached, or answers that it cannot serve the
//! request, the client tries the next address; what it may retry depends on what the failure
//! proves about the request:
//!
//! - [`Failure::NotSent`]: the connection never carried the request (refused, no such host, the
//!   TCP connect or the TLS handshake failed or timed out). Any request may go to the next
//!   address, a submission or a cancel included.
//! - [`Failure::MaybeSent`]: the connection broke or timed out after the request was written;
//!   the server may have acted on it. Only a request that is safe to repeat goes on: a read,
//!   or a write that carries an idempotency key the store honours (a submission's `request_id`).
//! - [`Failure::NotServing`]: a replica answered 503 with [`NOT_SERVING_HEADER`]: by contract it
//!   did nothing with the request (a follower that cannot serve it, a replica that lost its
//!   database), so any request may go on.
//! - [`Failure::Unavailable`]: some other 503; the server's part is unknown, as for `MaybeSent`.
//!
//! Every other answer is the server's word on the request and is returned as it is. [`Rotation`]
//! is the order of the addresses: it starts at the one that worked last, which a successful
//! request makes the first for every later one of the process.

/// A 503 answer carrying this header (any value: the role, e.g. `follower`) did not act on the
/// request, so a client may send it to another replica whatever it is.
pub const NOT_SERVING_HEADER: &str = "x-gantry-not-serving";

/// How a request to one address failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Nothing was sent: refused, no such host, connect or TLS handshake failed or timed out.
    NotSent,
    /// The request may have reached the server: reset or timeout after it was written.
    MaybeSent,
    /// A 503 with [`NOT_SERVING_HEADER`]: the replica did not act on the request.
    NotServing,
    /// Another 503: the replica may have acted on it.
    Unavailable,
}

/// Whether a request may be sent again, to another replica, after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// A read, or a write with an idempotency key: repeating it changes nothing.
    Safe,
    /// A write without one (a cancel, a token, a join): only when nothing was done.
    Unsafe,
}

/// Whether a request that failed so goes to the next address.
pub fn try_next(failure: Failure, repeat: Repeat) -> bool {
    match failure {
        Failure::NotSent | Failure::NotServing => true,
        Failure::MaybeSent | Failure::Unavailable => repeat == Repeat::Safe,
    }
}

/// A comma-separated list of server URLs (`https://a:7070,https://b:7070`) as a list, each
/// without its trailing `/`; a sentence when an entry is empty or not an http(s) URL.
pub fn parse_servers(text: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = text.split(',').map(|s| s.trim().trim_end_matches('/').to_owned()).collect();
    for url in &list {
        if url.is_empty() {
            return Err(format!("`{text}`: an empty server address (separate addresses by one comma)"));
        }
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(format!("`{url}`: a server address starts with https:// (or http://)"));
        }
    }
    Ok(list)
}

/// The order in which addresses are tried: from the one that last worked, around the list.
#[derive(Debug, Default)]
pub struct Rotation {
    current: std::sync::atomic::AtomicUsize,
}

impl Rotation {
    /// The indices of a list of `len` addresses, from the one that last worked.
    pub fn order(&self, len: usize) -> impl Iterator<Item = usize> {
        let start = self.current.load(std::sync::atomic::Ordering::Relaxed);
        (0..len).map(move |i| (start + i) % len.max(1))
    }

    /// The address at `index` answered: later requests go there first.
    pub fn worked(&self, index: usize) {
        self.current.store(index, std::sync::atomic::Ordering::Relaxed);
    }

    /// The index of the address that last worked (0 before any).
    pub fn current(&self) -> usize {
        self.current.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_that_prove_nothing_was_done_retry_a_write_without_a_key() {
        assert!(try_next(Failure::NotSent, Repeat::Unsafe));
        assert!(try_next(Failure::NotServing, Repeat::Unsafe));
        assert!(!try_next(Failure::MaybeSent, Repeat::Unsafe));
        assert!(!try_next(Failure::Unavailable, Repeat::Unsafe));
        for failure in [Failure::NotSent, Failure::MaybeSent, Failure::NotServing, Failure::Unavailable] {
            assert!(try_next(failure, Repeat::Safe), "{failure:?}");
        }
    }

    #[test]
    fn the_rotation_starts_at_the_address_that_worked_and_wraps_around() {
        let rotation = Rotation::default();
        assert_eq!(rotation.order(3).collect::<Vec<_>>(), [0, 1, 2]);
        rotation.worked(2);
        assert_eq!(rotation.order(3).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(rotation.current(), 2);
        assert_eq!(rotation.order(1).collect::<Vec<_>>(), [0], "one address past its end");
    }

    #[test]
    fn a_server_list_is_split_on_commas_and_each_address_must_be_a_url() {
        assert_eq!(
            parse_servers("https://a:7070/, https://b:7070").expect("list"),
            ["https://a:7070", "https://b:7070"]
        );
        assert_eq!(parse_servers("http://127.0.0.1:7070").expect("one"), ["http://127.0.0.1:7070"]);
        assert!(parse_servers("https://a:7070,,https://b:7070").expect_err("empty").contains("empty"));
        assert!(parse_servers("a:7070").expect_err("no scheme").contains("https://"));
    }
}
