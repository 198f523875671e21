//! The attempt supervisor on its own, for the agent crate's tests (the `gantry` binary serves
//! as the shim in a deployment: `gantry __shim`). See `gantry_agent::runner::shim`.

fn main() -> std::process::ExitCode {
    let code = gantry_agent::runner::shim::main();
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
