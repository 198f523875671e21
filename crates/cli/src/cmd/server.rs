//! `gantry server`: the control plane alone, for a head node without GPUs; agents join with
//! `gantry agent`. The same as `gantry up --no-agent` (both start through [`super::control`]).

use clap::Args;

use super::control::{self, ControlArgs};
use super::up::shutdown_signal;

/// Arguments of `gantry server`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    control: ControlArgs,
}

/// Serves until Ctrl-C or SIGTERM; in-flight requests finish first.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let prepared = control::prepare(&args.control)?;
    let rt = control::runtime()?;
    rt.block_on(async {
        let control = control::bind(&args.control, prepared).await?;
        println!(
            "gantry server is up at {} (data in {}); Ctrl-C stops it",
            control.url,
            control.prepared.data.display()
        );
        control.server.serve(shutdown_signal()).await?;
        eprintln!("server stopped");
        Ok(())
    })
}
