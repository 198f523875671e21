//! Serving simulator (`gantry sim serve`): an LLM request trace against autoscaled replicas.
//!
//! Requests of an Azure-format trace ([`trace`]) arrive at the gateway, which balances them over
//! ready replicas and queues them when all are full ([`engine`]); each replica batches them
//! continuously with the latency model of one serving profile ([`profile`], [`replica`]). Every
//! policy is a [`gantry_core::autoscale`] policy, the same code the server runs: HPA on
//! `in_flight` with its default behavior, Knative's KPA, Ray Serve, a fixed count, and Gantry's.
//!
//! **Fair comparison** ([`search`]). The baselines get their best target for the run at hand:
//! each of `hpa`, `kpa` and `rayserve` is run over a grid of targets and reported at the one
//! with the fewest GPU-hours that meets the SLO (≥ 99 % of requests with TTFT within
//! `slo_ttft_s`); `fixed` is the smallest constant count that meets it (an oracle). `gantry`
//! runs once, with its sizing from the profile's service times and the SLO, never from the
//! trace. All runs start from the same state: `fixed`'s count ready at time 0 (the service is
//! sized for its load when the trace begins; a 96 s cold start could not catch up otherwise),
//! then at least 30 minutes of warm-up passes of the same trace ([`engine::warmup_passes`])
//! before the measured one, and share the balancer's seed.

pub mod engine;
pub mod profile;
pub mod replica;
pub mod report;
pub mod search;
mod svg;
#[cfg(test)]
mod tests;
pub mod trace;

pub use engine::{Point, RunConfig, RunResult, simulate};
pub use profile::{DEFAULT_PROFILE, Profile};
pub use report::{Outcome, Report};
pub use search::{Settings, evaluate};
pub use trace::{RequestRow, read_requests};

/// A policy of the serving simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServePolicy {
    /// Gantry's autoscaler, untuned.
    Gantry,
    /// Kubernetes HPA on `in_flight`, default behavior, best target of the grid.
    Hpa,
    /// Knative KPA, best concurrency target of the grid.
    Kpa,
    /// Ray Serve, best target ongoing requests of the grid.
    RayServe,
    /// The smallest constant count meeting the SLO.
    Fixed,
}

impl ServePolicy {
    /// Every policy, in report order.
    pub const ALL: [Self; 5] = [Self::Gantry, Self::Hpa, Self::Kpa, Self::RayServe, Self::Fixed];

    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gantry => "gantry",
            Self::Hpa => "hpa",
            Self::Kpa => "kpa",
            Self::RayServe => "rayserve",
            Self::Fixed => "fixed",
        }
    }
}

impl std::str::FromStr for ServePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown policy `{s}`; use gantry, hpa, kpa, rayserve or fixed"))
    }
}
