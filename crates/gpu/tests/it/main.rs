//! Integration tests of the GPU layer (one binary, one module per area).

mod collect;
mod findings;
mod health;
mod nvml;
mod nvml_fake;
mod sim;
