//! Trace-driven simulator on Gantry's scheduling core.
//!
//! - [`trace`] reads the Alibaba openb node and pod lists, with errors that name file and line;
//! - [`experiment`] is the FGD fragmentation experiment (fill the cluster, one attempt per pod);
//! - [`balance`]: how evenly `pack` and `spread` (a node pool's placement) load the nodes of
//!   a half-full cluster (`gantry sim spread`);
//! - [`idle`]: the idle policy on a model of idle jobs (`gantry sim idle`): GPU-hours
//!   recovered, wrong reclaims;
//! - [`runner`] runs policies × seeds in parallel and aggregates over seeds;
//! - [`report`] turns results into the JSON contract, a text table, CSV curves and an SVG chart;
//! - [`jobs`] is the job-completion simulator (`gantry sim jobs`): Pollux's job model on a
//!   virtual clock, the Tiresias/FIFO/SRTF baselines, and Gantry's queue from `gantry_core::queue`;
//! - [`replay`] is a virtual cluster of server-shaped jobs that runs the server's pass,
//!   `gantry_core::sched::plan` (the server's replay test drives both with one event log);
//! - [`serve`] is the serving simulator (`gantry sim serve`): an LLM request trace against
//!   continuously batching replicas behind the gateway, autoscaled by `gantry_core::autoscale`.
//!
//! The simulator places pods through the same [`gantry_core::Policy::place`] the server calls.

pub mod balance;
pub mod experiment;
pub mod idle;
pub mod jobs;
pub mod replay;
pub mod report;
pub mod runner;
pub mod serve;
mod svg;
pub mod trace;
pub mod whatif;

pub use balance::Balance;
pub use experiment::{Experiment, Refused, Replay, RunCurve};
pub use runner::{PolicyResult, Stat, paired, run_all};
pub use trace::{PodRow, TraceError, read_nodes, read_pods};
