//! The engine of `gantry bench gateway` with its defaults (100 connections, 1,000 and 5,000
//! requests/s, a 10 ms replica, 5 s per run), printed as JSON: a release build of this example
//! needs only the server's dependencies, not the whole `gantry` binary's.
//! `cargo run --release -p gantry-server --example gateway_bench`

use std::time::Duration;

use gantry_server::gateway::bench::{BenchSettings, measure};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = BenchSettings {
        connections: 100,
        rates: vec![1000, 5000],
        seconds: 5.0,
        replica_delay: Duration::from_millis(10),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let rows = rt.block_on(measure(&settings))?;
    println!("{}", serde_json::to_string_pretty(&rows)?);
    Ok(())
}
