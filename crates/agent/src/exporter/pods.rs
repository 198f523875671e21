//! Kubernetes attribution: which pod holds a GPU and which pod a GPU process runs in.
//!
//! The exporter does not talk to Kubernetes itself (the agent depends on `api` and `gpu` only):
//! whoever runs it (the cli, with the kubelet's pod-resources `List`) publishes a [`PodMap`]
//! into a [`PodCell`] whenever the kubelet's answer changes, and each collection reads the
//! latest map — a scrape never waits on the kubelet.
//!
//! - A GPU series gets `pod`, `namespace` and `container` (dcgm-exporter's label names) when
//!   exactly one container holds the GPU; a GPU shared by several (time-slices, memory slices)
//!   gets none on its GPU series, because any choice would be wrong for the others.
//! - A process series gets `pod_uid` (dcgm-exporter's optional label) from its
//!   `/proc/<pid>/cgroup` (written by the kernel, not by the process), whatever the pod asked
//!   the kubelet for — pods that requested no GPU included. Pod-resources carries no UIDs;
//!   with the kubelet's pod log directory ([`super::pod_names`]) the series also gets
//!   `namespace`, `pod` and, where the layout tells, `container`.

use gantry_gpu::ProcessUsage;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use super::pod_names::{PodNames, container_id_from_segment};

/// A container in a pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
}

/// Who holds which GPU on this node, as the kubelet last said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMap {
    /// Holders per GPU UUID, sorted, without repeats.
    pub by_uuid: HashMap<String, Vec<PodRef>>,
    /// Holders per GPU index (device IDs that name a GPU by index), sorted, without repeats.
    pub by_index: HashMap<u32, Vec<PodRef>>,
}

impl PodMap {
    /// Records that `holder` holds the GPU `uuid`.
    pub fn add_uuid(&mut self, uuid: &str, holder: PodRef) {
        insert_sorted(self.by_uuid.entry(uuid.to_owned()).or_default(), holder);
    }

    /// Records that `holder` holds the GPU with index `index`.
    pub fn add_index(&mut self, index: u32, holder: PodRef) {
        insert_sorted(self.by_index.entry(index).or_default(), holder);
    }

    /// Every container holding GPU `index` / `uuid`, sorted, without repeats.
    pub fn holders(&self, index: u32, uuid: &str) -> Vec<&PodRef> {
        let mut out: Vec<&PodRef> =
            self.by_uuid.get(uuid).into_iter().chain(self.by_index.get(&index)).flatten().collect();
        out.sort();
        out.dedup();
        out
    }

    /// The single container holding the GPU, if exactly one does.
    pub fn sole_holder(&self, index: u32, uuid: &str) -> Option<&PodRef> {
        match self.holders(index, uuid).as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

fn insert_sorted(v: &mut Vec<PodRef>, holder: PodRef) {
    if let Err(at) = v.binary_search(&holder) {
        v.insert(at, holder);
    }
}

/// The latest [`PodMap`]; the refresher swaps it, each collection clones the `Arc`.
#[derive(Debug, Default)]
pub struct PodCell(RwLock<Arc<PodMap>>);

impl PodCell {
    /// An empty map (nothing attributed until the first refresh).
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest map.
    pub fn latest(&self) -> Arc<PodMap> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces the map; returns whether it changed.
    pub fn publish(&self, map: PodMap) -> bool {
        let mut guard = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if **guard == map {
            return false;
        }
        *guard = Arc::new(map);
        true
    }
}

/// The pod a GPU process runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPod {
    /// The pod's UID, from the process's cgroup.
    pub uid: Arc<str>,
    /// Namespace and pod name, when the kubelet's pod log directory names the UID.
    pub names: Option<(Arc<str>, Arc<str>)>,
    /// The container, when the log directory tells it (see [`super::pod_names`]).
    pub container: Option<Arc<str>>,
}

/// Pod UID and container ID from a cgroup file.
type CgroupPod = (Arc<str>, Option<String>);

/// Pods of GPU processes from `/proc/<pid>/cgroup` (remembered per pid), named from the
/// kubelet's pod log directory when one is given.
#[derive(Debug)]
pub struct PodUids {
    proc_root: PathBuf,
    cache: HashMap<u32, Option<CgroupPod>>,
    names: Option<PodNames>,
}

impl PodUids {
    /// Reads from `proc_root` (normally `/proc`); no pod names.
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self { proc_root: proc_root.into(), cache: HashMap::new(), names: None }
    }

    /// Also names pods from `names` (the kubelet's `/var/log/pods`).
    pub fn with_names(mut self, names: PodNames) -> Self {
        self.names = Some(names);
        self
    }

    /// The pod of each of `processes`, in order; pids no longer listed are forgotten so a
    /// reused pid is looked up afresh.
    pub fn lookup(&mut self, processes: &[ProcessUsage]) -> Vec<Option<ProcessPod>> {
        self.cache.retain(|pid, _| processes.iter().any(|p| p.pid == *pid));
        let now = Instant::now();
        processes
            .iter()
            .map(|p| {
                let root = &self.proc_root;
                let (uid, cid) = self
                    .cache
                    .entry(p.pid)
                    .or_insert_with(|| {
                        let text =
                            std::fs::read_to_string(root.join(p.pid.to_string()).join("cgroup")).ok()?;
                        let uid = pod_uid_from_cgroup(&text)?;
                        Some((Arc::from(uid), container_id_from_cgroup(&text).map(str::to_owned)))
                    })
                    .clone()?;
                let resolved = self.names.as_mut().and_then(|n| n.resolve(&uid, cid.as_deref(), now));
                let (names, container) = match resolved {
                    Some((ns, pod, container)) => (Some((ns, pod)), container),
                    None => (None, None),
                };
                Some(ProcessPod { uid, names, container })
            })
            .collect()
    }
}

/// The container ID in `/proc/<pid>/cgroup`: the segment right after the pod's (the first one),
/// so a cgroup a process makes inside its container cannot pass for another container.
pub fn container_id_from_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        if !path.contains("kubepods") {
            return None;
        }
        let mut segments = path.split('/');
        segments.find(|seg| pod_uid_from_segment(seg).is_some())?;
        container_id_from_segment(segments.next()?)
    })
}

/// The pod UID in the text of `/proc/<pid>/cgroup`, with dashes (`8a1c…-…`), if the process is
/// in a pod's cgroup.
///
/// Shapes handled, cgroup v1 (`N:controller:path`) and v2 (`0::path`):
/// - cgroupfs driver: `/kubepods/besteffort/pod<uid>/<container id>`,
///   `/kubepods/pod<uid>/<container id>` (guaranteed);
/// - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
///   cri-containerd-<id>.scope`, where the UID's dashes are underscores.
pub fn pod_uid_from_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        if !path.contains("kubepods") {
            return None;
        }
        path.split('/').find_map(pod_uid_from_segment)
    })
}

fn pod_uid_from_segment(seg: &str) -> Option<String> {
    let raw = if let Some(slice) = seg.strip_suffix(".slice") {
        // `kubepods-pod<uid>.slice` or `kubepods-<qos>-pod<uid>.slice`.
        let at = slice.rfind("-pod")?;
        slice.get(at + 4..)?
    } else {
        seg.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-").to_ascii_lowercase();
    is_uid(&uid).then_some(uid)
}

/// `8-4-4-4-12` hex digits.
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab";

    #[test]
    fn cgroup_v2_systemd_driver_with_underscores() {
        let text = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8a1c5f0e_3b2d_4c6a_9e1f_0123456789ab.slice/cri-containerd-4f1e2d.scope\n";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
    }

    #[test]
    fn cgroup_v2_systemd_guaranteed_pod_has_no_qos_class() {
        let text = "0::/kubepods.slice/kubepods-pod8a1c5f0e_3b2d_4c6a_9e1f_0123456789ab.slice/cri-containerd-ab.scope";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
    }

    #[test]
    fn cgroup_v1_cgroupfs_driver_with_dashes() {
        let text = "12:pids:/kubepods/besteffort/pod8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab/0c9d8e7f6a5b\n\
                    11:memory:/kubepods/besteffort/pod8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab/0c9d8e7f6a5b\n\
                    1:name=systemd:/kubepods/besteffort/pod8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab/0c9d8e7f6a5b\n";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
    }

    #[test]
    fn cgroup_v1_cgroupfs_guaranteed_and_systemd_v1() {
        let text = "4:cpu,cpuacct:/kubepods/pod8A1C5F0E-3B2D-4C6A-9E1F-0123456789AB/abc";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
        let text = "3:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8a1c5f0e_3b2d_4c6a_9e1f_0123456789ab.slice/docker-1.scope";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
    }

    #[test]
    fn seen_from_a_private_cgroup_namespace_and_nested_cgroups_the_pods_own_uid_wins() {
        // The exporter's container has its own cgroup namespace: other pods' paths are relative.
        let text = "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod8a1c5f0e_3b2d_4c6a_9e1f_0123456789ab.slice/cri-containerd-1.scope";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
        // A cgroup made inside the container cannot replace the pod's UID.
        let text = "0::/kubepods/burstable/pod8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab/ctr/podffffffff-ffff-ffff-ffff-ffffffffffff";
        assert_eq!(pod_uid_from_cgroup(text).as_deref(), Some(UID));
    }

    #[test]
    fn the_container_id_is_the_segment_after_the_pods() {
        let id: String = std::iter::repeat_n('a', 64).collect();
        let other: String = std::iter::repeat_n('b', 64).collect();
        let text = format!("0::/kubepods/burstable/pod{UID}/{id}/nested/{other}");
        assert_eq!(container_id_from_cgroup(&text), Some(id.as_str()));
        let text = format!(
            "0::/kubepods.slice/kubepods-pod8a1c5f0e_3b2d_4c6a_9e1f_0123456789ab.slice/cri-containerd-{id}.scope"
        );
        assert_eq!(container_id_from_cgroup(&text), Some(id.as_str()));
        assert_eq!(container_id_from_cgroup(&format!("0::/kubepods/burstable/pod{UID}")), None);
    }

    #[test]
    fn processes_outside_pods_have_no_uid() {
        for text in [
            "0::/user.slice/user-1000.slice/session-3.scope",
            "0::/system.slice/containerd.service",
            "0::/gantry/jobs/42-1",
            // A pod-looking name outside kubepods (a process cannot pass as a pod by naming a cgroup).
            "0::/user.slice/pod8a1c5f0e-3b2d-4c6a-9e1f-0123456789ab",
            "0::/kubepods/besteffort/podnot-a-uid/x",
            "0::/kubepods.slice/kubepods-burstable.slice",
            "",
        ] {
            assert_eq!(pod_uid_from_cgroup(text), None, "{text}");
        }
    }

    fn r(pod: &str) -> PodRef {
        PodRef { namespace: "ml".into(), pod: pod.into(), container: "main".into() }
    }

    #[test]
    fn a_gpu_has_a_sole_holder_only_when_one_container_holds_it() {
        let mut m = PodMap::default();
        m.add_uuid("GPU-a", r("p1"));
        m.add_uuid("GPU-a", r("p1"));
        m.add_index(0, r("p1"));
        assert_eq!(m.sole_holder(0, "GPU-a"), Some(&r("p1")));
        m.add_index(1, r("p2"));
        m.add_uuid("GPU-b", r("p3"));
        assert_eq!(m.holders(1, "GPU-b").len(), 2);
        assert_eq!(m.sole_holder(1, "GPU-b"), None);
        assert_eq!(m.sole_holder(2, "GPU-c"), None);
    }

    #[test]
    fn publishing_the_same_map_is_not_a_change() {
        let cell = PodCell::new();
        let mut m = PodMap::default();
        m.add_uuid("GPU-a", r("p1"));
        assert!(cell.publish(m.clone()));
        assert!(!cell.publish(m));
        assert_eq!(cell.latest().holders(0, "GPU-a"), vec![&r("p1")]);
    }
}
