//! Pod names for pod UIDs, from the kubelet's log directory instead of the API server.
//!
//! A process's cgroup gives its pod UID (see [`super::pods`]); naming the pod needs a map from
//! UID to namespace and name. The API server has it, but read access to pods cannot be limited
//! to one node's pods by RBAC, so every node would read every pod in the cluster. The kubelet
//! already writes what is needed on the node itself: `/var/log/pods/<namespace>_<pod>_<uid>/`,
//! one subdirectory per container (namespace and pod names cannot contain `_`, so the split is
//! exact). Only directory names are read, never the logs.
//!
//! The container is best-effort: the kubelet's layout names containers but not their IDs. It is
//! known when the pod has a single container directory, or when the sibling directory
//! `/var/log/containers` (symlinks named `<pod>_<namespace>_<container>-<container id>.log`) can
//! be listed and holds the container ID found in the process's cgroup path. Otherwise the
//! process series gets `namespace` and `pod` without `container`.
//!
//! The listing is cached and read again only when a UID or container ID is asked for that it
//! does not hold, at most once per [`PodNames::min_refresh`] — never per scrape.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default least time between two listings of the directory.
pub const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(10);

/// A pod as its log directory names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Pod name.
    pub pod: Arc<str>,
    /// Container directories, sorted.
    pub containers: Vec<Arc<str>>,
}

/// `(namespace, pod, container)`; the container only when known.
pub type Resolved = (Arc<str>, Arc<str>, Option<Arc<str>>);

/// UID → pod names, from the kubelet's pod log directory.
#[derive(Debug)]
pub struct PodNames {
    dir: PathBuf,
    /// Least time between two listings.
    pub min_refresh: Duration,
    listed_at: Option<Instant>,
    by_uid: HashMap<String, PodName>,
    /// Container ID → (pod, namespace, container), from the sibling `containers` directory.
    by_container_id: HashMap<String, (String, String, Arc<str>)>,
}

impl PodNames {
    /// Reads `dir` (normally `/var/log/pods`) when first asked.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            min_refresh: DEFAULT_MIN_REFRESH,
            listed_at: None,
            by_uid: HashMap::new(),
            by_container_id: HashMap::new(),
        }
    }

    /// Namespace, pod and (when known) container of the process in pod `uid` whose cgroup names
    /// `container_id`; lists the directory again first if the answer is not cached and the last
    /// listing is at least `min_refresh` older than `now`.
    pub fn resolve(&mut self, uid: &str, container_id: Option<&str>, now: Instant) -> Option<Resolved> {
        let cached = self.by_uid.contains_key(uid)
            && container_id.is_none_or(|id| self.by_container_id.contains_key(id));
        let due = self.listed_at.is_none_or(|at| now.saturating_duration_since(at) >= self.min_refresh);
        if !cached && due {
            self.refresh(now);
        }
        let pod = self.by_uid.get(uid)?;
        let container = match container_id.and_then(|id| self.by_container_id.get(id)) {
            // The ID's entry must name this very pod and one of its containers.
            Some((p, ns, c)) if **p == *pod.pod && **ns == *pod.namespace && pod.containers.contains(c) => {
                Some(c.clone())
            }
            _ => match pod.containers.as_slice() {
                [only] => Some(only.clone()),
                _ => None,
            },
        };
        Some((pod.namespace.clone(), pod.pod.clone(), container))
    }

    /// Lists the directory (and its `containers` sibling); an unreadable directory leaves the
    /// map empty and is tried again after `min_refresh`.
    fn refresh(&mut self, now: Instant) {
        self.listed_at = Some(now);
        self.by_uid = list_pods(&self.dir);
        self.by_container_id =
            self.dir.parent().map(|p| list_containers(&p.join("containers"))).unwrap_or_default();
        tracing::debug!(pods = self.by_uid.len(), dir = %self.dir.display(), "listed the kubelet's pod log directory");
    }
}

fn names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
}

fn list_pods(dir: &Path) -> HashMap<String, PodName> {
    let mut out = HashMap::new();
    for entry in names(dir) {
        let mut parts = entry.splitn(3, '_');
        let (Some(namespace), Some(pod), Some(uid)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if namespace.is_empty() || pod.is_empty() || uid.is_empty() {
            continue;
        }
        let path = dir.join(&entry);
        let mut containers: Vec<Arc<str>> =
            names(&path).into_iter().filter(|c| path.join(c).is_dir()).map(Arc::from).collect();
        containers.sort();
        out.insert(
            uid.to_ascii_lowercase(),
            PodName { namespace: namespace.into(), pod: pod.into(), containers },
        );
    }
    out
}

/// `<pod>_<namespace>_<container>-<64 hex id>.log` → id → (pod, namespace, container).
fn list_containers(dir: &Path) -> HashMap<String, (String, String, Arc<str>)> {
    names(dir)
        .into_iter()
        .filter_map(|name| {
            let stem = name.strip_suffix(".log")?;
            let (rest, id) = stem.rsplit_once('-')?;
            let mut parts = rest.splitn(3, '_');
            let (pod, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
            (is_container_id(id) && !container.is_empty())
                .then(|| (id.to_owned(), (pod.to_owned(), namespace.to_owned(), Arc::from(container))))
        })
        .collect()
}

/// 64 lowercase hex digits (containerd, CRI-O and Docker IDs).
pub fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The container ID in the last segment of a pod cgroup path: `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `docker-<id>.scope` (systemd driver) or a bare `<id>` (cgroupfs).
pub fn container_id_from_segment(seg: &str) -> Option<&str> {
    let seg = seg.strip_suffix(".scope").unwrap_or(seg);
    let id = seg.rsplit('-').next()?;
    is_container_id(id).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab";
    const UID2: &str = "11111111-2222-3333-4444-555555555555";

    fn id(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    fn layout() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("tempdir");
        let pods = root.path().join("pods");
        for dir in [
            format!("ml_train-0_{UID}/trainer"),
            format!("ml_train-0_{UID}/sidecar"),
            format!("web_api-7_{UID2}/api"),
        ] {
            std::fs::create_dir_all(pods.join(dir)).expect("mkdir");
        }
        std::fs::write(pods.join(format!("ml_train-0_{UID}/trainer/0.log")), "x").expect("log");
        std::fs::create_dir_all(root.path().join("containers")).expect("mkdir");
        std::fs::write(
            root.path().join("containers").join(format!("train-0_ml_trainer-{}.log", id('a'))),
            "",
        )
        .expect("link");
        root
    }

    #[test]
    fn a_uid_names_its_namespace_and_pod_and_the_container_when_the_layout_tells() {
        let root = layout();
        let mut names = PodNames::new(root.path().join("pods"));
        let now = Instant::now();
        let (ns, pod, c) = names.resolve(UID, Some(&id('a')), now).expect("known");
        assert_eq!((&*ns, &*pod, c.as_deref()), ("ml", "train-0", Some("trainer")));
        // Two containers and an unknown ID: no container label rather than a guess.
        let (_, _, c) = names.resolve(UID, Some(&id('b')), now).expect("known");
        assert_eq!(c, None);
        // An ID whose entry names another pod is not believed.
        std::fs::write(root.path().join("containers").join(format!("api-7_web_trainer-{}.log", id('d'))), "")
            .expect("link");
        names.min_refresh = Duration::ZERO;
        let (_, _, c) = names.resolve(UID, Some(&id('d')), now).expect("known");
        assert_eq!(c, None);
        // One container: it is that one.
        let (ns, pod, c) = names.resolve(UID2, None, now).expect("known");
        assert_eq!((&*ns, &*pod, c.as_deref()), ("web", "api-7", Some("api")));
        assert_eq!(names.resolve("99999999-2222-3333-4444-555555555555", None, now), None);
    }

    #[test]
    fn an_unknown_uid_lists_again_but_not_more_than_once_per_min_refresh() {
        let root = layout();
        let mut names = PodNames::new(root.path().join("pods"));
        let t0 = Instant::now();
        let late = "22222222-2222-3333-4444-555555555555";
        assert_eq!(names.resolve(late, None, t0), None);
        std::fs::create_dir_all(root.path().join(format!("pods/ml_late_{late}/main"))).expect("mkdir");
        // Within min_refresh: the cached listing answers (nothing read per scrape).
        assert_eq!(names.resolve(late, None, t0 + Duration::from_secs(1)), None);
        let (_, pod, _) = names.resolve(late, None, t0 + DEFAULT_MIN_REFRESH).expect("listed again");
        assert_eq!(&*pod, "late");
    }

    #[test]
    fn container_ids_from_cgroup_segments() {
        let a = id('a');
        for seg in [
            format!("cri-containerd-{a}.scope"),
            format!("crio-{a}.scope"),
            format!("docker-{a}.scope"),
            a.clone(),
        ] {
            assert_eq!(container_id_from_segment(&seg), Some(a.as_str()), "{seg}");
        }
        assert_eq!(container_id_from_segment("cri-containerd-ab.scope"), None);
        assert_eq!(container_id_from_segment("session-3.scope"), None);
    }

    #[test]
    fn a_missing_directory_or_odd_names_give_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("pods/no-underscores")).expect("mkdir");
        std::fs::create_dir_all(root.path().join("pods/__")).expect("mkdir");
        let mut names = PodNames::new(root.path().join("pods"));
        assert_eq!(names.resolve(UID, None, Instant::now()), None);
        let mut names = PodNames::new("/nonexistent/var/log/pods");
        assert_eq!(names.resolve(UID, None, Instant::now()), None);
    }
}
