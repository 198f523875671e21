//! `gantry token create|list|revoke`.

use clap::{Args, Subcommand};
use gantry_api::model::Role;
use gantry_api::types::{TokenRequest, TokenResponse};
use gantry_store::{TokenKind, TokenRecord};

use super::client::{Api, Output, ServerArgs, block_on};
use super::table;

/// Token subcommands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token (needs an admin token); prints the secret once, alone on stdout.
    Create(CreateArgs),
    /// List tokens (an admin sees all, others their own and their teams' invoke tokens); never
    /// shows secrets.
    List(ListArgs),
    /// Revoke a token by id; it stops working on its next request.
    Revoke(RevokeArgs),
}

/// Arguments of `gantry token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Team the user belongs to (added to its teams).
    #[arg(long)]
    team: Option<String>,
    /// The user the token is for (default: the team's name for a member, `<team>-<role>` for
    /// another role, so a viewer's token never becomes the members' user).
    #[arg(long)]
    user: Option<String>,
    /// `member` (alias `user`), `viewer`, `operator`, `admin`, or `agent` for a one-time join token.
    #[arg(long, default_value = "member")]
    role: String,
    /// Join tokens: the only node that may join with it.
    #[arg(long)]
    node: Option<String>,
    /// Lifetime, e.g. `90d`, `12h`, `30m` (default 90 days; 1 hour for join tokens).
    #[arg(long)]
    ttl: Option<String>,
    /// Label.
    #[arg(long)]
    name: Option<String>,
    /// An invoke token for this service (of `--team`, default yours): it calls the service
    /// through the gateway and nothing else. Members of the service's team may create one.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["user", "node"])]
    service: Option<String>,
}

/// Arguments of `gantry token list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

/// Arguments of `gantry token revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The token's id (see `gantry token list`).
    id: i64,
}

/// Runs a token subcommand.
pub fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create(args) => create(args),
        TokenCommand::List(args) => list(args),
        TokenCommand::Revoke(args) => {
            let api = Api::connect(&args.server)?;
            block_on(api.delete(&format!("/v1/tokens/{}", args.id)))??;
            eprintln!("token {} revoked", args.id);
            Ok(())
        }
    }
}

fn create(args: CreateArgs) -> anyhow::Result<()> {
    let ttl_seconds = args.ttl.as_deref().map(parse_ttl).transpose()?;
    let api = Api::connect(&args.server)?;
    let role = Role::parse_lenient(&args.role).ok_or_else(|| {
        anyhow::anyhow!("--role must be member, viewer, operator, admin or agent, not `{}`", args.role)
    })?;
    let body = TokenRequest {
        role: args.service.is_none().then_some(role),
        service: args.service,
        team: args.team,
        user: args.user,
        name: args.name,
        node: args.node.clone(),
        ttl_seconds,
    };
    let resp: TokenResponse = block_on(api.post("/v1/tokens", &body))??;
    println!("{}", resp.token);
    let expires = resp.expires_at.map_or_else(|| "never".to_owned(), table::when);
    if resp.kind == TokenKind::Join {
        let node = args.node.as_deref().unwrap_or("NODE");
        let pin = match block_on(ca_sha256(&api))?? {
            Some(hash) => format!(" --ca-sha256 {hash}"),
            None => String::new(),
        };
        eprintln!("one-time join token {} (expires {expires}); on the new machine run:", resp.id);
        // The token goes in the environment, never on the agent's command line, where every
        // user of that machine could read it in `ps` (`--join-token-file FILE` also works).
        eprintln!(
            "  GANTRY_JOIN_TOKEN={} gantry agent --server {} --node-id {node}{pin}",
            resp.token,
            reachable(api.base())
        );
    } else if resp.kind == TokenKind::Invoke {
        eprintln!(
            "invoke token {} (expires {expires}): send it to the gateway as `Authorization: Bearer <the token above>`; \
             it calls that service only",
            resp.id
        );
    } else {
        eprintln!(
            "token {} (expires {expires}); use it with GANTRY_TOKEN=<the token above> or --token",
            resp.id
        );
    }
    Ok(())
}

fn list(args: ListArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let tokens: Vec<TokenRecord> = block_on(api.get("/v1/tokens"))??;
    if args.output == Output::Json {
        return table::json(&tokens);
    }
    let now = gantry_server::now_ms();
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let owner =
                t.user.clone().or_else(|| t.node.clone().map(|n| format!("node {n}"))).unwrap_or("-".into());
            let state = t.refusal(now).unwrap_or("active").to_owned();
            let expires = t.expires_at.map_or_else(|| "never".to_owned(), table::when);
            vec![
                t.id.to_string(),
                t.kind.to_string(),
                owner,
                t.role.to_string(),
                state,
                expires,
                t.name.clone(),
            ]
        })
        .collect();
    table::print(&["ID", "KIND", "OWNER", "ROLE", "STATE", "EXPIRES", "NAME"], &rows);
    Ok(())
}

/// `90d`, `12h`, `30m`, `45s` or plain seconds.
pub fn parse_ttl(text: &str) -> anyhow::Result<u64> {
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 =
        digits.parse().map_err(|_| anyhow::anyhow!("--ttl: `{text}` is not like 90d, 12h, 30m or 45s"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => anyhow::bail!("--ttl: unit must be s, m, h or d, not `{unit}`"),
    };
    n.checked_mul(scale).ok_or_else(|| anyhow::anyhow!("--ttl: `{text}` is too long"))
}

/// The SHA-256 of the cluster CA the server serves (over the connection this client already
/// trusts), for `gantry agent --ca-sha256`; `None` without TLS.
async fn ca_sha256(api: &Api) -> anyhow::Result<Option<String>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    if !api.base().starts_with("https://") {
        return Ok(None);
    }
    let (_, pem) = api.get_bytes_and_header("/v1/ca.pem", "content-type").await?;
    let der = CertificateDer::from_pem_slice(&pem)
        .map_err(|e| anyhow::anyhow!("the server's CA is not PEM: {e}"))?;
    Ok(Some(gantry_server::tls::sha256_hex(&der)))
}

/// The server URL as another machine would use it: a loopback host becomes this host's name
/// (which the server certificate names too).
fn reachable(base: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    if host.is_empty() {
        return base.to_owned();
    }
    ["127.0.0.1", "[::1]", "localhost"]
        .iter()
        .find_map(|lo| base.contains(&format!("://{lo}:")).then(|| base.replacen(lo, host, 1)))
        .unwrap_or_else(|| base.to_owned())
}
