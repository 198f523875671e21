//! Global flags before the subcommand, as kubectl takes them: `gantry --server URL jobs`.
//!
//! The client flags (`--server`, `--token`, `--context`, `--ca`) belong to each client
//! subcommand (they are flattened into its arguments), so clap reads them only after it. Rather
//! than declare them twice, [`hoist`] moves those that come before the subcommand to just after
//! the innermost subcommand name (`gantry --context lab team set vision` →
//! `gantry team set --context lab vision`), where that subcommand's parser takes them; a
//! subcommand without them (`sim`) refuses them there with clap's own sentence.

use std::ffi::{OsStr, OsString};

/// The flags that may come before the subcommand; each takes a value.
const GLOBAL: [&str; 4] = ["--server", "--token", "--context", "--ca"];

/// `args` (the program name first) with the global flags found before the subcommand moved
/// after it; unchanged when there are none (then `command`, which builds clap's whole command
/// tree, is not called).
pub fn hoist(args: Vec<OsString>, command: impl FnOnce() -> clap::Command) -> Vec<OsString> {
    let mut rest = args.into_iter();
    let mut out: Vec<OsString> = rest.next().into_iter().collect();
    let mut globals = Vec::new();
    let mut rest = rest.peekable();
    while let Some(arg) = rest.next_if(|a| is_global(a)) {
        let inline = arg.to_str().is_some_and(|a| a.contains('='));
        globals.push(arg);
        if !inline && let Some(value) = rest.next() {
            globals.push(value);
        }
    }
    if globals.is_empty() {
        out.extend(rest);
        return out;
    }
    // Descend through the subcommand names that follow.
    let command = command();
    let mut current = &command;
    while let Some(arg) =
        rest.next_if(|a| a.to_str().is_some_and(|name| current.find_subcommand(name).is_some()))
    {
        let name = arg.to_str().unwrap_or_default().to_owned();
        out.push(arg);
        match current.find_subcommand(&name) {
            Some(sub) => current = sub,
            None => break,
        }
    }
    out.extend(globals);
    out.extend(rest);
    out
}

fn is_global(arg: &OsStr) -> bool {
    arg.to_str().is_some_and(|a| {
        GLOBAL.iter().any(|g| a == *g || a.strip_prefix(g).is_some_and(|v| v.starts_with('=')))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("gantry")
            .subcommand(clap::Command::new("jobs"))
            .subcommand(clap::Command::new("team").subcommand(clap::Command::new("set")))
    }

    fn hoisted(args: &[&str]) -> Vec<String> {
        let args = args.iter().map(OsString::from).collect();
        hoist(args, command).into_iter().map(|a| a.into_string().unwrap_or_default()).collect()
    }

    #[test]
    fn flags_before_the_subcommand_move_after_it() {
        assert_eq!(
            hoisted(&["gantry", "--server", "http://h:7070", "jobs", "--state", "running"]),
            ["gantry", "jobs", "--server", "http://h:7070", "--state", "running"]
        );
    }

    #[test]
    fn flags_move_after_the_innermost_subcommand_and_keep_their_inline_values() {
        assert_eq!(
            hoisted(&["gantry", "--context=lab", "--token", "t", "team", "set", "vision"]),
            ["gantry", "team", "set", "--context=lab", "--token", "t", "vision"]
        );
    }

    #[test]
    fn a_command_line_without_global_flags_first_is_left_alone() {
        let args = ["gantry", "jobs", "--server", "x"];
        assert_eq!(hoisted(&args), args);
        assert_eq!(hoisted(&["gantry", "--help"]), ["gantry", "--help"]);
        assert_eq!(hoisted(&["gantry", "--servers", "x"]), ["gantry", "--servers", "x"]);
    }
}
