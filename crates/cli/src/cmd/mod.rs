//! One module per subcommand; `backend` holds the GPU backend flags `gpus` and `exporter` share,
//! `sandbox` the job sandbox flags `up` and `agent` share, `client` and `table` what the client
//! commands share, `control` and `logging` what the long-running `up`, `server` and `agent` share.

pub mod agent;
pub mod apply;
pub mod audit;
pub mod backend;
pub mod bench;
pub mod ca;
pub mod cancel;
pub mod client;
pub mod cluster_gpus;
pub mod completions;
pub mod config;
pub mod control;
pub mod dashboard;
pub mod describe;
pub mod device_plugin;
pub mod draft;
pub mod events;
pub mod exporter;
pub mod extender;
pub mod global_flags;
pub mod gpus;
pub mod jobs;
pub mod log_times;
pub mod logging;
pub mod logs;
pub mod nodes;
pub mod pipe;
pub mod pools;
pub mod queue;
pub mod sandbox;
pub mod sbatch;
pub mod server;
pub mod sim;
pub mod submit;
pub mod table;
pub mod teams;
pub mod token;
pub mod top;
pub mod up;
pub mod usage;
pub mod users;
pub mod watch;
