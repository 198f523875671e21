//! Access control from the command line: the admin token never reaches the terminal, files are
//! private, tokens are listed and revoked, and `gantry audit verify` catches a tampered row.

use std::os::unix::fs::PermissionsExt;

use crate::harness::{Cluster, command};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
fn up_keeps_the_admin_token_off_the_terminal_and_its_files_private() {
    let cluster = Cluster::start(&["--no-agent"]);
    let printed = std::fs::read_to_string(cluster.home.path().join("up.log")).expect("up output");
    assert!(!printed.contains(&cluster.token()), "the admin token was printed:\n{printed}");
    assert!(printed.contains("config.toml"), "says where the token is:\n{printed}");
    assert_eq!(mode(&cluster.data_dir()), 0o700);
    assert_eq!(mode(&cluster.data_dir().join("gantry.db")), 0o600);
    assert_eq!(mode(&cluster.home.path().join(".config/gantry/config.toml")), 0o600);
}

#[test]
fn a_client_config_that_existed_with_loose_permissions_is_made_private() {
    let home = tempfile::tempdir().expect("home");
    let config = home.path().join(".config/gantry/config.toml");
    std::fs::create_dir_all(config.parent().expect("dir")).expect("mkdir");
    std::fs::write(&config, "").expect("write");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut up = command(home.path())
        .args(["up", "--no-agent", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(home.path().join("data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start");
    crate::harness::eventually(std::time::Duration::from_secs(20), "the config to be written", || {
        std::fs::read_to_string(&config).ok().filter(|t| t.contains("token")).map(drop)
    });
    let _ = up.kill();
    let _ = up.wait();
    assert_eq!(mode(&config), 0o600);
}

#[test]
fn tokens_are_listed_without_secrets_and_a_revoked_one_stops_working() {
    let cluster = Cluster::start(&["--no-agent"]);
    let secret = cluster.gantry(&["token", "create", "--team", "vision", "--ttl", "2d"]).trim().to_owned();
    let as_vision =
        |args: &[&str]| command(cluster.home.path()).env("GANTRY_TOKEN", &secret).args(args).output();
    assert!(as_vision(&["jobs"]).expect("run").status.success());
    let listed = cluster.gantry(&["token", "list", "-o", "json"]);
    assert!(!listed.contains(&secret) && !listed.contains("hash"), "{listed}");
    let tokens: Vec<serde_json::Value> = serde_json::from_str(&listed).expect("json");
    let id = tokens.iter().find(|t| t["user"] == "vision").expect("vision's token")["id"].to_string();
    cluster.gantry(&["token", "revoke", &id]);
    let out = as_vision(&["jobs"]).expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("revoked"), "{out:?}");
    let bad = cluster.try_gantry(&["token", "create", "--team", "vision", "--ttl", "3 weeks"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--ttl"));
}

#[test]
fn audit_verify_passes_on_a_real_history_and_fails_after_one_byte_of_one_row_changes() {
    let cluster = Cluster::start(&[]);
    cluster.gantry(&["submit", "--", "true"]);
    cluster.gantry(&["token", "create", "--team", "vision"]);
    let _ = cluster.try_gantry(&["cancel", "424242"]);
    let table = cluster.gantry(&["audit"]);
    for action in ["job.submit", "token.create", "user.set", "node.register", "job.cancel"] {
        assert!(table.contains(action), "{action} missing:\n{table}");
    }
    let ok = cluster.gantry(&["audit", "verify"]);
    assert!(ok.contains("intact"), "{ok}");
    let db = rusqlite::Connection::open(cluster.data_dir().join("gantry.db")).expect("db");
    let changed = db.execute("UPDATE audit SET target = 'job/2' WHERE target = 'job/1'", []).expect("tamper");
    assert_eq!(changed, 1);
    let out = cluster.try_gantry(&["audit", "verify"]);
    assert!(!out.status.success(), "verify passed a tampered log");
    assert!(String::from_utf8_lossy(&out.stderr).contains("was changed"), "{out:?}");
}

/// A member's job can carry escape sequences in its command line; before, `gantry job` printed
/// them raw to whoever looked (an admin, a teammate), so the job could retitle their terminal,
/// clear it, hide text or (OSC 52) write their clipboard.
#[test]
fn control_characters_in_a_job_reach_no_terminal_raw() {
    let cluster = Cluster::start(&["--no-agent"]);
    let hostile = "\u{1b}]52;c;ZWNobyBwd25lZA==\u{7}\u{1b}[2J\u{1b}]0;PWNED\u{7}";
    cluster.gantry(&["submit", "--wait-for-capacity", "--", "echo", hostile, "x\u{9b}31m"]);
    cluster.gantry(&["submit", "--wait-for-capacity", "--name", "safe\u{202e}gpj.exe", "--", "true"]);
    for args in [&["job", "1"][..], &["job", "2"][..], &["jobs"][..]] {
        let out = cluster.gantry(args);
        let raw = ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'];
        assert!(!out.contains(raw), "{args:?} printed a control character: {out:?}");
    }
    let shown = cluster.gantry(&["job", "1"]);
    assert!(shown.contains(r"\u{1b}]52;c;"), "the escape is shown, escaped: {shown}");
}

#[test]
fn a_job_with_a_65530_byte_program_name_leaves_gantry_jobs_and_gantry_audit_working() {
    // Before, the long cell made `format!` panic (`table.rs:34: Formatting argument out of
    // range`) for everyone who could see the job, admins included.
    let cluster = Cluster::start(&["--no-agent"]);
    let program = format!("/opt/{}", "p".repeat(65_525));
    assert_eq!(program.len(), 65_530);
    cluster.gantry(&["submit", "--wait-for-capacity", "--", &program]);
    let jobs = cluster.gantry(&["jobs"]);
    assert!(jobs.contains('…'), "the long cell is cut:\n{}", &jobs[..jobs.len().min(2000)]);
    assert!(jobs.lines().all(|l| l.chars().count() < 2000), "no line carries the whole name");
    let audit = cluster.gantry(&["audit"]);
    assert!(audit.contains("job.submit"), "{audit}");
    assert!(cluster.try_gantry(&["job", "1"]).status.success());
}

#[test]
fn gantry_user_set_creates_and_re_roles_a_user_and_gantry_users_lists_them() {
    let cluster = Cluster::start(&["--no-agent"]);
    cluster.gantry(&["user", "set", "bob", "--team", "vision", "--role", "viewer"]);
    cluster.gantry(&["user", "set", "bob", "--role", "member"]);
    let users: Vec<serde_json::Value> =
        serde_json::from_str(&cluster.gantry(&["users", "-o", "json"])).expect("users json");
    let bob = users.iter().find(|u| u["name"] == "bob").expect("bob listed");
    assert_eq!(
        (bob["role"].as_str(), bob["teams"].clone()),
        (Some("member"), serde_json::json!(["vision"])),
        "{bob}"
    );
    let table = cluster.gantry(&["users"]);
    assert!(table.lines().any(|l| l.starts_with("bob ") && l.contains("vision")), "{table}");
    let bad = cluster.try_gantry(&["user", "set", "bob", "--role", "emperor"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("not a role"), "{bad:?}");
}
