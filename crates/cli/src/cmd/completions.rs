//! `gantry completions bash|zsh|fish|elvish|powershell` and `gantry man`: generated from the same
//! clap definitions as the commands, so they never drift.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Arguments of `gantry completions`.
#[derive(Debug, Args)]
#[command(after_help = "Example: gantry completions bash > /etc/bash_completion.d/gantry")]
pub struct CompletionsArgs {
    /// The shell.
    shell: Shell,
}

/// Prints the completion script for a shell.
pub fn completions<C: CommandFactory>(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = C::command();
    let mut text = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "gantry", &mut text);
    print(&text)
}

/// Prints the man page (roff).
pub fn man<C: CommandFactory>() -> anyhow::Result<()> {
    let mut text = Vec::new();
    clap_mangen::Man::new(C::command()).render(&mut text)?;
    print(&text)
}

/// Writes to stdout; a reader that stops early (`| head`) is not an error.
fn print(text: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().write_all(text) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
