//! Sending one request to a replica and relaying its answer.
//!
//! Connections to replicas are hyper HTTP/1.1 client connections kept alive in a small pool per
//! replica. A request is written with hyper's `try_send_request`, which hands the request back
//! when the connection failed before any of it was written: only then is it safe to send again
//! elsewhere (a request that reached a replica may have had effects, so it is never repeated).
//! A refused or timed-out connect is the other "not sent" case.
//!
//! The request body is read whole (up to the size limit) before a replica is chosen: inference
//! requests are small, it lets a retry resend the body, and a slow uploader holds no replica slot.
//! The response body is relayed frame by frame as the replica writes it, so streamed tokens
//! (chunked or Server-Sent Events) reach the client as they are produced; its slot, the
//! connection's return to the pool and the request's measurements wait for its last frame.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, Sleep};

use super::balance::{Lease, Replica};

/// A request as sent to a replica.
pub(crate) type Upstream = hyper::Request<Full<Bytes>>;
type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept per replica at most.
const POOL_MAX: usize = 512;

/// Idle keep-alive connections to one replica.
#[derive(Debug, Default)]
pub(crate) struct Pool(Mutex<Vec<Sender>>);

impl Pool {
    fn take(&self) -> Option<Sender> {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, sender: Sender) {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < POOL_MAX && !sender.is_closed() {
            idle.push(sender);
        }
    }
}

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// Nothing reached the replica (connect refused or timed out, or the connection closed
    /// before the request was written): safe to send elsewhere.
    NotSent(String),
    /// The replica failed after the request went out.
    Failed(String),
    /// No response headers within the header timeout.
    Timeout(Duration),
}

/// The timeouts of one attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) header: Duration,
}

async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Sender, SendError> {
    let stream = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(SendError::NotSent(format!("cannot connect to {addr}: {e}"))),
        Err(_) => return Err(SendError::NotSent(format!("connecting to {addr} took over {timeout:?}"))),
    };
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| SendError::NotSent(format!("cannot speak HTTP to {addr}: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, %addr, "replica connection closed with an error");
        }
    });
    Ok(sender)
}

/// Sends `req` to `replica` on a pooled connection or a fresh one.
pub(crate) async fn send(
    replica: &Replica,
    req: Upstream,
    timeouts: Timeouts,
) -> Result<(hyper::Response<Incoming>, Sender), SendError> {
    let mut sender = match replica.pool.take() {
        Some(s) => s,
        None => connect(replica.addr, timeouts.connect).await?,
    };
    if sender.ready().await.is_err() {
        sender = connect(replica.addr, timeouts.connect).await?;
    }
    let sent = sender.try_send_request(req);
    match tokio::time::timeout(timeouts.header, sent).await {
        Ok(Ok(response)) => Ok((response, sender)),
        Ok(Err(mut e)) => match e.take_message() {
            Some(_) => Err(SendError::NotSent(e.into_error().to_string())),
            None => Err(SendError::Failed(e.into_error().to_string())),
        },
        Err(_) => Err(SendError::Timeout(timeouts.header)),
    }
}

/// What is settled when a response's last frame has gone (or the client left first).
#[derive(Debug)]
pub(crate) struct Completion {
    lease: Lease,
    sender: Option<Sender>,
    code: u16,
    started: Instant,
    first_byte: Option<Instant>,
    /// The body ended cleanly (the connection may be reused).
    clean: bool,
}

impl Completion {
    /// A response with status `code` to a request that arrived at `started`, on `sender`.
    pub(crate) fn new(lease: Lease, sender: Sender, code: u16, started: Instant) -> Self {
        Self { lease, sender: Some(sender), code, started, first_byte: None, clean: false }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        let now = Instant::now();
        if self.clean
            && let Some(sender) = self.sender.take()
        {
            self.lease.replica.pool.put(sender);
        }
        let ttfb = self.first_byte.unwrap_or(now).duration_since(self.started);
        let error = self.code >= 500 || !self.clean;
        let service = self.lease.service();
        service.stats.finished(now.duration_since(self.started), ttfb, error);
        self.lease.replica.requests.count(self.code);
    }
}

/// The replica's response body, relayed frame by frame within the total timeout.
#[derive(Debug)]
pub(crate) struct Relay {
    inner: Incoming,
    done: Option<Completion>,
    deadline: Pin<Box<Sleep>>,
}

impl Relay {
    pub(crate) fn new(inner: Incoming, done: Completion, deadline: Instant) -> Self {
        Self { inner, done: Some(done), deadline: Box::pin(tokio::time::sleep_until(deadline)) }
    }
}

/// Why a relayed body stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The whole response took longer than the gateway's total timeout.
    #[error("the response took longer than the gateway's total timeout")]
    TimedOut,
    /// The replica's connection failed mid-body.
    #[error("the replica failed mid-response: {0}")]
    Replica(#[from] hyper::Error),
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The server may stop polling once the body says it has ended (a known length).
        if self.inner.is_end_stream()
            && let Some(done) = self.done.as_mut()
        {
            done.clean = true;
        }
    }
}

impl Body for Relay {
    type Data = Bytes;
    type Error = RelayError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RelayError>>> {
        if self.done.is_none() {
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.done = None;
            return Poll::Ready(Some(Err(RelayError::TimedOut)));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(done) = self.done.as_mut()
                    && done.first_byte.is_none()
                    && frame.data_ref().is_some_and(|d| !d.is_empty())
                {
                    done.first_byte = Some(Instant::now());
                }
                if self.inner.is_end_stream()
                    && let Some(mut done) = self.done.take()
                {
                    done.clean = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = None;
                Poll::Ready(Some(Err(RelayError::Replica(e))))
            }
            Poll::Ready(None) => {
                if let Some(mut done) = self.done.take() {
                    done.clean = true;
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
