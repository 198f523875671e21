//! The API's authentication layer: every route but the public ones passes through
//! [`require_token`], which turns the bearer token into the [`Principal`] handlers check.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiError;

/// The secret of an `Authorization: Bearer …` header (the scheme in any case, RFC 7235).
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, secret) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| secret.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Middleware: resolves the bearer token into a [`Principal`] extension, or answers 401 (429
/// once an address has failed too often).
pub async fn require_token(
    State(app): State<Arc<App>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let ip = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.ip());
    let looked_up = match bearer(req.headers()) {
        Some(secret) => app.tokens.lookup(&app.store, &secret).await,
        None => Err(ApiError::Unauthorized),
    };
    // Only failures are limited: a valid credential from a throttled address still works, so a
    // local user spraying bad tokens cannot lock the node's own agent (or anyone else on the
    // address) out of the API. Guessing a 256-bit secret gains nothing from that.
    let token = match looked_up {
        Ok(token) => token,
        Err(ApiError::Unauthorized | ApiError::TokenRefused(_)) if app.failures.blocked(ip) => {
            return Err(ApiError::TooManyFailures);
        }
        Err(e @ (ApiError::Unauthorized | ApiError::TokenRefused(_))) => {
            app.failures.failed(ip);
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    if token.kind == gantry_store::TokenKind::Invoke {
        return Err(ApiError::TokenRefused(
            "an invoke token calls its service through the gateway, not the API",
        ));
    }
    let cert = req.extensions().get::<crate::tls::PeerCert>();
    let (cert_name, cert_sha256) = (cert.map(|p| p.common_name.clone()), cert.map(|p| p.sha256.clone()));
    req.extensions_mut().insert(Principal { token, peer, cert_name, cert_sha256 });
    Ok(next.run(req).await)
}
