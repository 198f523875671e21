//! One module per subcommand.

pub mod sim;
