//! The cache's rules: an entry appears only whole, LRU eviction spares what jobs use, and the
//! limits refuse what cannot fit.

use super::*;

fn config(size: u64, quota: u64) -> CacheConfig {
    CacheConfig { size_bytes: size, team_quota_bytes: quota }
}

fn put(c: &Cache, team: &str, url: &str, bytes: usize) -> Result<PathBuf, CacheError> {
    let dir = c.team_dir(team, None)?;
    let room = c.reserve(team, bytes as u64)?;
    let tmp = c.tmp_path(&dir, url, "v1");
    std::fs::write(&tmp, vec![7u8; bytes]).expect("write");
    c.commit(room, team, url, "v1", &tmp, bytes as u64)
}

#[test]
fn an_entry_is_found_by_team_source_and_version_and_is_read_only() {
    let root = tempfile::tempdir().expect("tmp");
    let c = Cache::open(&root.path().join("cache"), config(1000, 1000)).expect("open");
    let path = put(&c, "ml", "s3://bucket/a", 10).expect("put");
    assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o444);
    assert_eq!(c.lookup("ml", "s3://bucket/a", "v1").map(|f| f.1), Some(10));
    assert!(c.lookup("ml", "s3://bucket/a", "v2").is_none(), "another version is another entry");
    assert!(c.lookup("cv", "s3://bucket/a", "v1").is_none(), "another team's entry is not shared");
    let e = c.entries();
    assert_eq!((e.len(), e[0].hits, e[0].bytes), (1, 1, 10));
    // Reopened, the entry is there; a copy left unfinished is removed.
    let dir = c.team_dir("ml", None).expect("dir");
    std::fs::write(dir.join(".tmp-leftover"), b"half").expect("tmp");
    let again = Cache::open(&root.path().join("cache"), config(1000, 1000)).expect("reopen");
    assert_eq!(again.entries().len(), 1);
    assert!(!dir.join(".tmp-leftover").exists());
}

#[test]
fn the_least_recently_used_entry_not_in_use_is_evicted_and_what_cannot_fit_is_refused() {
    let root = tempfile::tempdir().expect("tmp");
    let c = Cache::open(root.path(), config(100, 60)).expect("open");
    put(&c, "ml", "s3://bucket/old", 40).expect("old");
    put(&c, "ml", "s3://bucket/used", 20).expect("used");
    c.pin("ml", "s3://bucket/used", "v1");
    // The team's quota (60) makes room by evicting its oldest unused entry.
    put(&c, "ml", "s3://bucket/new", 30).expect("new");
    let urls: Vec<String> = c.entries().into_iter().map(|e| e.url).collect();
    assert_eq!(urls, ["s3://bucket/new", "s3://bucket/used"]);
    // In use and the rest of the quota taken: refused, nothing evicted that a job reads.
    let err = c.reserve("ml", 50).expect_err("no room");
    assert!(err.to_string().contains("in use hold the room"), "{err}");
    assert!(c.reserve("ml", 61).expect_err("over quota").to_string().contains("over the cache's limits"));
    c.unpin("ml", "s3://bucket/used", "v1");
    assert!(c.reserve("ml", 50).is_ok());
}
