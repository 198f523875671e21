//! Jobs: what is asked, what is stored, how they end.

use serde::{Deserialize, Serialize};

use super::{JobId, JobRequest, JobState};
pub use gantry_api::workflow::{ArrayMember, ArraySpec, Dependency, DependencyKind};

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// Client idempotency key: submitting twice with the same key yields one job.
    pub request_id: Option<String>,
    /// Owning team.
    pub team: String,
    /// Display name.
    pub name: String,
    /// Higher runs first.
    pub priority: i32,
    /// argv.
    pub command: Vec<String>,
    /// Declared environment variables (checked by the server; the agent adds its own).
    pub env: std::collections::BTreeMap<String, String>,
    /// Resources.
    pub request: JobRequest,
    /// How many times a lost or unhealthy placement is retried before the job fails.
    pub max_retries: u32,
    /// Submission time, ms since the epoch.
    pub submitted_at: i64,
    /// Longest a run may take, seconds.
    pub time_limit_s: Option<u64>,
    /// The user who submitted it (`None` for jobs from before users existed).
    pub user: Option<String>,
    /// A job array: one job per index, the first member's id is the array's.
    pub array: Option<ArraySpec>,
    /// Jobs it waits for.
    pub after: Vec<Dependency>,
    /// Labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Acceptable GPU models (empty: any).
    pub gpu_models: Vec<String>,
    /// Where it starts, relative to its private directory.
    pub workdir: Option<String>,
    /// Workers, all placed at once (1: a plain job). Each asks for `request`.
    pub replicas: u32,
}

impl Default for NewJob {
    /// An empty plain job (one worker) of no team: callers fill in what they submit.
    fn default() -> Self {
        Self {
            request_id: None,
            team: String::new(),
            name: String::new(),
            priority: 0,
            command: Vec::new(),
            env: Default::default(),
            request: JobRequest::default(),
            max_retries: 0,
            submitted_at: 0,
            time_limit_s: None,
            user: None,
            array: None,
            after: Vec::new(),
            labels: Default::default(),
            gpu_models: Vec::new(),
            workdir: None,
            replicas: 1,
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
