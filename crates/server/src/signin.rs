//! One-time sign-in codes for the dashboard: `gantry dashboard` prints a link that signs the
//! browser in without the user's token ever appearing in a URL, a browser history or a log.
//!
//! The CLI asks, with its token, for a code (`POST /v1/signin-codes`); the code travels in the
//! link's fragment (`https://host:7070/#signin=CODE`: a fragment is never sent to a server, so
//! no proxy or access log sees it), and the page trades it once (`POST /v1/signin`) for a
//! session token of the same user, which it keeps in `sessionStorage` as it keeps a pasted one.
//! A code is 128 random bits, lives [`CODE_TTL`], is gone after its first use (or its first
//! failed use after expiry), and only its SHA-256 is held, in memory: a restart voids every
//! unused code, which costs a user one more `gantry dashboard`. The session token never outlives
//! the token that asked for the code, nor [`SESSION_TTL`].

use std::collections::HashMap;
use std::sync::Mutex;

use crate::auth::Principal;

/// How long a code may wait for its page.
pub const CODE_TTL_MS: i64 = 120_000;
/// How long a session token made from a code lives at most.
pub const SESSION_TTL_MS: i64 = 12 * 3_600_000;
/// Unused codes held at once (a flood of requests evicts nothing but its own).
const MAX_CODES: usize = 10_000;
/// Unused codes one token may hold at once.
const MAX_PER_TOKEN: usize = 16;

/// A code waiting for its page.
#[derive(Debug, Clone)]
struct Pending {
    /// Who asked: the session is theirs.
    by: Principal,
    expires_at: i64,
}

/// Why a code could not be minted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignInError {
    /// The caller's token holds as many unused codes as it may.
    #[error("this token already holds {MAX_PER_TOKEN} unused sign-in codes; use one or wait two minutes")]
    TooManyForToken,
    /// Every slot is taken.
    #[error("too many unused sign-in codes; try again in two minutes")]
    Full,
}

/// The unused codes, by the SHA-256 of each.
#[derive(Debug, Default)]
pub struct SignInCodes {
    pending: Mutex<HashMap<String, Pending>>,
}

impl SignInCodes {
    /// Records `code` (already random) for `by` at `now` (ms); returns when it expires.
    pub fn add(&self, code: &str, by: Principal, now: i64) -> Result<i64, SignInError> {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.retain(|_, p| p.expires_at > now);
        if pending.values().filter(|p| p.by.token.id == by.token.id).count() >= MAX_PER_TOKEN {
            return Err(SignInError::TooManyForToken);
        }
        if pending.len() >= MAX_CODES {
            return Err(SignInError::Full);
        }
        let expires_at = now + CODE_TTL_MS;
        pending.insert(crate::auth::hash(code), Pending { by, expires_at });
        Ok(expires_at)
    }

    /// Takes `code` out: who asked for it, when it was still valid at `now`.
    pub fn redeem(&self, code: &str, now: i64) -> Option<Principal> {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = pending.remove(&crate::auth::hash(code))?;
        (found.expires_at > now).then_some(found.by)
    }
}

/// When a session token made at `now` for a token expiring at `token_expires` ends.
pub fn session_expiry(now: i64, token_expires: Option<i64>) -> i64 {
    let cap = now + SESSION_TTL_MS;
    token_expires.map_or(cap, |t| t.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(id: i64) -> Principal {
        let token = gantry_store::TokenRecord {
            id,
            kind: gantry_store::TokenKind::Api,
            user: Some("u".into()),
            role: gantry_store::Role::Member,
            teams: Vec::new(),
            node: None,
            name: "t".into(),
            created_at: 0,
            expires_at: None,
            revoked_at: None,
            used_at: None,
            cert_sha256: None,
            service: None,
        };
        Principal { token, peer: None, cert_name: None, cert_sha256: None }
    }

    #[test]
    fn a_code_signs_in_once_and_only_before_it_expires() {
        let codes = SignInCodes::default();
        let expires = codes.add("c1", principal(7), 1_000).expect("add");
        assert_eq!(expires, 1_000 + CODE_TTL_MS);
        assert_eq!(codes.redeem("c1", 2_000).map(|p| p.token.id), Some(7));
        assert!(codes.redeem("c1", 2_000).is_none(), "single use");
        codes.add("c2", principal(7), 1_000).expect("add");
        assert!(codes.redeem("c2", 1_000 + CODE_TTL_MS).is_none(), "expired");
        assert!(codes.redeem("never", 1_000).is_none());
    }

    #[test]
    fn one_token_holds_a_bounded_number_of_unused_codes() {
        let codes = SignInCodes::default();
        for i in 0..MAX_PER_TOKEN {
            codes.add(&format!("c{i}"), principal(1), 0).expect("add");
        }
        assert_eq!(codes.add("more", principal(1), 0), Err(SignInError::TooManyForToken));
        codes.add("other", principal(2), 0).expect("another token is not held back");
        // Expired codes free their slots.
        codes.add("later", principal(1), CODE_TTL_MS).expect("slots freed by expiry");
    }

    #[test]
    fn a_session_never_outlives_the_token_that_asked_for_it() {
        assert_eq!(session_expiry(0, None), SESSION_TTL_MS);
        assert_eq!(session_expiry(0, Some(60_000)), 60_000);
        assert_eq!(session_expiry(0, Some(SESSION_TTL_MS * 2)), SESSION_TTL_MS);
    }
}
