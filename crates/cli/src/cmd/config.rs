//! `gantry config get-contexts|current-context|use-context|delete-context`: the clusters in the
//! client config, as kubectl's `config` subcommands.

use clap::Subcommand;

use super::client::{self, Output};
use super::table;

/// Config subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// List the contexts (clusters) in the client config; `*` marks the current one. Tokens are
    /// never shown. Example: `gantry config get-contexts`.
    GetContexts {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Print the current context's name.
    CurrentContext,
    /// Make a context current. Example: `gantry config use-context local-2`.
    UseContext {
        /// The context's name.
        name: String,
    },
    /// Remove a context (and the token it holds) from the client config.
    DeleteContext {
        /// The context's name.
        name: String,
    },
}

/// Runs a config subcommand.
pub fn run(command: ConfigCommand) -> anyhow::Result<()> {
    let mut config = client::load_config()?;
    match command {
        ConfigCommand::GetContexts { output } => list(&config, output),
        ConfigCommand::CurrentContext => {
            let name = config.current_context.as_deref();
            println!("{}", name.ok_or_else(|| anyhow::anyhow!("no current context; run `gantry up` once"))?);
            Ok(())
        }
        ConfigCommand::UseContext { name } => {
            config.context(Some(&name))?;
            config.current_context = Some(name.clone());
            client::save_config(&config)?;
            println!("switched to context `{name}`");
            Ok(())
        }
        ConfigCommand::DeleteContext { name } => {
            config.context(Some(&name))?;
            config.contexts.remove(&name);
            if config.current_context.as_deref() == Some(name.as_str()) {
                config.current_context = None;
            }
            client::save_config(&config)?;
            println!("deleted context `{name}`");
            Ok(())
        }
    }
}

fn list(config: &client::ClientConfig, output: Output) -> anyhow::Result<()> {
    let current = config.current_context.as_deref();
    if output == Output::Json {
        let rows: Vec<serde_json::Value> = config
            .contexts
            .iter()
            .map(|(name, c)| {
                serde_json::json!({
                    "name": name, "current": Some(name.as_str()) == current, "server": c.server, "servers": c.servers,
                    "ca": c.ca, "data_dir": c.data_dir, "has_token": c.token.is_some(),
                })
            })
            .collect();
        return table::json(&rows);
    }
    let rows: Vec<Vec<String>> = config
        .contexts
        .iter()
        .map(|(name, c)| {
            vec![
                if Some(name.as_str()) == current { "*".into() } else { String::new() },
                name.clone(),
                c.server_list().unwrap_or_default(),
                if c.token.is_some() { "yes".into() } else { "no".into() },
                c.data_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
            ]
        })
        .collect();
    table::print(&["CURRENT", "NAME", "SERVER", "TOKEN", "DATA DIR"], &rows);
    Ok(())
}
