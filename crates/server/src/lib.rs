//! Gantry's control plane as a library.
//!
//! - [`api`]: axum handlers that parse and validate requests into [`command::Command`]s, plus the
//!   OpenAPI document ([`api::ApiDoc`]), `/healthz` and `/metrics`;
//! - [`command`]: the one dispatcher that applies every mutation to the [`gantry_store::Store`];
//!   [`assigned`]: the per-node signals that let a held heartbeat answer new work at once;
//! - [`scheduler`]: the loop that keeps a snapshot of the store, asks the core for the pass's
//!   decisions (`gantry_core::sched::plan`, pure) and records each as a command before agents
//!   act on it;
//! - [`auth`]: bearer tokens (hashed at rest) and the role checks;
//! - [`tls`]: the cluster CA, server and client certificates; [`transport`]: the listener
//!   (TLS, per-request peer address and certificate, timeouts, connection limit, shutdown);
//!   [`listen`]: binding it, on both loopback families for a loopback address.
//! - [`gateway`]: the serving gateway (`/<team>/<service>/<path>` to a ready replica), fed a
//!   routing table by the service controller ([`services`]: replicas as jobs, readiness probes,
//!   rolling updates, the autoscaler and scale to zero);
//! - [`job_logs`] and [`job_env`]: what the server and the agent agree on about a job's output
//!   files and its declared environment; [`output`]: how much of that output the server keeps
//!   (a quota per team, retention after a job ends, a free-space floor for submissions).
//!
//! It is not the agent (see `gantry-agent`) and holds no state of its own beyond caches:
//! restart it on the same store and it carries on.

pub mod admission;
pub mod api;
pub mod app;
pub mod assigned;
pub mod auth;
pub mod clock;
pub mod command;
pub mod config;
pub mod credentials;
pub mod descriptors;
pub mod error;
pub mod gateway;
pub mod idle;
pub mod leader;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod output;

pub use gantry_api::{job_env, job_logs};
pub mod scheduler;
pub mod server;
pub mod services;
pub mod signin;
pub mod staging;
pub mod tls;
pub mod transport;
pub mod uploads;

pub use app::App;
pub use clock::now_ms;
pub use config::ServerConfig;
pub use credentials::{create_join_token, create_node_credential, create_user_token, ensure_admin_token};
pub use server::{Server, ServerError};
