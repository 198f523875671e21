//! `gantry ca show|install`: the cluster CA a context pins, and making this machine trust it, so a
//! browser opens the dashboard at `https://localhost:7070/` without a warning to click through
//! (and so without a habit of clicking through one, which is what an impostor on the port needs).
//!
//! The CLI and agents need none of this: they pin the CA from the client config or `--ca`. What
//! `install` does, each step skippable, none done behind the user's back:
//! - the system store (curl, Python, Go programs, most tools): the CA is copied to
//!   `/usr/local/share/ca-certificates/` and `update-ca-certificates` runs (Debian, Ubuntu), or
//!   `/etc/pki/ca-trust/source/anchors/` and `update-ca-trust` (Fedora, RHEL). Needs root.
//! - the user's NSS database `~/.pki/nssdb`, which Chromium and Chrome on Linux read, through
//!   NSS's `certutil` (Debian: `libnss3-tools`) when it is installed; made if missing. Firefox
//!   keeps one database per profile: `--nss-db ~/.mozilla/firefox/<profile>` adds it there.
//!
//! `--dry-run` prints the commands instead of running them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::client::{self, home, read_ca};

/// `gantry ca` subcommands.
#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Print the cluster CA's file, SHA-256 fingerprint and public-key pin.
    /// Example: `gantry ca show`.
    Show(Which),
    /// Trust the cluster CA on this machine: the system store (as root) and the NSS database
    /// Chromium reads. Example: `gantry ca install` (or `--no-system` when not root).
    Install(InstallArgs),
}

/// Which CA.
#[derive(Debug, Args)]
pub struct Which {
    /// The CA file (default: the one the context pins).
    #[arg(long, env = "GANTRY_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// The client context whose CA to use (default: the current one).
    #[arg(long, env = "GANTRY_CONTEXT", value_name = "NAME")]
    context: Option<String>,
}

/// Arguments of `gantry ca install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    #[command(flatten)]
    which: Which,
    /// Leave the system store alone.
    #[arg(long)]
    no_system: bool,
    /// Leave NSS databases alone.
    #[arg(long)]
    no_nss: bool,
    /// The NSS database to add the CA to (default `~/.pki/nssdb`, Chromium's).
    #[arg(long, value_name = "DIR")]
    nss_db: Option<PathBuf>,
    /// Print what would be run, change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// A CA read and checked.
struct Ca {
    pem: String,
    sha256: String,
    spki: String,
}

impl Ca {
    fn short(&self) -> &str {
        &self.sha256[..12]
    }
}

/// Runs a `ca` subcommand.
pub fn run(command: CaCommand) -> anyhow::Result<()> {
    match command {
        CaCommand::Show(which) => show(&which),
        CaCommand::Install(args) => install(&args),
    }
}

fn load(which: &Which) -> anyhow::Result<(Ca, String)> {
    let (pem, from) = match &which.ca {
        Some(path) => (read_ca(path)?, path.display().to_string()),
        None => {
            let context = client::load_config()?.context(which.context.as_deref())?;
            let from = context.ca.clone().filter(|c| !c.trim_start().starts_with("-----BEGIN"));
            let pem = context.ca_pem()?.ok_or_else(|| {
                anyhow!(
                    "the context pins no CA (its server is plain HTTP, or none is set); pass --ca FILE, \
                     e.g. <data>/tls/ca.pem of the server"
                )
            })?;
            (pem, from.unwrap_or_else(|| format!("the client config {}", client::path_text())))
        }
    };
    let der = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| anyhow!("{from} holds no PEM certificate: {e}"))?;
    let spki = gantry_server::tls::spki_sha256_base64(&der)
        .ok_or_else(|| anyhow!("{from} holds a certificate that cannot be read"))?;
    Ok((Ca { pem, sha256: gantry_server::tls::sha256_hex(&der), spki }, from))
}

fn show(which: &Which) -> anyhow::Result<()> {
    let (ca, from) = load(which)?;
    println!("file:    {from}");
    println!("sha256:  {}", ca.sha256);
    println!("spki:    {}  (chromium --ignore-certificate-errors-spki-list={})", ca.spki, ca.spki);
    Ok(())
}

fn install(args: &InstallArgs) -> anyhow::Result<()> {
    let (ca, from) = load(&args.which)?;
    println!("cluster CA from {from}, sha256 {}", ca.sha256);
    let mut done = 0;
    if !args.no_system {
        done += usize::from(system(&ca, args.dry_run)?);
    }
    if !args.no_nss {
        done += usize::from(nss(&ca, args.nss_db.as_deref(), args.dry_run)?);
    }
    if done == 0 && !args.dry_run {
        bail!("nothing was installed (see the notes above)");
    }
    Ok(())
}

/// A system trust store: where anchors go and the command that rebuilds the bundle.
const SYSTEM_STORES: [(&str, &str); 2] = [
    ("/usr/local/share/ca-certificates", "update-ca-certificates"),
    ("/etc/pki/ca-trust/source/anchors", "update-ca-trust"),
];

/// Adds the CA to the system store; false (with a note) when this system has none we know.
fn system(ca: &Ca, dry_run: bool) -> anyhow::Result<bool> {
    let found = SYSTEM_STORES.iter().find(|(dir, tool)| Path::new(dir).is_dir() && on_path(tool).is_some());
    let Some((dir, tool)) = found else {
        println!("note: no system trust store known here (update-ca-certificates, update-ca-trust); skipped");
        return Ok(false);
    };
    let file = Path::new(dir).join(format!("gantry-{}.crt", ca.short()));
    if dry_run {
        println!("would write {} and run {tool}", file.display());
        return Ok(true);
    }
    std::fs::write(&file, &ca.pem).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (the system store needs root: run `sudo gantry ca install --no-nss --ca FILE`, or pass --no-system)"
        } else {
            ""
        };
        anyhow!("cannot write {}: {e}{hint}", file.display())
    })?;
    let status = Command::new(tool).status().with_context(|| format!("cannot run {tool}"))?;
    if !status.success() {
        bail!("{tool} failed ({status}); {} is written", file.display());
    }
    println!("system store: wrote {} and ran {tool}", file.display());
    Ok(true)
}

/// Adds the CA to an NSS database; false (with a note) when `certutil` is missing.
fn nss(ca: &Ca, db: Option<&Path>, dry_run: bool) -> anyhow::Result<bool> {
    let db = match db {
        Some(db) => db.to_owned(),
        None => home()?.join(".pki/nssdb"),
    };
    let Some(certutil) = on_path("certutil") else {
        println!(
            "note: certutil is not installed (Debian: apt-get install libnss3-tools); the NSS database {} is unchanged",
            db.display()
        );
        return Ok(false);
    };
    let name = format!("Gantry cluster CA {}", ca.short());
    let target = format!("sql:{}", db.display());
    if dry_run {
        println!("would run: certutil -d {target} -A -t C,, -n {name:?} -i CA.pem");
        return Ok(true);
    }
    if !db.join("cert9.db").exists() {
        create_private_dir(&db)?;
        run_certutil(&certutil, &["-d", &target, "-N", "--empty-password"])?;
    }
    let file = std::env::temp_dir().join(format!("gantry-ca-{}-{}.pem", std::process::id(), ca.short()));
    std::fs::write(&file, &ca.pem).with_context(|| format!("cannot write {}", file.display()))?;
    let added = run_certutil(
        &certutil,
        &["-d", &target, "-A", "-t", "C,,", "-n", &name, "-i", &file.display().to_string()],
    );
    let _ = std::fs::remove_file(&file);
    added?;
    println!("NSS database {}: added {name:?} (Chromium reads it at its next start)", db.display());
    Ok(true)
}

fn run_certutil(certutil: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(certutil).args(args).output().context("cannot run certutil")?;
    if !out.status.success() {
        bail!("certutil {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}
