//! Jobs: what is asked, what is stored, how they end.

use serde::{Deserialize, Serialize};

use super::{JobId, JobRequest, JobState};
pub use gantry_api::elastic::GpuRange;
pub use gantry_api::types::SubmitRequest;
pub use gantry_api::workflow::{ArrayMember, ArraySpec, Dependency, DependencyKind};

/// A job as submitted: the request as the server accepted it, and what the server added (the
/// team and name it resolved, who submitted it, when).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// The submission, checked by the server: `max_retries` is set (the server's default
    /// applied and capped); its `team` and `name` are what the client sent, the job's are below.
    pub spec: SubmitRequest,
    /// Owning team.
    pub team: String,
    /// Display name.
    pub name: String,
    /// Submission time, ms since the epoch.
    pub submitted_at: i64,
    /// The user who submitted it (`None` for jobs from before users existed).
    pub user: Option<String>,
    /// The service it is a replica of, and the generation of the file it runs (set by the
    /// service controller only; a client's submission never carries it).
    pub service: Option<(String, u64)>,
    /// The team's pending limit, checked in the insert's transaction (the jobs it already has
    /// pending and this submission's members): past it the insert is refused with
    /// [`crate::StoreError::LimitReached`]. `None`: not checked (the service controller's
    /// replicas, imports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_limit: Option<u64>,
    /// The bytes of command and environment the team's pending jobs may store, checked with
    /// `pending_limit` (an array's members each count). `None`: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_bytes_limit: Option<u64>,
}

impl NewJob {
    /// What each worker asks of a node.
    pub fn request(&self) -> JobRequest {
        self.spec.resources()
    }

    /// How many times a lost or unhealthy placement is retried before the job fails.
    pub fn max_retries(&self) -> u32 {
        self.spec.max_retries.unwrap_or(0)
    }

    /// Workers, all placed at once (1: a plain job).
    pub fn replicas(&self) -> u32 {
        self.spec.workers()
    }
}

impl Default for NewJob {
    /// An empty plain job (one worker, no retries) of no team: callers fill in what they submit.
    fn default() -> Self {
        Self {
            spec: SubmitRequest { max_retries: Some(0), ..SubmitRequest::default() },
            team: String::new(),
            name: String::new(),
            submitted_at: 0,
            user: None,
            service: None,
            pending_limit: None,
            pending_bytes_limit: None,
        }
    }
}

/// A gang's placement: every worker at once, in rank order, or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangPlacement {
    /// The gang.
    pub gang_id: JobId,
    /// One placement per worker, by rank (`job_id` is the worker's id).
    pub workers: Vec<super::Placement>,
    /// ms since the epoch.
    pub at: i64,
}

/// Which jobs to list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this team.
    pub team: Option<String>,
    /// Only these teams (`None`: every team). The caller's visibility, applied in the query.
    pub teams: Option<Vec<String>>,
    /// Only jobs with a smaller id (the next page of a newest-first listing).
    pub before: Option<JobId>,
    /// At most this many, newest first when set (oldest first and all when not).
    pub limit: Option<u32>,
    /// Only jobs carrying every one of these labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Only the members of this array.
    pub array: Option<JobId>,
}

/// Which events to list: newest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventFilter {
    /// At most this many.
    pub limit: u32,
    /// Only events with a smaller id (the next page).
    pub before: Option<i64>,
    /// Only events of these teams (`None`: all, cluster events included).
    pub teams: Option<Vec<String>>,
    /// Only events at or after this time (ms since the epoch).
    pub since: Option<i64>,
    /// Only events with a larger id (what is new since the last one seen).
    pub after: Option<i64>,
    /// Only events about this subject (`job/12`, a node id, a GPU UUID).
    pub subject: Option<String>,
}
