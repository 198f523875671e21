//! Who may call a private service: the seam between the gateway and the control plane's tokens.
//!
//! The gateway asks one question, "may this bearer token call `(team, service)`?", and turns
//! every "no" into the same 404 it gives for a service that does not exist, so a token of another
//! team learns nothing about which services a team runs. A request without any token gets 401
//! (with `WWW-Authenticate: Bearer`) for every service that is not public, existing or not: that
//! tells a caller to send a token without telling it whether the service exists.
//!
//! [`TeamMembers`] is the control plane's answer: an API token whose owner is a member of the
//! service's team, or an invoke token made for that very service (`gantry token create
//! --service NAME`), which the API itself refuses.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use super::routes::ServiceKey;

/// A boxed future of an authorization answer.
pub type Answer<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// Decides whether a bearer token may call a private service.
pub trait Authorizer: Send + Sync + Debug {
    /// Whether `token` may call `service`.
    fn allows<'a>(&'a self, token: &'a str, service: &'a ServiceKey) -> Answer<'a>;
}

/// Accepts no token: only public services can be called.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTokens;

impl Authorizer for NoTokens {
    fn allows<'a>(&'a self, _token: &'a str, _service: &'a ServiceKey) -> Answer<'a> {
        Box::pin(std::future::ready(false))
    }
}

/// A synchronous rule as an [`Authorizer`] (tests, benchmarks, embedding).
pub struct FnAuthorizer<F>(pub F);

impl<F> Debug for FnAuthorizer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnAuthorizer")
    }
}

impl<F> Authorizer for FnAuthorizer<F>
where
    F: Fn(&str, &ServiceKey) -> bool + Send + Sync,
{
    fn allows<'a>(&'a self, token: &'a str, service: &'a ServiceKey) -> Answer<'a> {
        Box::pin(std::future::ready((self.0)(token, service)))
    }
}

/// The control plane's rule: a valid (unexpired, unrevoked) API token of a member of the
/// service's team (or an admin; not a viewer's or an operator's), or an invoke token made for
/// the service. Holds the [`crate::App`] weakly (the app holds the gateway).
#[derive(Debug, Clone)]
pub struct TeamMembers {
    app: Weak<crate::App>,
}

impl TeamMembers {
    /// The rule over `app`'s tokens.
    pub fn new(app: Weak<crate::App>) -> Self {
        Self { app }
    }
}

impl Authorizer for TeamMembers {
    fn allows<'a>(&'a self, token: &'a str, service: &'a ServiceKey) -> Answer<'a> {
        Box::pin(async move {
            let Some(app) = self.app.upgrade() else { return false };
            let Ok(record) = app.tokens.lookup(&app.store, token).await else { return false };
            match record.kind {
                // Calling a private service is using the team's GPUs: members (and admins),
                // not its viewers or operators, who may read but not act.
                gantry_store::TokenKind::Api => match record.role {
                    gantry_store::Role::Admin => true,
                    gantry_store::Role::Member => record.teams.iter().any(|t| t == &service.team),
                    _ => false,
                },
                gantry_store::TokenKind::Invoke => record.service.as_deref() == Some(&service.to_string()),
                _ => false,
            }
        })
    }
}

/// An `Arc` of any authorizer is one too.
impl<T: Authorizer + ?Sized> Authorizer for Arc<T> {
    fn allows<'a>(&'a self, token: &'a str, service: &'a ServiceKey) -> Answer<'a> {
        (**self).allows(token, service)
    }
}
