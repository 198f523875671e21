//! Who is calling and what they may do.
//!
//! Bearer tokens are 32 random bytes, base64url; only their SHA-256 is stored. A token is one of
//! three kinds: a user's `api` token (the user's role and teams decide what it may do), a
//! one-time `join` token an agent trades for its node credential, and a `node` credential that
//! acts for one node only (Kubernetes' node authorizer: a kubelet may touch only its own node).
//! Every request but `/healthz` and `/v1/ca.pem` carries one; expired, revoked and used tokens
//! get 401, and repeated failures from one address get 429 for a while (valid credentials from
//! that address keep working).
//!
//! The rules live in [`Principal`]'s methods, next to each other, so that every endpoint's
//! "who may call this" is one call here.

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine;
use gantry_store::{Actor, Role, Store, TokenKind, TokenRecord};
use sha2::{Digest, Sha256};

use crate::app::now_ms;
use crate::command::CommandError;
use crate::error::ApiError;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's record, with its owner's role and teams.
    pub token: TokenRecord,
    /// The peer's address, when known.
    pub peer: Option<SocketAddr>,
    /// The common name of the verified client certificate, when the peer presented one.
    pub cert_name: Option<String>,
    /// That certificate's hex SHA-256.
    pub cert_sha256: Option<String>,
}

impl Principal {
    /// The caller as the audit log names it.
    pub fn actor(&self, team: Option<&str>) -> Actor {
        let name = match (&self.token.user, &self.token.node, self.token.kind) {
            (Some(user), _, _) => user.clone(),
            (None, Some(node), TokenKind::Node) => format!("node:{node}"),
            _ => format!("token:{}", self.token.id),
        };
        Actor {
            name,
            role: self.token.role.to_string(),
            team: team.map(str::to_owned),
            peer: self.peer.map(|p| p.to_string()),
        }
    }

    fn is_user(&self) -> bool {
        self.token.kind == TokenKind::Api
    }

    /// Teams whose jobs, logs and events the caller sees; `None` means every team.
    pub fn visible_teams(&self) -> Option<Vec<String>> {
        match (self.is_user(), self.token.role) {
            (true, Role::Admin | Role::Operator) => None,
            (true, _) => Some(self.token.teams.clone()),
            (false, _) => Some(Vec::new()),
        }
    }

    /// Whether the caller sees this team's jobs.
    pub fn sees_team(&self, team: &str) -> bool {
        self.visible_teams().is_none_or(|teams| teams.iter().any(|t| t == team))
    }

    /// Whether the caller may read the values of a job's declared `env` (tokens for a dataset,
    /// a tracker's key): the user who submitted it and admins. Others who see the job see the
    /// names only ([`Self::redact_env`]).
    pub fn sees_env_of(&self, job: &gantry_store::Job) -> bool {
        match (self.is_user(), self.token.role) {
            (true, Role::Admin) => true,
            (true, _) => job.user.is_some() && job.user == self.token.user,
            (false, _) => false,
        }
    }

    /// The job as the caller may read it: declared `env` values replaced by [`REDACTED`]
    /// unless [`Self::sees_env_of`].
    pub fn redact_env(&self, job: &mut gantry_store::Job) {
        if !self.sees_env_of(job) {
            job.env.values_mut().for_each(|v| REDACTED.clone_into(v));
        }
    }

    /// Any user (not an agent): reads of the cluster, scoped by [`Self::visible_teams`].
    pub fn require_user(&self) -> Result<(), CommandError> {
        if self.is_user() { Ok(()) } else { Err(forbidden("agent credentials cannot use this endpoint")) }
    }

    /// Admins and operators: cluster-wide reads and node and quota changes.
    pub fn require_operator(&self) -> Result<(), CommandError> {
        match (self.is_user(), self.token.role) {
            (true, Role::Admin | Role::Operator) => Ok(()),
            _ => Err(forbidden("this needs an operator or admin token")),
        }
    }

    /// Only admins: users, tokens, the audit log.
    pub fn require_admin(&self) -> Result<(), CommandError> {
        match (self.is_user(), self.token.role) {
            (true, Role::Admin) => Ok(()),
            _ => Err(forbidden("this needs an admin token")),
        }
    }

    /// Changing a team's jobs: admins, and members of that team.
    pub fn require_member_of(&self, team: &str) -> Result<(), CommandError> {
        match (self.is_user(), self.token.role) {
            (true, Role::Admin) => Ok(()),
            (true, Role::Member) if self.token.teams.iter().any(|t| t == team) => Ok(()),
            (true, Role::Member) => Err(forbidden(&format!("you are not a member of team {team}"))),
            (true, role) => Err(forbidden(&format!("the {role} role cannot change jobs"))),
            (false, _) => Err(forbidden("agent credentials cannot change jobs")),
        }
    }

    /// Acting as a node's agent: only that node's credential (and, over mutual TLS, a client
    /// certificate issued to that node; for a credential that a join over TLS issued, the very
    /// certificate issued with it).
    pub fn require_node(&self, node_id: &str) -> Result<(), CommandError> {
        if self.token.kind != TokenKind::Node {
            return Err(forbidden("this needs a node credential (agents get one with a join token)"));
        }
        if self.token.node.as_deref() != Some(node_id) {
            let own = self.token.node.as_deref().unwrap_or("?");
            return Err(forbidden(&format!("the credential of node {own} cannot act for node {node_id}")));
        }
        if let Some(cn) = self.cert_name.as_deref().filter(|cn| *cn != node_id) {
            return Err(forbidden(&format!("the client certificate of {cn} cannot act for node {node_id}")));
        }
        // A credential issued over TLS is half of a pair: without the certificate issued with
        // it (kept with the agent's key), a copied credential is useless.
        match (&self.token.cert_sha256, &self.cert_sha256) {
            (Some(bound), Some(presented)) if bound == presented => Ok(()),
            (Some(_), _) => Err(forbidden(&format!(
                "the credential of node {node_id} is accepted only with the client certificate issued with it at join; present that certificate (the agent's client.pem and client.key)"
            ))),
            (None, _) => Ok(()),
        }
    }

    /// Trading a join token for a node credential.
    pub fn require_join(&self, node_id: &str) -> Result<(), CommandError> {
        if self.token.kind != TokenKind::Join {
            return Err(forbidden("this needs a join token"));
        }
        match &self.token.node {
            Some(bound) if bound != node_id => {
                Err(forbidden(&format!("this join token is for node {bound}, not {node_id}")))
            }
            _ => Ok(()),
        }
    }
}

/// What a declared `env` value reads as for those who may not see it.
pub const REDACTED: &str = "<redacted>";

fn forbidden(why: &str) -> CommandError {
    CommandError::Forbidden(why.to_owned())
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

/// Verified tokens by hash. Any change to tokens or users made through this replica clears it,
/// so a revocation or a role change takes effect on the next request. A server that may have
/// other replicas on its database (one with a lease) also reads an entry again once it is
/// [`TOKEN_MAX_AGE`] old, so one made through another replica takes effect within that; a lone
/// server reads each token once. Expiry is checked on every hit.
#[derive(Debug, Default)]
pub struct TokenCache {
    entries: RwLock<HashMap<String, (TokenRecord, tokio::time::Instant)>>,
    max_age: Option<Duration>,
}

/// Cached tokens at most; past it the cache starts over.
const CACHE_LIMIT: usize = 10_000;

/// How long a replica of several trusts a verified token before the store is asked again: the
/// most a revocation through another replica takes to reach this one. (Each cached token costs
/// a read this often: 1,000 agents' credentials, 200 reads a second.)
pub const TOKEN_MAX_AGE: Duration = Duration::from_secs(5);

impl TokenCache {
    /// A cache for a server that may share its database with other replicas (`shared`: it
    /// runs with a lease), whose entries are then read again at [`TOKEN_MAX_AGE`].
    pub fn new(shared: bool) -> Self {
        Self { entries: RwLock::default(), max_age: shared.then_some(TOKEN_MAX_AGE) }
    }

    pub(crate) async fn lookup(&self, store: &Arc<dyn Store>, secret: &str) -> Result<TokenRecord, ApiError> {
        let hash = hash(secret);
        let fresh = |at: &tokio::time::Instant| self.max_age.is_none_or(|max| at.elapsed() < max);
        let hit = self
            .entries
            .read()
            .ok()
            .and_then(|m| m.get(&hash).filter(|(_, at)| fresh(at)).map(|(record, _)| record.clone()));
        let record = match hit {
            Some(hit) => hit,
            None => {
                let store = Arc::clone(store);
                let key = hash.clone();
                let found = tokio::task::spawn_blocking(move || store.token_by_hash(&key))
                    .await
                    .map_err(|e| ApiError::Internal(e.to_string()))??;
                let record = found.ok_or(ApiError::Unauthorized)?;
                if let Ok(mut m) = self.entries.write() {
                    if m.len() >= CACHE_LIMIT {
                        m.clear();
                    }
                    m.insert(hash, (record.clone(), tokio::time::Instant::now()));
                }
                record
            }
        };
        match record.refusal(now_ms()) {
            Some(why) => Err(ApiError::TokenRefused(why)),
            None => Ok(record),
        }
    }

    /// Forgets every cached token.
    pub fn clear(&self) {
        if let Ok(mut m) = self.entries.write() {
            m.clear();
        }
    }
}

/// Failed authentications per client address: past [`FAILURE_LIMIT`] in a window, 429.
#[derive(Debug, Default)]
pub struct FailureLimiter(Mutex<HashMap<IpAddr, (Instant, u32)>>);

/// Failures allowed per address per window.
pub const FAILURE_LIMIT: u32 = 20;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

impl FailureLimiter {
    pub(crate) fn blocked(&self, ip: IpAddr) -> bool {
        let Ok(m) = self.0.lock() else { return false };
        m.get(&ip).is_some_and(|(since, n)| *n >= FAILURE_LIMIT && since.elapsed() < FAILURE_WINDOW)
    }

    // A rate limit's window on the monotonic clock: no decision of the scheduler, and tests
    // of the limit run in real time.
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn failed(&self, ip: IpAddr) {
        let Ok(mut m) = self.0.lock() else { return };
        if m.len() > 100_000 {
            m.retain(|_, (since, _)| since.elapsed() < FAILURE_WINDOW);
        }
        let entry = m.entry(ip).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= FAILURE_WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
    }
}
