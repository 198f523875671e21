//! One request through the gateway: path, token, body, replica, response (see the module
//! documentation of [`super`] for the stages).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::{Json, body::Body};
use bytes::Bytes;
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;

use super::Gateway;
use super::balance::{Refusal, Service};
use super::headers;
use super::proxy::{self, Completion, Relay, SendError, Timeouts};
use super::routes::ServiceKey;
use super::stats::RequestCounters;
use crate::error::ErrorBody;

/// Answers one request.
pub(crate) async fn handle(gateway: &Gateway, req: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let Some((key, target)) = split(&parts.uri) else {
        return error(
            StatusCode::NOT_FOUND,
            "no such service: gateway paths are /<team>/<service>/<path>".into(),
        );
    };
    let service = gateway.service(&key);
    let public = service.as_ref().is_some_and(|s| s.is_public());
    if !public {
        let Some(token) = crate::api::bearer(&parts.headers) else {
            let mut refused = error(StatusCode::UNAUTHORIZED, format!("{key} needs a bearer token"));
            refused.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return refused;
        };
        // Asked even for a service that does not exist, so both cost the same.
        let allowed = gateway.authorizer.allows(&token, &key).await;
        if !allowed || service.is_none() {
            // Refusals are counted per address as the API counts bad tokens: past the limit the
            // address gets 429 for a minute (a token that is allowed still passes).
            let ip = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
            let ip = ip.unwrap_or(std::net::IpAddr::from(Ipv4Addr::UNSPECIFIED));
            if gateway.refusals.blocked(ip) {
                let mut slow = error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many refused requests from this address; try again in a minute".into(),
                );
                slow.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
                return slow;
            }
            gateway.refusals.failed(ip);
            return error(StatusCode::NOT_FOUND, format!("no such service: {key}"));
        }
    }
    let Some(service) = service else {
        return error(StatusCode::NOT_FOUND, format!("no such service: {key}"));
    };
    match read_body(gateway, &service, &parts.headers, body).await {
        // The body's permits are held until the request is answered (or given up).
        Ok((body, _held)) => forward(gateway, &service, &parts, target, body, started).await,
        Err(refused) => refused,
    }
}

/// `/<team>/<service>/<rest>?<query>` into the key and the replica's target `/<rest>?<query>`.
fn split(uri: &Uri) -> Option<(ServiceKey, Uri)> {
    let path = uri.path().strip_prefix('/')?;
    let mut parts = path.splitn(3, '/');
    let (team, service) = (parts.next()?, parts.next()?);
    if team.is_empty() || service.is_empty() {
        return None;
    }
    let rest = parts.next().unwrap_or("");
    let target = match uri.query() {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    Some((ServiceKey::new(team, service), target.parse().ok()?))
}

/// The request-body bytes a request holds against the gateway's and its service's budgets.
#[derive(Default)]
struct Held(Vec<tokio::sync::OwnedSemaphorePermit>);

impl Held {
    /// Takes `bytes` more from both budgets, or says why not (503, at once: a request that
    /// cannot be held is better refused than queued in memory).
    fn take(&mut self, gateway: &Gateway, service: &Service, bytes: usize) -> Result<(), Box<Response>> {
        let n = u32::try_from(super::kib(bytes)).unwrap_or(u32::MAX);
        let all = Arc::clone(&gateway.bodies).try_acquire_many_owned(n);
        let one = Arc::clone(&service.bodies).try_acquire_many_owned(n);
        match (all, one) {
            (Ok(a), Ok(b)) => {
                self.0.extend([a, b]);
                Ok(())
            }
            _ => {
                let c = &gateway.config;
                let mut busy = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the gateway holds as many request bodies as it may ({} MiB in all, {} MiB for {}); retry",
                        c.body_budget >> 20,
                        c.body_budget_per_service >> 20,
                        service.key
                    ),
                );
                busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(c.retry_after_s));
                Err(Box::new(busy))
            }
        }
    }
}

/// The whole body, within the size limit, the body timeout and the bodies' budgets: a declared
/// length is taken from the budgets before a byte is read, an undeclared one as it arrives.
async fn read_body(
    gateway: &Gateway,
    service: &Service,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Bytes, Held), Response> {
    if body.is_end_stream() {
        // No body (a GET): nothing to read or time.
        return Ok((Bytes::new(), Held::default()));
    }
    let limit = gateway.config.body_limit;
    let too_large =
        || error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {limit} bytes"));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut held = Held::default();
    let declared = declared.map_or(0, |n| n as usize);
    if declared > 0 {
        held.take(gateway, service, declared).map_err(|r| *r)?;
    }
    let read = async {
        let mut body = body;
        let mut buf = bytes::BytesMut::with_capacity(declared);
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| error(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}")))?;
            let Ok(data) = frame.into_data() else { continue };
            if buf.len() + data.len() > limit {
                return Err(too_large());
            }
            let beyond = (buf.len() + data.len()).saturating_sub(declared.max(buf.len()));
            if beyond > 0 {
                held.take(gateway, service, beyond).map_err(|r| *r)?;
            }
            buf.extend_from_slice(&data);
        }
        Ok(buf.freeze())
    };
    match tokio::time::timeout(gateway.config.body_timeout, read).await {
        Ok(Ok(bytes)) => Ok((bytes, held)),
        Ok(Err(refused)) => Err(refused),
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body took longer than {} s", gateway.config.body_timeout.as_secs_f64()),
        )),
    }
}

/// Sends to a replica, trying another while sends fail before a byte went out.
async fn forward(
    gateway: &Gateway,
    service: &Arc<Service>,
    parts: &Parts,
    target: Uri,
    body: Bytes,
    started: Instant,
) -> Response {
    let c = &gateway.config;
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), |i| i.0);
    let timeouts = Timeouts { connect: c.connect_timeout, header: c.header_timeout };
    let mut avoid: Vec<String> = Vec::new();
    let mut last = String::new();
    service.stats.arrived();
    for _ in 0..c.max_attempts.max(1) {
        let lease =
            match service.acquire(&avoid, c.queue_timeout, c.cold_start_timeout, &gateway.demand_tx).await {
                Ok(lease) => lease,
                Err(refusal) => return refused(gateway, service, refusal),
            };
        let replica = Arc::clone(&lease.replica);
        let mut req = hyper::Request::new(Full::new(body.clone()));
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = target.clone();
        *req.headers_mut() = headers::for_replica(&parts.headers, peer, c.tls, replica.host.clone());
        match proxy::send(&replica, req, timeouts).await {
            Ok((response, sender)) => {
                let (mut head, incoming) = response.into_parts();
                headers::to_client(&mut head.headers);
                headers::scope_cookies(&mut head.headers, &format!("/{}/", service.key));
                let done = Completion::new(lease, sender, head.status.as_u16(), started);
                let relay = Relay::new(incoming, done, started + c.total_timeout);
                return Response::from_parts(head, Body::new(relay));
            }
            Err(SendError::NotSent(why)) => {
                tracing::debug!(service = %service.key, replica = %replica.id, %why, "not sent; trying another replica");
                avoid.push(replica.id.clone());
                last = why;
            }
            Err(SendError::Failed(why)) => {
                return failed(
                    service,
                    &replica.requests,
                    started,
                    StatusCode::BAD_GATEWAY,
                    format!("the replica failed before answering: {why}"),
                );
            }
            Err(SendError::Timeout(d)) => {
                let why = format!("the replica sent no response headers within {} s", d.as_secs_f64());
                return failed(service, &replica.requests, started, StatusCode::GATEWAY_TIMEOUT, why);
            }
        }
    }
    let why = format!("no replica of {} could be reached: {last}", service.key);
    failed(service, &service.own_requests, started, StatusCode::BAD_GATEWAY, why)
}

/// A request a replica took but did not answer: measured and counted as an error.
fn failed(
    service: &Service,
    counters: &RequestCounters,
    started: Instant,
    status: StatusCode,
    why: String,
) -> Response {
    let took = started.elapsed();
    service.stats.finished(took, took, true);
    counters.count(status.as_u16());
    error(status, why)
}

/// The answer for a request that got no replica.
fn refused(gateway: &Gateway, service: &Service, refusal: Refusal) -> Response {
    let key = &service.key;
    let (status, why) = match refusal {
        Refusal::QueueFull => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "every replica of {key} is busy and its queue is full; retry after {} s",
                gateway.config.retry_after_s
            ),
        ),
        Refusal::QueueTimeout(d) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("every replica of {key} stayed busy for the {} s the request may wait", d.as_secs_f64()),
        ),
        Refusal::ColdStartTimeout(d) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{key} has no ready replica: the request was held {} s while one started, and none became ready",
                d.as_secs_f64()
            ),
        ),
        Refusal::NoReplica => (StatusCode::SERVICE_UNAVAILABLE, format!("{key} has no ready replica")),
        Refusal::Failing => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{key} has no ready replica: {}",
                service.failing().unwrap_or_else(|| "its replicas keep failing".into())
            ),
        ),
        Refusal::Gone => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{key} was removed while the request waited"))
        }
    };
    service.own_requests.count(status.as_u16());
    let mut answer = error(status, why);
    if status == StatusCode::TOO_MANY_REQUESTS {
        answer.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(gateway.config.retry_after_s));
    }
    answer
}

fn error(status: StatusCode, error: String) -> Response {
    (status, Json(ErrorBody { error })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_team_and_service_prefix_is_stripped_and_the_query_kept() {
        let (key, target) = split(&"/ml/echo/v1/chat?stream=1".parse().expect("uri")).expect("split");
        assert_eq!(key, ServiceKey::new("ml", "echo"));
        assert_eq!(target, "/v1/chat?stream=1");
        assert_eq!(split(&"/ml/echo".parse().expect("uri")).expect("split").1, "/");
        assert!(split(&"/ml".parse().expect("uri")).is_none());
        assert!(split(&"//echo/x".parse().expect("uri")).is_none());
    }
}
