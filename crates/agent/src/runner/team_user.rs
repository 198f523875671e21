//! The Unix user name of a team's jobs: one user per team, so that a job of one team cannot
//! read another team's `/proc/<pid>/environ`, signal or `ptrace` its processes, or enter its
//! work directory.
//!
//! The name is derived from the team alone, so every node and every restart of an agent
//! arrives at the same user for the same team, and two teams never share one:
//!
//! - a team whose name is already a valid user name part (only `a-z`, `0-9`, `_` and `-`, at
//!   most [`PLAIN_MAX`] characters, no `--`) runs as `gantry-t-<team>`;
//! - any other team runs as `gantry-t-<clean>--<hash>`: `<clean>` is the name lowercased, every
//!   other character turned into `-`, runs of `-` squeezed and trimmed, cut to [`CLEAN_MAX`]
//!   characters; `<hash>` is the first [`HASH_HEX`] hex digits of the SHA-256 of the exact team
//!   name.
//!
//! A hashed name always holds `--` after the prefix and a plain one never does, so a plain name
//! cannot equal a hashed one; two plain names differ where their teams differ; two hashed names
//! are equal only when 40 bits of SHA-256 are. That last case cannot be ruled out by a name of
//! at most 32 characters, so the agent writes the full hash of the team into the user's comment
//! ([`comment`]) when it creates the user, and refuses a user made for another team.
//! Every name matches `[a-z_][a-z0-9_-]{0,31}` (it starts with `g`).

use sha2::{Digest, Sha256};

/// What every team user's name starts with.
pub const PREFIX: &str = "gantry-t-";
/// The longest Linux user name `useradd` accepts.
pub const NAME_MAX: usize = 32;
/// The longest team name used as it is.
pub const PLAIN_MAX: usize = NAME_MAX - PREFIX.len();
/// Hex digits of the team's hash in a hashed name.
pub const HASH_HEX: usize = 10;
/// The longest cleaned part of a hashed name (the rest is `--` and the hash).
pub const CLEAN_MAX: usize = PLAIN_MAX - 2 - HASH_HEX;

/// The user `team`'s jobs run as.
pub fn name(team: &str) -> String {
    if is_plain(team) {
        return format!("{PREFIX}{team}");
    }
    let hash = sha256_hex(team);
    format!("{PREFIX}{}--{}", clean(team), &hash[..HASH_HEX])
}

/// A directory name for `name` (a team's or user's): itself when it is a plain name (letters,
/// digits, `-`, `_`, `.`, `@`; not `.` or `..`), else cleaned and suffixed with its hash, so
/// that no name leaves the directory it is joined to and two names never share one.
pub fn path_part(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= PLAIN_MAX
        && name != "."
        && name != ".."
        && !name.contains("--")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
    if plain {
        return name.to_owned();
    }
    format!("{}--{}", clean(name), &sha256_hex(name)[..HASH_HEX])
}

/// The comment (`/etc/passwd` GECOS field) of the user made for `team`: it names the team by
/// its full hash, since a team name may hold characters the field cannot (`:`, newlines).
pub fn comment(team: &str) -> String {
    format!("{COMMENT_PREFIX}{}", sha256_hex(team))
}

/// What [`comment`] starts with: a user whose comment starts so was made by an agent.
pub const COMMENT_PREFIX: &str = "gantry team sha256=";

fn is_plain(team: &str) -> bool {
    !team.is_empty()
        && team.len() <= PLAIN_MAX
        && !team.contains("--")
        && team.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `team` lowercased, other characters as `-`, `-` runs squeezed, trimmed and cut.
fn clean(team: &str) -> String {
    let mut out = String::new();
    for c in team.chars().map(|c| c.to_ascii_lowercase()) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' { c } else { '-' };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
            out.push(c);
        }
    }
    out.truncate(CLEAN_MAX);
    out.trim_end_matches('-').to_owned()
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_team_name_is_kept() {
        assert_eq!(name("vision"), "gantry-t-vision");
        assert_eq!(name("ml_ops-2"), "gantry-t-ml_ops-2");
        assert_eq!(name(&"a".repeat(PLAIN_MAX)).len(), NAME_MAX);
    }

    #[test]
    fn other_names_are_cleaned_and_hashed() {
        let upper = name("Vision");
        assert!(upper.starts_with("gantry-t-vision--"), "{upper}");
        assert_ne!(upper, name("vision"));
        assert!(name("a--b").starts_with("gantry-t-a-b--"), "{}", name("a--b"));
        assert!(name("日本").starts_with("gantry-t---"), "{}", name("日本"));
        let long = name(&"a".repeat(PLAIN_MAX + 1));
        assert_eq!(long.len(), NAME_MAX, "{long}");
        assert_ne!(long, name(&"a".repeat(PLAIN_MAX + 2)));
    }

    fn is_valid_user_name(name: &str) -> bool {
        let mut bytes = name.bytes();
        let first = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
        let rest = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        first && rest && name.len() <= NAME_MAX
    }

    proptest::proptest! {
        /// Team names from a small alphabet of look-alikes (case, `-` runs, `.`, spaces,
        /// non-ASCII) and lengths around the limits: distinct teams get distinct valid users.
        #[test]
        fn distinct_teams_get_distinct_valid_user_names(
            teams in proptest::collection::hash_set("[aAbB_.\\- é0]{0,40}", 1..200),
        ) {
            let mut seen = std::collections::HashMap::new();
            for team in &teams {
                let user = name(team);
                proptest::prop_assert!(is_valid_user_name(&user), "{team:?} -> {user:?}");
                if let Some(other) = seen.insert(user.clone(), team.clone()) {
                    proptest::prop_assert!(false, "{team:?} and {other:?} both -> {user:?}");
                }
            }
        }
    }

    #[test]
    fn the_comment_names_the_exact_team() {
        assert_ne!(comment("Vision"), comment("vision"));
        assert!(!comment("a:b\nc").contains([':', '\n']));
    }
}
