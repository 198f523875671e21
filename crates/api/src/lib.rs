//! Gantry's wire types: what the server, the agent and the CLI say to each other.
//!
//! - [`model`]: the vocabulary (jobs, nodes, GPUs, users, tokens, teams, events, audit rows),
//!   which the store keeps as it is;
//! - [`types`]: request and response bodies of the HTTP API and the agent protocol;
//! - [`submit`]: a job submission with typed fields (GPU range, array, dependencies), read from
//!   and written as the JSON the API has always taken;
//! - [`history`]: the recorded history `gantry whatif` replays (`GET /v1/history`);
//! - [`elastic`]: a GPU count given as a range (`--gpus 2..8`, an elastic job);
//! - [`service`]: the service file (replicas behind the gateway) and what `service get` shows;
//! - [`idle`]: a team's idle policy per job kind (warn, then requeue or cancel);
//! - [`pools`]: node labels, pools and how a pool places jobs (`pack` or `spread`);
//! - [`failover`]: which failed requests a client may send to another replica;
//! - [`job_env`]: which environment variables a job may declare (checked on both sides);
//! - [`job_logs`]: the on-disk layout of a job's output that the agent writes and the server
//!   reads (capped, rotated segments addressed by stream position); [`job_log_times`] when
//!   each part of it was written;
//! - [`upload`]: a job's working directory as it travels (a manifest of files by digest) and
//!   the check that keeps its paths inside the directory it is written into.
//!
//! It sits under every other crate, the way `kube-core` sits under `kube-rs`: no async runtime,
//! no HTTP, no database. With the `openapi` feature the types also describe themselves for the
//! server's OpenAPI document.

pub mod elastic;
pub mod failover;
pub mod history;
pub mod idle;
pub mod inputs;
pub mod job_env;
pub mod job_log_times;
pub mod job_logs;
pub mod model;
pub mod outputs;
pub mod pools;
pub mod service;
pub mod submit;
pub mod types;
pub mod upload;
pub mod volumes;
pub mod workflow;
