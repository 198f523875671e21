//! Integration tests of the agent (one binary, one module per area).

mod attribution;
mod dcgm_names;
#[path = "../../../fake-nvml/testing.rs"]
mod fake_nvml;
mod isolation;
mod network;
mod pods;
mod prometheus;
mod restart;
mod runner;
mod sandbox;
mod server;
mod start;
mod support;
mod team_users;
mod tls;
