//! Staging from `file://` sources (storage the nodes mount): copied once, found again, a
//! failing source retried with nothing partial left as cached.

use std::sync::Arc;

use gantry_api::inputs::{Input, StageOrder};

use super::*;
use crate::runner::cache::{Cache, CacheConfig};
use crate::runner::sandbox::{Sandbox, SandboxConfig};

fn stager(root: &std::path::Path, config: CacheConfig) -> Arc<Stager> {
    // As root, every team runs as `nobody` here: no team user is made for the test.
    let job_users = if crate::runner::sandbox::running_as_root() {
        [("*".to_owned(), "nobody".to_owned())].into()
    } else {
        Default::default()
    };
    let sandbox_config = SandboxConfig { work_dir: root.join("work"), job_users, ..SandboxConfig::default() };
    let sandbox = Arc::new(Sandbox::build(&sandbox_config, &root.join("state")).expect("sandbox"));
    let cache = Cache::open(&sandbox.cache_root(), config).expect("cache");
    Arc::new(Stager::new(Arc::new(cache), sandbox))
}

fn order(job_id: i64, url: &str) -> StageOrder {
    StageOrder {
        job_id,
        team: "ml".into(),
        inputs: vec![Input::new("data", url)],
        secret: Default::default(),
        public: Vec::new(),
        image: None,
        registry_login: None,
    }
}

fn assignment(job_id: i64, url: &str) -> gantry_api::types::Assignment {
    let job = gantry_api::model::Job {
        id: job_id,
        team: "ml".into(),
        inputs: vec![Input::new("data", url)],
        ..Default::default()
    };
    job.into()
}

/// A scratch directory every user may enter: a file:// input copies only what any user of the
/// node may read.
fn readable_tmp() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

async fn until_done(s: &Stager, job: i64) -> gantry_api::inputs::StageReport {
    for _ in 0..200 {
        let r = s.reports().into_iter().find(|r| r.job_id == job).expect("listed");
        if r.done {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("not staged");
}

#[tokio::test]
async fn a_file_input_is_staged_once_and_the_second_job_finds_it_cached() {
    let root = readable_tmp();
    let data = root.path().join("shared/data");
    std::fs::create_dir_all(data.join("sub")).expect("dirs");
    std::fs::write(data.join("a.bin"), vec![1u8; 3000]).expect("a");
    std::fs::write(data.join("sub/b.bin"), vec![2u8; 1000]).expect("b");
    let s = stager(root.path(), CacheConfig::default());
    let url = format!("file://{}", data.display());
    s.apply(vec![order(1, &url)]);
    let first = until_done(&s, 1).await;
    assert_eq!((first.bytes_done, first.inputs[0].cache_hit), (4000, Some(false)));
    s.apply(vec![order(1, &url), order(2, &url)]);
    let second = until_done(&s, 2).await;
    assert_eq!((second.inputs[0].bytes, second.inputs[0].cache_hit), (Some(4000), Some(true)));
    // The order is no longer listed (the job was placed): its start still finds the copy.
    s.apply(vec![]);
    let a = assignment(1, &url);
    let env = s.inputs_for(&a, &Default::default()).await.expect("inputs");
    assert_eq!(env[0].0, "GANTRY_INPUT_DATA");
    let copied = std::path::Path::new(&env[0].1);
    assert_eq!(std::fs::read(copied.join("sub/b.bin")).expect("b"), vec![2u8; 1000]);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!((mode(copied), mode(&copied.join("a.bin"))), (0o555, 0o444), "read-only");
    assert_eq!(s.cache().entries()[0].in_use, 1);
    s.release(1);
    assert_eq!(s.cache().entries()[0].in_use, 0);
}

#[tokio::test]
async fn a_failing_source_is_reported_and_retried_and_leaves_nothing_cached() {
    let root = readable_tmp();
    let s = stager(root.path(), CacheConfig { size_bytes: 1000, team_quota_bytes: 1000 });
    let big = root.path().join("big");
    std::fs::write(&big, vec![0u8; 2000]).expect("big");
    s.apply(vec![order(1, &format!("file://{}", big.display())), order(2, "file:///nonexistent/x")]);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let reports = s.reports();
    assert!(reports.iter().all(|r| !r.done), "{reports:?}");
    assert!(
        reports[0].error.as_deref().is_some_and(|e| e.contains("over the cache's limits")),
        "{reports:?}"
    );
    assert!(reports[1].error.as_deref().is_some_and(|e| e.contains("No such file")), "{reports:?}");
    assert!(s.cache().entries().is_empty());
    let team_dir = std::fs::read_dir(s.cache().team_dir("ml", None).expect("dir")).expect("read");
    assert_eq!(team_dir.count(), 0, "no partial copy");
    // The source appears: the next try stages it.
    std::fs::write(&big, vec![0u8; 500]).expect("smaller");
    let r = until_done(&s, 1).await;
    assert_eq!(r.bytes_done, 500);
}

#[tokio::test]
async fn a_public_source_is_cached_once_for_every_team_and_a_private_one_once_per_team() {
    let root = readable_tmp();
    let (public, private) = (root.path().join("shared/public"), root.path().join("shared/private"));
    std::fs::create_dir_all(root.path().join("shared")).expect("dirs");
    std::fs::write(&public, vec![1u8; 1000]).expect("public");
    std::fs::write(&private, vec![2u8; 700]).expect("private");
    let s = stager(root.path(), CacheConfig::default());
    let (public, private) = (format!("file://{}", public.display()), format!("file://{}", private.display()));
    let of = |job_id: i64, team: &str, url: &str, is_public: bool| StageOrder {
        team: team.into(),
        public: if is_public { vec!["data".into()] } else { vec![] },
        ..order(job_id, url)
    };

    s.apply(vec![of(1, "vision", &public, true)]);
    assert_eq!(until_done(&s, 1).await.inputs[0].cache_hit, Some(false));
    s.apply(vec![of(1, "vision", &public, true), of(2, "nlp", &public, true)]);
    assert_eq!(until_done(&s, 2).await.inputs[0].cache_hit, Some(true), "another team's job: a hit");
    let entries = s.cache().entries();
    assert_eq!(entries.len(), 1, "one copy: {entries:?}");
    assert_eq!((entries[0].team.as_str(), entries[0].hits), (PUBLIC_SCOPE, 1));
    use std::os::unix::fs::PermissionsExt;
    let dir = s.cache().team_dir(PUBLIC_SCOPE, None).expect("dir");
    assert_eq!(std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777, 0o755);
    // A job started without staging ahead (a gang's other worker) finds the public copy too.
    let env = s.inputs_for(&assignment(3, &public), &Default::default()).await.expect("inputs");
    assert!(env[0].1.starts_with(&dir.display().to_string()), "{env:?}");
    assert_eq!(s.cache().entries()[0].in_use, 1);
    s.release(3);
    assert_eq!(s.cache().entries()[0].in_use, 0);

    // The same without the mark: one copy per team, each in its own team's directory.
    s.apply(vec![of(4, "vision", &private, false), of(5, "nlp", &private, false)]);
    let (a, b) = (until_done(&s, 4).await, until_done(&s, 5).await);
    assert_eq!(
        (a.inputs[0].cache_hit, b.inputs[0].cache_hit),
        (Some(false), Some(false)),
        "no cross-team hit"
    );
    let mut teams: Vec<String> =
        s.cache().entries().into_iter().filter(|e| e.url == private).map(|e| e.team).collect();
    teams.sort();
    assert_eq!(teams, ["nlp", "vision"], "two copies");
    let vision = s.cache().team_dir("vision", None).expect("dir");
    assert_eq!(std::fs::metadata(&vision).expect("meta").permissions().mode() & 0o777, 0o750);
}
