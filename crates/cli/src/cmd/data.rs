//! `gantry cache` and `gantry secret`: the nodes' dataset caches (declared inputs staged
//! before their jobs start) and the team secrets S3 inputs are read with (issue 22).

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use gantry_api::inputs::CacheEntry;

use super::client::{Api, ServerArgs, block_on};
use super::table;

/// Arguments of `gantry cache`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry cache                 # every dataset on every node, for your teams and the public ones
  gantry cache -o json
  gantry cache public add s3://datasets/imagenet   # admins: one copy per node for every team")]
pub struct CacheArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
    #[command(subcommand)]
    command: Option<CacheCommand>,
}

/// `gantry cache …`.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Sources whose cached copies every team shares (one per node); the others are cached per
    /// team.
    #[command(subcommand)]
    Public(PublicCommand),
}

/// `gantry cache public …`.
#[derive(Debug, Subcommand)]
pub enum PublicCommand {
    /// Mark a source public: it and every URL under it (admins only; audited).
    Add(PublicArgs),
    /// Make a public source private again (admins only; audited); copies already cached stay
    /// until evicted.
    Remove(PublicArgs),
    /// The public sources.
    List(ListArgs),
}

/// Arguments of `gantry cache public add|remove`.
#[derive(Debug, Args)]
pub struct PublicArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The source: `s3://bucket/prefix`, `https://…` or `file:///path`.
    url: String,
}

/// Lists the nodes' cached datasets with size, last use and hits, or runs `gantry cache public`.
pub fn cache(args: CacheArgs) -> anyhow::Result<()> {
    if let Some(CacheCommand::Public(command)) = args.command {
        return public(command);
    }
    let api = Api::connect(&args.server)?;
    let entries: Vec<CacheEntry> = block_on(api.get("/v1/cache"))??;
    if table::structured(args.output, &entries)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.node.clone(),
                e.team.clone(),
                table::printable(&e.url).into_owned(),
                bytes(e.bytes),
                table::when(e.last_used_ms),
                e.hits.to_string(),
                e.in_use.to_string(),
            ]
        })
        .collect();
    table::print(&["NODE", "TEAM", "SOURCE", "SIZE", "LAST USE", "HITS", "IN USE"], &rows);
    Ok(())
}

/// `gantry images`: the container images the nodes hold.
#[derive(Debug, Args)]
pub struct ImagesArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// One node's images only.
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Lists the images the nodes hold: reference, digest, size, last use, attempts running in it,
/// and the teams whose jobs pulled it (yours; operators and admins see every one).
pub fn images(args: ImagesArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let path = match &args.node {
        Some(n) => format!("/v1/images?node={n}"),
        None => "/v1/images".to_owned(),
    };
    let images: Vec<gantry_api::types::NodeImage> = block_on(api.get(&path))??;
    if table::structured(args.output, &images)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = images
        .iter()
        .map(|i| {
            let reference = i.reference.split('@').next().unwrap_or(&i.reference);
            let digest = i.digest.trim_start_matches("sha256:").chars().take(12).collect::<String>();
            vec![
                i.node.clone(),
                table::printable(reference).into_owned(),
                digest,
                bytes(i.bytes),
                table::when(i.last_used),
                i.in_use.to_string(),
                i.teams.join(","),
            ]
        })
        .collect();
    table::print(&["NODE", "IMAGE", "DIGEST", "SIZE", "LAST USE", "IN USE", "TEAMS"], &rows);
    Ok(())
}

fn bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (b as f64, 0);
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", units[u]) }
}

fn public(command: PublicCommand) -> anyhow::Result<()> {
    let (args, public) = match command {
        PublicCommand::Add(args) => (args, true),
        PublicCommand::Remove(args) => (args, false),
        PublicCommand::List(args) => {
            let api = Api::connect(&args.server)?;
            let sources: Vec<gantry_api::inputs::PublicSource> = block_on(api.get("/v1/cache/public"))??;
            if table::structured(args.output, &sources)? {
                return Ok(());
            }
            let rows: Vec<Vec<String>> = sources
                .iter()
                .map(|s| vec![table::printable(&s.url).into_owned(), table::when(s.added_at)])
                .collect();
            table::print(&["SOURCE", "SINCE"], &rows);
            return Ok(());
        }
    };
    gantry_api::inputs::Source::parse(&args.url).map_err(anyhow::Error::msg)?;
    let api = Api::connect(&args.server)?;
    let body = gantry_api::inputs::SetPublic { url: args.url.clone(), public };
    block_on(api.put("/v1/cache/public", &body))??;
    println!("{} is {}", args.url, if public { "public" } else { "private" });
    Ok(())
}

/// `gantry secret …`.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Create or replace a team secret; its values are never shown again.
    Set(SetArgs),
    /// The team secrets you can use: names and keys, never values.
    List(ListArgs),
}

/// Arguments of `gantry secret set`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry secret set datasets AWS_ACCESS_KEY_ID=AKIA… AWS_SECRET_ACCESS_KEY=… AWS_ENDPOINT_URL=https://s3.example.org
  gantry submit --input data=s3://bucket/train --input-secret datasets -- python train.py")]
pub struct SetArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The secret's name.
    name: String,
    /// `KEY=VALUE` pairs (keys upper case).
    #[arg(value_name = "KEY=VALUE", required = true)]
    pairs: Vec<String>,
    /// The team (default: your team, when you have one).
    #[arg(long)]
    team: Option<String>,
}

/// Arguments of `gantry secret list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: table::Structured,
}

/// Runs `gantry secret …`.
pub fn secret(command: SecretCommand) -> anyhow::Result<()> {
    match command {
        SecretCommand::Set(args) => set(args),
        SecretCommand::List(args) => list(args),
    }
}

fn set(args: SetArgs) -> anyhow::Result<()> {
    let mut data = BTreeMap::new();
    for pair in &args.pairs {
        let Some((k, v)) = pair.split_once('=') else {
            anyhow::bail!("`{}`: a secret's pair is KEY=VALUE", pair.split('=').next().unwrap_or_default());
        };
        data.insert(k.to_owned(), v.to_owned());
    }
    gantry_api::inputs::check_secret(&args.name, &data).map_err(anyhow::Error::msg)?;
    let api = Api::connect(&args.server)?;
    let body = serde_json::json!({ "team": args.team, "data": data });
    block_on(api.put(&format!("/v1/secrets/{}", args.name), &body))??;
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    println!("secret {} set ({})", args.name, keys.join(", "));
    Ok(())
}

fn list(args: ListArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args.server)?;
    let secrets: Vec<serde_json::Value> = block_on(api.get("/v1/secrets"))??;
    if table::structured(args.output, &secrets)? {
        return Ok(());
    }
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let rows: Vec<Vec<String>> = secrets
        .iter()
        .map(|s| {
            let keys: Vec<String> = s["keys"].as_array().into_iter().flatten().map(text).collect();
            vec![
                text(&s["team"]),
                text(&s["name"]),
                keys.join(","),
                table::when(s["updated_at"].as_i64().unwrap_or(0)),
            ]
        })
        .collect();
    table::print(&["TEAM", "NAME", "KEYS", "SET"], &rows);
    Ok(())
}
