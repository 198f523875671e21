//! One module per subcommand.

pub mod agent;
pub mod bench;
pub mod cancel;
pub mod client;
pub mod gpus;
pub mod jobs;
pub mod logs;
pub mod nodes;
pub mod sim;
pub mod submit;
pub mod table;
pub mod token;
pub mod up;
