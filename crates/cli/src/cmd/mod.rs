//! One module per subcommand; `backend` holds the GPU backend flags they share.

pub mod backend;
pub mod bench;
pub mod exporter;
pub mod gpus;
