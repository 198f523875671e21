//! The control plane as `gantry up` and `gantry server` both start it: data directory and its
//! lock, logging, the store, the TLS decision and certificates, the listener, the admin token
//! and the client config. `up` adds a local agent; `server` is this alone (a head node without
//! GPUs).
//!
//! TLS policy: every listener speaks TLS with the cluster CA, loopback included, and the client
//! config pins that CA. On loopback the threat is not the network but the machine: any local
//! process (a job) may bind the port while the server restarts, and would receive every token
//! sent in plain HTTP; with TLS the CLI, agent and a browser that trusts the CA refuse it before
//! sending one (see `docs/security.md`). `--no-tls` opts out, on loopback only, with a warning.
//! A loopback listen address is bound in both families ([`gantry_server::listen`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_core::PolicyKind;
use gantry_server::tls::{self, Pki};
use gantry_server::{Server, ServerConfig};
use gantry_store::{PgStore, SqliteStore, Store};

use super::client::{self, ClientConfig, home};

/// Arguments shared by `gantry up` and `gantry server`.
#[derive(Debug, Args)]
pub struct ControlArgs {
    /// Where the store, job logs, certificates and the log file live (default
    /// `$XDG_DATA_HOME/gantry` or `~/.local/share/gantry`).
    #[arg(long, env = "GANTRY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where the cluster's state lives: `sqlite` (`gantry.db` in the data directory) or a
    /// PostgreSQL database, `postgres://USER@HOST:PORT/DB` (a password from `PGPASSWORD` when the
    /// URL has none; TLS as its `sslmode` and `sslrootcert` ask, in libpq's meanings:
    /// `?sslmode=verify-full&sslrootcert=ca.pem`). Job output and certificates stay in the data
    /// directory either way.
    #[arg(long, env = "GANTRY_DB", value_name = "sqlite|postgres://…", default_value = "sqlite", value_parser = Database::parse)]
    pub db: Database,
    /// How long the leader's lease lasts unless renewed (with `--db postgres://…`, where several
    /// servers may share one database: one leads, the others serve the API and take over once
    /// its lease lapses): `15s`, `1m`.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = super::submit::parse_time)]
    pub lease_ttl: u64,
    /// Listen address, served over TLS. `127.0.0.1:P` and `[::1]:P` are bound together, so that
    /// no other process can answer `localhost:P`.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Where the serving gateway listens: `http://ADDR/<team>/<service>/<path>` reaches a ready
    /// replica of that service. HTTPS (the cluster CA) on any address but loopback. `none`: no
    /// gateway.
    #[arg(long, value_name = "ADDR|none", default_value = "127.0.0.1:7080", value_parser = parse_gateway_listen)]
    pub gateway_listen: GatewayListen,
    /// The ports service replicas get as `$PORT` (`LO-HI`): unique among a node's replicas, so
    /// that replicas sharing a node's network never collide; each node has the whole range.
    #[arg(long, value_name = "LO-HI", default_value = "20000-22999", value_parser = parse_port_range)]
    pub service_ports: (u16, u16),
    /// A directory of a shared file system, mounted at the same path on every node, under which
    /// volumes may be created (`gantry volume create NAME --path DIR/…`); repeatable.
    #[arg(long = "volume-root", value_name = "DIR")]
    pub volume_roots: Vec<std::path::PathBuf>,
    /// Most bytes of uploaded working-directory files one team may hold on the server's disk
    /// (files no job uses go an hour after they were sent): `4GiB`. Past it an upload gets 507
    /// with the figures.
    #[arg(long, value_name = "SIZE", default_value = "4GiB")]
    pub upload_team_quota: String,
    /// Serve HTTPS (the default; kept for scripts that pass it).
    #[arg(long, conflicts_with = "no_tls")]
    pub tls: bool,
    /// Serve plain HTTP on a loopback address. Unsafe where anyone else runs processes on this
    /// machine (jobs do): one that binds the port while the server is down receives every token.
    #[arg(long)]
    pub no_tls: bool,
    /// A further DNS name or IP address for the server certificate (repeatable); localhost,
    /// 127.0.0.1, ::1, the host name and a specific listen address are always in it.
    #[arg(long = "tls-san", value_name = "NAME")]
    pub tls_san: Vec<String>,
    /// Open connections at most; more wait in the accept backlog until one closes.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Open connections from one address at most; more are closed at once, so one client
    /// cannot hold every connection slot.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections_per_address: u32,
    /// Placement policy.
    #[arg(long, default_value = "gantry")]
    pub policy: PolicyKind,
    /// Seconds without heartbeat before a node is `not-responding`: it gets no new work, and its
    /// running jobs keep their place (an agent restarting comes back to them).
    #[arg(long, default_value_t = 10.0)]
    pub heartbeat_timeout: f64,
    /// Silence after which a node is lost and its jobs are requeued elsewhere (at least the
    /// heartbeat timeout): `90s`, `5m`, `1h`. An agent back before then keeps its jobs running
    /// as the same attempt; after it, the jobs the server requeued are stopped on it.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = super::submit::parse_time)]
    pub node_lost_after: u64,
    /// Most output kept per job and stream (stdout, stderr), e.g. `64MiB`; older output is
    /// rotated away. Agents get it with each job.
    #[arg(long, default_value = "64MiB")]
    pub log_limit: String,
    /// Bytes of job output the server keeps per team, for teams without their own
    /// (`PUT /v1/teams/{name}` with `log_quota_bytes`): `10GiB`. Past it the team's oldest
    /// ended attempts' output is removed, then new output is cut with a marker line.
    #[arg(long, value_name = "SIZE", default_value = "10GiB")]
    pub log_quota: String,
    /// How long a job's output is kept after the job ends: `7d`, `12h`.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = super::submit::parse_time)]
    pub log_retention: u64,
    /// Submissions are refused (507) while the data disk has less free space than this: `1GiB`
    /// (`0`: never).
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    pub min_free_disk: String,
    /// Least time an elastic job (`submit --gpus 2..8`) runs between two resizes, each of
    /// which restarts it: `90s`, `5m`, `1h`. Example: `--resize-interval 10m`.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = super::submit::parse_time)]
    pub resize_interval: u64,
    /// The client context this cluster is saved as (default: the one this data directory wrote
    /// before, else `local`, `local-2`, …). Other contexts in the client config are left alone.
    #[arg(long = "context", value_name = "NAME")]
    pub context: Option<String>,
}

/// The data directory, locked, with logging and the store open: what is done before the runtime
/// starts, so bad settings fail before anything listens.
#[derive(Debug)]
pub struct Prepared {
    /// The data directory.
    pub data: PathBuf,
    /// The open store.
    pub store: Arc<dyn Store>,
    _lock: std::fs::File,
}

/// Validates the arguments, locks the data directory, starts logging and opens the store.
pub fn prepare(args: &ControlArgs) -> anyhow::Result<Prepared> {
    // Before any thread starts: see gantry_server::memory.
    gantry_server::memory::configure();
    if !(0.5..=3600.0).contains(&args.heartbeat_timeout) {
        anyhow::bail!("--heartbeat-timeout must be between 0.5 and 3600 seconds");
    }
    if (args.node_lost_after as f64) < args.heartbeat_timeout {
        anyhow::bail!(
            "--node-lost-after ({} s) must be at least --heartbeat-timeout ({} s)",
            args.node_lost_after,
            args.heartbeat_timeout
        );
    }
    let log_limit = super::sandbox::parse_size(&args.log_limit).context("--log-limit")?;
    if log_limit < 4096 {
        anyhow::bail!("--log-limit must be at least 4KiB");
    }
    super::sandbox::parse_size(&args.log_quota).context("--log-quota")?;
    super::sandbox::parse_size(&args.min_free_disk).context("--min-free-disk")?;
    super::sandbox::parse_size(&args.upload_team_quota).context("--upload-team-quota")?;
    let data = match &args.data_dir {
        Some(d) => d.clone(),
        None => default_data_dir()?,
    };
    let lock = lock_data_dir(&data)?;
    super::logging::init(&data)?;
    let store = args.db.open(&data)?;
    Ok(Prepared { data, store, _lock: lock })
}

/// This replica's id in the leader lease: made once per data directory, so that a restarted
/// replica renews its own lease instead of waiting for it to lapse.
fn replica_id(data: &Path) -> anyhow::Result<String> {
    let path = data.join("replica-id");
    if let Ok(id) = std::fs::read_to_string(&path)
        && !id.trim().is_empty()
    {
        return Ok(id.trim().to_owned());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = Some(host.trim()).filter(|h| !h.is_empty()).unwrap_or("replica");
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let id = format!("{host}-{:x}", nanos ^ u128::from(std::process::id()));
    std::fs::write(&path, &id).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// Which database holds the store (`--db`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// `gantry.db` in the data directory.
    Sqlite,
    /// A PostgreSQL URL.
    Postgres(String),
}

impl Database {
    /// `sqlite`, or a `postgres://` (`postgresql://`) URL.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "sqlite" {
            return Ok(Self::Sqlite);
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres(text.to_owned()));
        }
        Err(format!("`{text}` is neither `sqlite` nor a URL like postgres://gantry@db:5432/gantry"))
    }

    /// `sqlite` or `postgresql`, for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres(_) => "postgresql",
        }
    }

    /// Opens the store (the SQLite one in `data`), migrating it.
    pub fn open(&self, data: &Path) -> anyhow::Result<Arc<dyn Store>> {
        Ok(match self {
            Self::Sqlite => Arc::new(
                SqliteStore::open(data)
                    .with_context(|| format!("cannot open the store in {}", data.display()))?,
            ),
            Self::Postgres(url) => Arc::new(PgStore::open(url).with_context(|| {
                format!("cannot open the store at {}", gantry_store::postgres::redacted(url))
            })?),
        })
    }
}

/// The runtime of a long-running control plane. Store calls run on the blocking pool; its idle
/// threads go after 2 s rather than tokio's 10 s, so the threads (and their stacks and allocator
/// caches) that a burst of requests started do not linger for as long as the scheduler's
/// periodic reads keep waking one of them.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(Duration::from_secs(2))
        .build()?;
    Ok(rt)
}

/// A bound control plane.
#[derive(Debug)]
pub struct Control {
    /// The server, not yet serving.
    pub server: Server,
    /// The URL clients on this machine use (`https://` with TLS).
    pub url: String,
    /// The CA and certificates, with TLS.
    pub pki: Option<Arc<Pki>>,
    /// The data directory, locked, and the store.
    pub prepared: Prepared,
}

/// A listen address in use says so once, with the flag that moves it.
fn listen_hint(e: gantry_server::ServerError) -> anyhow::Error {
    use std::error::Error as _;
    let mut cause = e.source();
    let mut in_use = false;
    while let Some(c) = cause {
        in_use |=
            c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse);
        cause = c.source();
    }
    if in_use {
        anyhow::anyhow!(
            "{e}: another process already uses it; stop it, or choose another address with --listen"
        )
    } else {
        anyhow::Error::new(e)
    }
}

/// Decides on TLS, loads or makes the certificates, binds the listener, makes the admin token on
/// a fresh store and writes the client config.
pub async fn bind(args: &ControlArgs, prepared: Prepared) -> anyhow::Result<Control> {
    let loopback = args.listen.ip().is_loopback();
    if args.no_tls && !loopback {
        anyhow::bail!(
            "--no-tls is for loopback addresses only: {} is reachable from other machines, and every request carries a token",
            args.listen
        );
    }
    if let Some(gateway) = args.gateway_listen.0.filter(|g| args.no_tls && !g.ip().is_loopback()) {
        anyhow::bail!(
            "--gateway-listen {gateway} is reachable from other machines and needs TLS, which --no-tls turns off; \
             use a loopback address or drop --no-tls"
        );
    }
    let pki = if args.no_tls {
        eprintln!(
            "warning: --no-tls: {} speaks plain HTTP. Any process on this machine, a job included, that binds \
             this port while gantry is down (a restart) receives the token of every CLI call and dashboard \
             poll; with TLS (the default) clients pin the cluster CA and refuse it",
            args.listen
        );
        None
    } else {
        if !loopback {
            eprintln!("note: serving HTTPS: {} is not a loopback address", args.listen);
        }
        let mut names = args.tls_san.clone();
        // A gateway on a specific address is reached by that address too.
        let gateway_ip =
            args.gateway_listen.0.map(|g| g.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
        names.extend(gateway_ip.map(|ip| ip.to_string()));
        let sans = tls::default_sans(args.listen, &names);
        let dir = prepared.data.join("tls");
        let pki = Pki::load_or_create(&dir, &sans)
            .with_context(|| format!("cannot set up TLS certificates in {}", dir.display()))?;
        Some(Arc::new(pki))
    };
    let mut config = ServerConfig::local(prepared.data.join("logs"));
    config.listen = args.listen;
    config.policy = args.policy;
    config.heartbeat_timeout = Duration::from_secs_f64(args.heartbeat_timeout);
    config.node_lost_after = Duration::from_secs(args.node_lost_after);
    config.max_connections = args.max_connections as usize;
    config.max_connections_per_address = args.max_connections_per_address as usize;
    config.resize_interval = Duration::from_secs(args.resize_interval);
    config.log_limit_bytes = super::sandbox::parse_size(&args.log_limit).context("--log-limit")?;
    config.output = gantry_server::output::OutputLimits {
        team_quota: super::sandbox::parse_size(&args.log_quota).context("--log-quota")?,
        retention: Duration::from_secs(args.log_retention),
        min_free_disk: super::sandbox::parse_size(&args.min_free_disk).context("--min-free-disk")?,
    };
    config.pki = pki.clone();
    config.gateway_listen = args.gateway_listen.0;
    config.socket = Some(prepared.data.join(SOCKET));
    config.service_ports = args.service_ports;
    if let Some(root) = args.volume_roots.iter().find(|r| !r.is_absolute()) {
        anyhow::bail!("--volume-root takes an absolute path, not {}", root.display());
    }
    config.volume_roots = args.volume_roots.clone();
    config.upload_team_quota_bytes =
        super::sandbox::parse_size(&args.upload_team_quota).context("--upload-team-quota")?;
    if matches!(args.db, Database::Postgres(_)) {
        let replica = replica_id(&prepared.data)?;
        config.lease =
            Some(gantry_server::leader::LeaseConfig { replica, ttl: Duration::from_secs(args.lease_ttl) });
    }
    let server = Server::bind(config, Arc::clone(&prepared.store)).await.map_err(listen_hint)?;
    if let Some(missing) = server.gateway_missing() {
        eprintln!("warning: {missing} (see --gateway-listen)");
    }
    if let Some(addr) = server.gateway_addrs().first() {
        let scheme = if server.gateway_is_tls() { "https" } else { "http" };
        println!("gateway: {scheme}://{addr}/<team>/<service>/<path>");
    }
    let url = local_url(server.local_addr()?, pki.is_some());
    if let Some(missing) = server.missing_family() {
        eprintln!("note: {missing}");
    }
    if let Some(pki) = &pki {
        println!(
            "TLS is on; the cluster CA is {} (sha256 {}): clients pin it with --ca or GANTRY_CA",
            pki.ca_path().display(),
            pki.ca_sha256()
        );
    }
    println!("{}", dashboard_line(server.local_addr()?, pki.as_deref()));
    announce_tokens(&*prepared.store, &url, pki.as_deref(), &prepared.data, args.context.as_deref())?;
    Ok(Control { server, url, pki, prepared })
}

/// The API's unix socket in the data directory (the local CLI and agent use it when they can).
pub const SOCKET: &str = "api.sock";

/// `--gateway-listen`: an address, or `none`.
#[derive(Debug, Clone, Copy)]
pub struct GatewayListen(pub Option<SocketAddr>);

/// `--service-ports LO-HI`: a non-empty range of unprivileged ports.
fn parse_port_range(text: &str) -> Result<(u16, u16), String> {
    let bad = || format!("`{text}` is not a port range like 30000-32767");
    let (lo, hi) = text.split_once('-').ok_or_else(bad)?;
    let (lo, hi): (u16, u16) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
    if lo < 1024 || hi < lo {
        return Err(format!("{}: the range must run upward from 1024 or above", bad()));
    }
    Ok((lo, hi))
}

fn parse_gateway_listen(text: &str) -> Result<GatewayListen, String> {
    if text == "none" {
        return Ok(GatewayListen(None));
    }
    let addr: SocketAddr =
        text.parse().map_err(|_| format!("`{text}` is not an address like 127.0.0.1:7080 (or `none`)"))?;
    Ok(GatewayListen(Some(addr)))
}

/// The URL for clients on this machine: a wildcard listen address is reached through loopback,
/// which the server certificate always names.
fn local_url(addr: SocketAddr, tls: bool) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

/// Where the dashboard is: `localhost` on loopback (both families are bound), with what a browser
/// needs to trust the server.
fn dashboard_line(addr: SocketAddr, pki: Option<&Pki>) -> String {
    let at = if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        format!("localhost:{}", addr.port())
    } else {
        addr.to_string()
    };
    match pki {
        Some(pki) => format!(
            "dashboard: https://{at}/ (the browser must trust the cluster CA, sha256 {}: \
             `gantry ca install` adds it to this machine's trust stores)",
            pki.ca_sha256()
        ),
        None => format!("dashboard: http://{at}/ (plain HTTP)"),
    }
}

/// Saves this cluster as a context of the client config and makes it current, leaving every
/// other context alone: the context this data directory wrote before (or `--context`), else a
/// pre-context config's `default` when its token belongs to this store, else a new one. Unless
/// the context already holds a usable admin token of this store (a fresh store, or the saved
/// token expired, was revoked or belongs to another cluster), creates one and saves it there.
/// Whoever may run the control plane on this data directory owns its database anyway. The secret
/// goes to the config file (0600) only, never to the terminal.
fn announce_tokens(
    store: &dyn Store,
    url: &str,
    pki: Option<&Pki>,
    data: &Path,
    name: Option<&str>,
) -> anyhow::Result<()> {
    let mut config = client::load_config().unwrap_or_default();
    let usable = |secret: &String| {
        let found = gantry_server::credentials::usable(store, secret).ok().flatten();
        found.is_some_and(|t| t.role == gantry_store::Role::Admin)
    };
    let data = data.canonicalize().unwrap_or_else(|_| data.to_owned());
    let name = context_name(&config, name, &data, |c| c.token.as_ref().is_some_and(usable));
    let mut context = config.contexts.remove(&name).unwrap_or_default();
    context.server = Some(url.to_owned());
    context.ca = pki.map(|p| p.ca_path().display().to_string());
    context.data_dir = Some(data);
    let fresh = !context.token.as_ref().is_some_and(usable);
    if fresh {
        let admin =
            gantry_store::User { name: "admin".into(), role: gantry_store::Role::Admin, teams: Vec::new() };
        let ttl = gantry_server::credentials::ADMIN_TOKEN_TTL;
        context.token = Some(gantry_server::create_user_token(store, &admin, ttl)?);
    }
    config.contexts.insert(name.clone(), context);
    config.current_context = Some(name.clone());
    let path = client::save_config(&config)?;
    if fresh {
        println!("created an admin token; it is saved in {} (readable by you only)", path.display());
        println!("  other accounts or machines: `gantry token create --team T` makes a token for them");
    }
    let others = config.contexts.len() - 1;
    println!(
        "client context `{name}` now points here and is current ({others} other context(s) kept; \
         `gantry config get-contexts` lists them, `gantry config use-context NAME` switches)"
    );
    Ok(())
}

/// Which context a control plane on `data` writes: `asked`, else the one naming `data`, else a
/// context without a data directory whose token `ours` accepts (a pre-context config), else the
/// first free `local`, `local-2`, ….
fn context_name(
    config: &ClientConfig,
    asked: Option<&str>,
    data: &Path,
    ours: impl Fn(&client::ClientContext) -> bool,
) -> String {
    if let Some(name) = asked {
        return name.to_owned();
    }
    let mine = config.contexts.iter().find(|(_, c)| c.data_dir.as_deref() == Some(data));
    let adopted = || config.contexts.iter().find(|(_, c)| c.data_dir.is_none() && ours(c));
    if let Some((name, _)) = mine.or_else(adopted) {
        return name.clone();
    }
    (1..)
        .map(|n| if n == 1 { "local".to_owned() } else { format!("local-{n}") })
        .find(|n| !config.contexts.contains_key(n))
        .expect("some name is free")
}

/// Holds an exclusive lock on `<data>/gantry.lock` for the life of the process (released by the
/// kernel even on SIGKILL), so two control planes never share a store.
///
/// A run killed while starting a job leaves a forked child that holds copies of its descriptors,
/// the lock's too, until it execs (a few milliseconds, longer on a loaded machine): a restart
/// right after a crash waits that long before calling the store taken.
fn lock_data_dir(data: &Path) -> anyhow::Result<std::fs::File> {
    const PATIENCE: Duration = Duration::from_secs(3);
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let file = std::fs::File::create(data.join("gantry.lock"))?;
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!("another gantry up or gantry server is already using {}", data.display())
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
    }
}

fn default_data_dir() -> anyhow::Result<PathBuf> {
    match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir).join("gantry")),
        None => Ok(home()?.join(".local/share/gantry")),
    }
}
