//! The Unix users jobs run as.
//!
//! A job must not run as the agent: the agent (root, on a real node) can read the store, the
//! join token and every other job's output. So a root agent runs each attempt as an unprivileged
//! user chosen by the job's team: by default the team's own user ([`super::team_user`]), which
//! the agent creates the first time the team has a job on the node. Users are looked up with
//! `id(1)` rather than by reading `/etc/passwd`, so users from LDAP or other NSS sources work,
//! and without calling `getpwnam` (not thread-safe, and unsafe code for little gain).

use std::process::Command;

use super::error::AgentError;
use super::team_user;

/// The one user every team's jobs ran as before each team had its own; `--job-user
/// '*=gantry-job'` brings it back (and the agent creates it if missing).
pub const SHARED_JOB_USER: &str = "gantry-job";

/// A user a job can run as, resolved once (at start-up, or at its team's first job on the node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Login name (`USER`, `LOGNAME`).
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// All the user's groups; the job gets these and no others.
    pub groups: Vec<u32>,
}

/// The user this process runs as (named by its uid when it has no name, as in some
/// containers).
pub fn current() -> Result<Identity, AgentError> {
    let mut me = lookup(None)?;
    me.name = id(&["-un"]).unwrap_or_else(|_| me.uid.to_string());
    Ok(me)
}

/// Looks `name` up.
pub fn resolve(name: &str) -> Result<Identity, AgentError> {
    lookup(Some(name))
}

/// `id` of `user`, or of this process.
fn lookup(user: Option<&str>) -> Result<Identity, AgentError> {
    let ask = |flag: &str| id(&[Some(flag), user].into_iter().flatten().collect::<Vec<_>>());
    let number = |text: &str| -> Result<u32, AgentError> {
        text.parse().map_err(|_| sandbox_error(format!("id(1) printed `{text}` for a number")))
    };
    let groups = ask("-G")?.split_whitespace().map(number).collect::<Result<Vec<u32>, _>>()?;
    let name = user.unwrap_or_default().to_owned();
    Ok(Identity { name, uid: number(&ask("-u")?)?, gid: number(&ask("-g")?)?, groups })
}

/// The user of `team`'s jobs ([`team_user::name`]), created on first use. An existing user of
/// that name is used as it is (an admin may make team users beforehand, say to give them the
/// same uid on every node), unless an agent made it for another team: two team names whose
/// hashes agree in [`team_user::HASH_HEX`] digits must not share a user.
pub fn resolve_or_create_for_team(team: &str) -> Result<Identity, AgentError> {
    let name = team_user::name(team);
    let comment = team_user::comment(team);
    let found = resolve_or_create(&name, &comment)?;
    match gecos(&name) {
        Some(other) if other.starts_with(team_user::COMMENT_PREFIX) && other != comment => {
            Err(sandbox_error(format!(
                "the job user {name} was made for another team whose name hashes alike; \
                 map this team to a user of its own with --job-user"
            )))
        }
        _ => Ok(found),
    }
}

/// Looks `name` up, creating it as a system user with its own group, no home and no login shell
/// when it does not exist; `comment` goes in its GECOS field.
pub fn resolve_or_create(name: &str, comment: &str) -> Result<Identity, AgentError> {
    if let Ok(found) = resolve(name) {
        return Ok(found);
    }
    let shell = ["/usr/sbin/nologin", "/sbin/nologin", "/bin/false"]
        .into_iter()
        .find(|s| std::path::Path::new(s).exists())
        .unwrap_or("/bin/false");
    let created = Command::new("useradd")
        .args(["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", shell])
        .args(["--comment", comment, "--user-group", name])
        .output()
        .map_err(|e| sandbox_error(format!("cannot run useradd to create the job user {name}: {e}")))?;
    // Another agent may have created it meanwhile; the lookup below is what counts.
    resolve(name).map_err(|_| {
        let why = String::from_utf8_lossy(&created.stderr);
        sandbox_error(format!("cannot create the job user {name}: {}", why.trim()))
    })
}

/// The comment (GECOS) field of `name`'s entry, `None` when it has none or cannot be read.
fn gecos(name: &str) -> Option<String> {
    let out = Command::new("getent").args(["passwd", name]).output().ok()?;
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    out.status.success().then(|| line.trim_end().split(':').nth(4).map(str::to_owned))?
}

fn id(args: &[&str]) -> Result<String, AgentError> {
    let out = Command::new("id")
        .args(args)
        .output()
        .map_err(|e| sandbox_error(format!("cannot run id(1): {e}")))?;
    if !out.status.success() {
        let who = args.last().copied().unwrap_or_default();
        return Err(sandbox_error(format!("no such user: {who}")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn sandbox_error(why: String) -> AgentError {
    AgentError::Sandbox(why)
}

/// The agent's own user id (a job with no user of its own runs as it).
#[allow(unsafe_code)] // reason: geteuid(2) has no wrapper in std.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The agent's own group id.
#[allow(unsafe_code)] // reason: getegid(2) has no wrapper in std.
pub fn current_gid() -> u32 {
    // SAFETY: getegid takes no arguments and cannot fail.
    unsafe { libc::getegid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_resolves_to_uid_zero() {
        let root = resolve("root").expect("root exists");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
    }

    #[test]
    fn an_unknown_user_is_an_error_naming_it() {
        let err = resolve("no-such-user-gantry").expect_err("unknown");
        assert!(err.to_string().contains("no-such-user-gantry"), "{err}");
    }

    #[test]
    fn the_current_user_is_found() {
        let me = current().expect("current user");
        assert!(!me.name.is_empty());
    }
}
