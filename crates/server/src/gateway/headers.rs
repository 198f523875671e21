//! Which headers cross the gateway. The client's are not trusted: hop-by-hop headers (RFC 9110
//! §7.6.1: `Connection` and every header it names, `Keep-Alive`, `TE`, `Trailer`,
//! `Transfer-Encoding`, `Upgrade`, `Proxy-*`) describe the client's connection, not the
//! replica's, and are dropped both ways; `Host`, `X-Forwarded-For`, `X-Forwarded-Proto`,
//! `X-Forwarded-Host`, `X-Real-IP` and `Forwarded` are replaced by what the gateway itself saw, so
//! a replica that logs or trusts them gets the truth rather than whatever the client claimed; and
//! `Authorization` stops here: the caller's Gantry token is for the gateway, and a replica (any
//! code a team runs) must never receive another user's credential.

use std::net::SocketAddr;

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Whether `name` is hop-by-hop by itself: `Connection`, `Keep-Alive`, `TE`, `Trailer`,
/// `Transfer-Encoding`, `Upgrade` or any `Proxy-*` (header names are lowercase).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    match name.as_str() {
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade" => true,
        other => other.starts_with("proxy-"),
    }
}

/// Headers the gateway sets itself or has dealt with (never copied from the client): `Expect`
/// was answered by the gateway, which has the whole body before it picks a replica.
fn is_gateway_set(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "authorization"
            | "x-forwarded-for"
            | "x-forwarded-proto"
            | "x-forwarded-host"
            | "x-real-ip"
            | "forwarded"
            | "expect"
    )
}

/// The names a `Connection` header lists (none, without allocating, when it has none).
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

/// Drops hop-by-hop headers: the fixed list, any `Proxy-*`, and every name `Connection` lists.
/// One pass over the names; a map with none of them is left untouched.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = connection_named(headers);
    let doomed: Vec<HeaderName> =
        headers.keys().filter(|k| is_hop_by_hop(k) || named.contains(k)).cloned().collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// `Host` for a replica at `addr`: its address (computed once per replica, not per request).
pub fn host_value(addr: SocketAddr) -> HeaderValue {
    HeaderValue::from_str(&addr.to_string()).unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}

/// The request headers a replica gets: the client's, without hop-by-hop and gateway-set ones,
/// plus `Host` (the replica's address), `X-Forwarded-For` (the client's address as the gateway
/// saw it), `X-Forwarded-Proto`, `X-Forwarded-Host` (the client's `Host`, when it had one) and
/// `Forwarded` (RFC 7239) saying the same.
pub fn to_replica(client: &HeaderMap, peer: SocketAddr, tls: bool, replica: SocketAddr) -> HeaderMap {
    for_replica(client, peer, tls, host_value(replica))
}

/// [`to_replica`] with the replica's `Host` value already made. The kept headers are copied
/// into a fresh map in one pass (rather than the whole map cloned and then searched for each
/// name to remove).
pub(crate) fn for_replica(client: &HeaderMap, peer: SocketAddr, tls: bool, host: HeaderValue) -> HeaderMap {
    let named = connection_named(client);
    let mut headers = HeaderMap::with_capacity(client.len() + 5);
    for (name, value) in client {
        if !is_hop_by_hop(name) && !is_gateway_set(name) && !named.contains(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    let original_host = client.get(header::HOST);
    let proto = if tls { "https" } else { "http" };
    let ip = peer.ip().to_canonical();
    let insert = |headers: &mut HeaderMap, name: HeaderName, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    headers.insert(header::HOST, host);
    let ip_text = ip.to_string();
    insert(&mut headers, HeaderName::from_static("x-forwarded-for"), &ip_text);
    headers.insert(HeaderName::from_static("x-forwarded-proto"), HeaderValue::from_static(proto));
    let mut forwarded = if ip.is_ipv6() {
        format!("for=\"[{ip_text}]\";proto={proto}")
    } else {
        format!("for={ip_text};proto={proto}")
    };
    if let Some(host) = original_host.and_then(|h| h.to_str().ok()).filter(|h| is_host(h)) {
        forwarded.push_str(";host=\"");
        forwarded.push_str(host);
        forwarded.push('"');
        insert(&mut headers, HeaderName::from_static("x-forwarded-host"), host);
    }
    insert(&mut headers, header::FORWARDED, &forwarded);
    headers
}

/// A `Host` value safe to repeat inside a quoted `Forwarded` parameter.
fn is_host(h: &str) -> bool {
    !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}

/// The response headers a client gets: the replica's, without hop-by-hop ones.
pub fn to_client(replica: &mut HeaderMap) {
    strip_hop_by_hop(replica);
}

/// Scopes every cookie a replica sets to its service's path (`/team/service/`): all services
/// share the gateway's origin, so a replica's `Set-Cookie: …; Path=/otherteam/` would otherwise
/// reach browsers on another team's service. Its own `Path` and `Domain` are replaced; a cookie
/// that is not text is dropped.
pub fn scope_cookies(headers: &mut HeaderMap, prefix: &str) {
    use axum::http::header::SET_COOKIE;
    let cookies: Vec<HeaderValue> = headers.get_all(SET_COOKIE).iter().cloned().collect();
    if cookies.is_empty() {
        return;
    }
    headers.remove(SET_COOKIE);
    for cookie in cookies {
        let Ok(text) = cookie.to_str() else { continue };
        let mut parts = text.split(';').map(str::trim).filter(|p| !p.is_empty());
        let Some(pair) = parts.next() else { continue };
        let kept = parts.filter(|attr| {
            let name = attr.split('=').next().unwrap_or_default().trim().to_ascii_lowercase();
            name != "path" && name != "domain"
        });
        let scoped: Vec<&str> = std::iter::once(pair).chain(kept).collect();
        let line = format!("{}; Path={prefix}", scoped.join("; "));
        if let Ok(v) = HeaderValue::from_str(&line) {
            headers.append(SET_COOKIE, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_cookies_are_scoped_to_its_service_whatever_path_or_domain_they_name() {
        let mut h = HeaderMap::new();
        for c in ["sid=1; Path=/otherteam/; HttpOnly", "a=b; Domain=evil.example; path=/; Secure", "plain=x"]
        {
            h.append(axum::http::header::SET_COOKIE, HeaderValue::from_static(c));
        }
        scope_cookies(&mut h, "/ml/chat/");
        let got: Vec<&str> =
            h.get_all(axum::http::header::SET_COOKIE).iter().map(|v| v.to_str().expect("text")).collect();
        assert_eq!(
            got,
            ["sid=1; HttpOnly; Path=/ml/chat/", "a=b; Secure; Path=/ml/chat/", "plain=x; Path=/ml/chat/"]
        );
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).expect("name"),
                    HeaderValue::from_str(v).expect("value"),
                )
            })
            .collect()
    }

    #[test]
    fn client_claims_about_forwarding_and_hop_by_hop_headers_are_replaced_or_dropped() {
        let client = map(&[
            ("host", "gw.example:7080"),
            ("authorization", "Bearer secret"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "hop"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("accept", "text/event-stream"),
        ]);
        let peer: SocketAddr = "10.1.2.3:5555".parse().expect("addr");
        let replica: SocketAddr = "127.0.0.1:9000".parse().expect("addr");
        let out = to_replica(&client, peer, false, replica);
        assert_eq!(out["host"], "127.0.0.1:9000");
        assert_eq!(out["x-forwarded-for"], "10.1.2.3");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert_eq!(out["x-forwarded-host"], "gw.example:7080");
        assert_eq!(out["forwarded"], "for=10.1.2.3;proto=http;host=\"gw.example:7080\"");
        assert_eq!(out["accept"], "text/event-stream");
        for gone in [
            "authorization",
            "x-real-ip",
            "connection",
            "x-private",
            "keep-alive",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
        ] {
            assert!(!out.contains_key(gone), "{gone} reached the replica");
        }
    }

    #[test]
    fn an_ipv6_client_is_quoted_in_forwarded() {
        let out = to_replica(
            &HeaderMap::new(),
            "[::1]:1".parse().expect("addr"),
            true,
            "127.0.0.1:1".parse().expect("addr"),
        );
        assert_eq!(out["forwarded"], "for=\"[::1]\";proto=https");
        assert_eq!(out["x-forwarded-for"], "::1");
    }

    #[test]
    fn a_replicas_hop_by_hop_headers_do_not_reach_the_client() {
        let mut h =
            map(&[("connection", "x-a"), ("x-a", "1"), ("keep-alive", "5"), ("content-type", "text/plain")]);
        to_client(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
    }
}
