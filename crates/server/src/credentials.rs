//! Minting credentials outside the API: the first admin token of a fresh store, the local
//! agent's node credential under `gantry up`, and tokens for tests. Each goes through the store's
//! audited [`Change`] path with the actor `gantry` (role `system`), so the audit log shows them.
//! Secrets are returned once and never stored.

use std::time::Duration;

use gantry_store::{
    Actor, AuditEntry, Change, Changed, NewToken, Role, Store, StoreError, TokenKind, TokenRecord, User,
};

use crate::auth;
use crate::clock::now_ms;
use crate::server::ServerError;

/// How long a user's token lives unless asked otherwise.
pub const USER_TOKEN_TTL: Duration = Duration::from_secs(90 * 24 * 3600);
/// How long the first admin token lives (`gantry up` mints a new one when none is left).
pub const ADMIN_TOKEN_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a join token lives unless asked otherwise.
pub const JOIN_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// The longest any token may be asked to live.
pub const MAX_TTL: Duration = Duration::from_secs(400 * 24 * 3600);

fn system(action: &str, target: String) -> AuditEntry {
    let actor = Actor { name: "gantry".into(), role: "system".into(), team: None, peer: None };
    AuditEntry { actor, action: action.into(), target, at: now_ms(), credential: None }
}

fn expiry(ttl: Duration) -> i64 {
    now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

fn store_token(store: &dyn Store, token: NewToken) -> Result<(), ServerError> {
    match store.apply(Change::CreateToken(token), system("token.create", String::new()))? {
        Changed::Token(_) => Ok(()),
        other => Err(ServerError::Unexpected(format!("token creation produced {other:?}"))),
    }
}

/// A new token record for `secret`.
pub fn new_token(secret: &str, kind: TokenKind, name: &str, ttl: Option<Duration>) -> NewToken {
    NewToken {
        hash: auth::hash(secret),
        kind,
        user: None,
        node: None,
        name: name.to_owned(),
        created_at: now_ms(),
        expires_at: ttl.map(expiry),
        cert_sha256: None,
        service: None,
    }
}

/// Creates (or replaces) `user` and a token for it; returns the secret.
pub fn create_user_token(store: &dyn Store, user: &User, ttl: Duration) -> Result<String, ServerError> {
    store.apply(Change::SetUser(user.clone()), system("user.set", format!("user/{}", user.name)))?;
    let secret = auth::new_secret()?;
    let token = NewToken {
        user: Some(user.name.clone()),
        ..new_token(&secret, TokenKind::Api, &user.name, Some(ttl))
    };
    store_token(store, token)?;
    Ok(secret)
}

/// On a store without a usable admin token, creates the user `admin` and a token for it.
pub fn ensure_admin_token(store: &dyn Store) -> Result<Option<String>, ServerError> {
    if store.admin_token_count(now_ms())? > 0 {
        return Ok(None);
    }
    let admin = User { name: "admin".into(), role: Role::Admin, teams: Vec::new() };
    create_user_token(store, &admin, ADMIN_TOKEN_TTL).map(Some)
}

/// A credential for the agent of `node_id` (revoking the node's earlier ones is the join's
/// job; this is for an agent in the server's own process).
pub fn create_node_credential(store: &dyn Store, node_id: &str) -> Result<String, ServerError> {
    let secret = auth::new_secret()?;
    let name = format!("node {node_id}");
    let token =
        NewToken { node: Some(node_id.to_owned()), ..new_token(&secret, TokenKind::Node, &name, None) };
    store_token(store, token)?;
    Ok(secret)
}

/// A one-time join token, limited to `node` when given.
pub fn create_join_token(
    store: &dyn Store,
    node: Option<&str>,
    ttl: Duration,
) -> Result<String, ServerError> {
    let secret = auth::new_secret()?;
    let name = node.map_or_else(|| "join".to_owned(), |n| format!("join {n}"));
    let token =
        NewToken { node: node.map(str::to_owned), ..new_token(&secret, TokenKind::Join, &name, Some(ttl)) };
    store_token(store, token)?;
    Ok(secret)
}

/// The record of `secret` if it may be used now (known, not expired, revoked or used): the
/// middleware's rule, for callers holding a secret outside a request (`gantry up`'s saved tokens).
pub fn usable(store: &dyn Store, secret: &str) -> Result<Option<TokenRecord>, StoreError> {
    let found = store.token_by_hash(&auth::hash(secret))?;
    Ok(found.filter(|t| t.refusal(now_ms()).is_none()))
}
