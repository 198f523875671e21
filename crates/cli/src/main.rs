//! The `gantry` command.
fn main() {}
