//! Bearer tokens: 32 random bytes, base64url; only their SHA-256 is stored. Every request but
//! `/healthz` carries one. Roles are checked in [`Principal`]'s methods, the one place later
//! role and audit work will extend.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, RwLock};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use gantry_store::{Role, Store, TokenRecord};
use sha2::{Digest, Sha256};

use crate::app::App;
use crate::error::ApiError;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's record.
    pub token: TokenRecord,
}

impl Principal {
    /// Admins and users act on jobs; agents do not.
    pub fn require_user(&self) -> Result<(), ApiError> {
        match self.token.role {
            Role::Admin | Role::User => Ok(()),
            Role::Agent => Err(ApiError::Forbidden("agent tokens cannot manage jobs".into())),
        }
    }
    /// Only admins.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.token.role {
            Role::Admin => Ok(()),
            _ => Err(ApiError::Forbidden("this needs an admin token".into())),
        }
    }
    /// Agents (and admins, for tests and `gantry up`).
    pub fn require_agent(&self) -> Result<(), ApiError> {
        match self.token.role {
            Role::Admin | Role::Agent => Ok(()),
            Role::User => Err(ApiError::Forbidden("this needs an agent join token".into())),
        }
    }
    /// A user may act on its own team's jobs only.
    pub fn require_team(&self, team: &str) -> Result<(), ApiError> {
        self.require_user()?;
        match (&self.token.role, &self.token.team) {
            (Role::User, Some(own)) if own != team => {
                Err(ApiError::Forbidden(format!("token of team {own} cannot act for team {team}")))
            }
            _ => Ok(()),
        }
    }
}

/// A fresh random token secret.
pub fn new_secret() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(format!("gty_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

/// Hex SHA-256 of a secret, as stored.
pub fn hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Verified tokens by hash; tokens are not revoked yet, so a hit never goes stale.
#[derive(Debug, Default)]
pub struct TokenCache(RwLock<HashMap<String, TokenRecord>>);

impl TokenCache {
    async fn lookup(&self, store: &Arc<dyn Store>, secret: &str) -> Result<TokenRecord, ApiError> {
        let hash = hash(secret);
        if let Some(hit) = self.0.read().ok().and_then(|m| m.get(&hash).cloned()) {
            return Ok(hit);
        }
        let store = Arc::clone(store);
        let key = hash.clone();
        let found = tokio::task::spawn_blocking(move || store.token_by_hash(&key))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        let record = found.ok_or(ApiError::Unauthorized)?;
        if let Ok(mut m) = self.0.write() {
            m.insert(hash, record.clone());
        }
        Ok(record)
    }
}

/// Middleware: resolves the bearer token into a [`Principal`] extension, or answers 401.
pub async fn require_token(
    State(app): State<Arc<App>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let secret = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthorized)?
        .trim()
        .to_owned();
    let token = app.tokens.lookup(&app.store, &secret).await?;
    req.extensions_mut().insert(Principal { token });
    Ok(next.run(req).await)
}
