//! `gantry dashboard`: a one-time link that signs a browser in to the dashboard as you, without
//! your token in the URL (see the server's `signin` module): the code rides in the fragment,
//! which browsers never send, and works once, for two minutes.

use clap::Args;
use gantry_api::types::SignInCode;

use super::client::{Api, ServerArgs, block_on};

/// Arguments of `gantry dashboard`.
#[derive(Debug, Args)]
#[command(after_help = "Example:
  gantry dashboard        # prints https://localhost:7070/#signin=…; open it within two minutes")]
pub struct DashboardArgs {
    #[command(flatten)]
    server: ServerArgs,
}

/// Prints the sign-in link.
pub fn run(args: DashboardArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let code: SignInCode = block_on(api.post("/v1/signin-codes", &serde_json::Value::Null))??;
    println!("{}", link(api.base(), &code.code));
    eprintln!(
        "open it within two minutes: it signs one browser in once, as you, for at most 12 hours \
         (the browser must trust the cluster CA: `gantry ca install`)"
    );
    Ok(())
}

/// The page with the code in its fragment; loopback by name, which the server's certificate
/// and the README's instructions use.
fn link(base: &str, code: &str) -> String {
    let base = base.trim_end_matches('/').replacen("://127.0.0.1:", "://localhost:", 1);
    format!("{base}/#signin={code}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_link_names_loopback_as_localhost_and_carries_the_code_in_the_fragment() {
        assert_eq!(super::link("https://127.0.0.1:7070", "abc"), "https://localhost:7070/#signin=abc");
        assert_eq!(super::link("https://head:7070/", "abc"), "https://head:7070/#signin=abc");
    }
}
