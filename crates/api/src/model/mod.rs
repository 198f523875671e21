//! The vocabulary on the wire: jobs, nodes, GPUs, users, tokens, teams, events, the audit log.
//! The store keeps these as they are and adds what never leaves the control plane.

mod auth;
mod jobs;
mod nodes;

pub use auth::*;
pub use jobs::*;
pub use nodes::*;

use serde::{Deserialize, Serialize};

/// A job's id, assigned by the store on submission.
pub type JobId = i64;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The lowercase name used in the database, the API and the CLI.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
            /// Parses the lowercase name.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Where a job is in its life.
    JobState {
        /// Waiting for GPUs.
        Pending => "pending",
        /// GPUs allocated; the agent has not reported the process started yet.
        Scheduled => "scheduled",
        /// The process runs.
        Running => "running",
        /// Exited with status 0.
        Succeeded => "succeeded",
        /// Exited non-zero, could not start, or ran out of retries.
        Failed => "failed",
        /// Cancelled by a user.
        Cancelled => "cancelled",
        /// Stopped by the agent when its time limit ran out.
        Timeout => "timeout",
    }
);

impl NodeState {
    /// Still holds its GPUs and jobs (ready or not responding).
    pub fn is_up(self) -> bool {
        matches!(self, NodeState::Ready | NodeState::NotResponding)
    }
}

impl JobState {
    /// Holds an allocation (scheduled or running).
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Scheduled | JobState::Running)
    }
    /// Will never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Timeout)
    }
}

string_enum!(
    /// A node's liveness as seen by the control plane.
    NodeState {
        /// Heartbeats arrive.
        Ready => "ready",
        /// Silent for the heartbeat timeout: no new work, its jobs keep their place (the agent
        /// may be restarting); ready again at its next heartbeat.
        NotResponding => "not-responding",
        /// Silent for the node-lost deadline; its jobs were requeued.
        Lost => "lost",
    }
);

string_enum!(
    /// Whether a node takes new work (`gantry node cordon|uncordon|drain`), apart from its
    /// liveness.
    #[derive(Default)]
    NodeScheduling {
        /// Takes new work.
        #[default]
        Schedulable => "schedulable",
        /// Takes no new work; its jobs run on.
        Cordoned => "cordoned",
        /// Takes no new work; its running jobs are stopped and requeued (their retries not
        /// spent) once the drain's grace period ends.
        Draining => "draining",
    }
);

string_enum!(
    /// How a node runs its jobs' network (`gantry agent --job-network`).
    NodeNetwork {
        /// Jobs share the node's network namespace (the agent is not root, has no CNI plugins,
        /// or was told `--job-network shared`): a job can bind the node's loopback ports.
        Shared => "shared",
        /// Each attempt runs in its own network namespace set up by the CNI plugins.
        Cni => "cni",
    }
);

impl Default for NodeNetwork {
    /// What an agent that does not say reports: the node's network.
    fn default() -> Self {
        NodeNetwork::Shared
    }
}

string_enum!(
    /// A GPU's health (the GPU layer's state machine). Only `healthy` GPUs get new work.
    GpuHealth {
        /// Fine.
        Healthy => "healthy",
        /// An event was seen; being watched.
        Suspect => "suspect",
        /// Critical fault; no work.
        Unhealthy => "unhealthy",
        /// Probing after a fault.
        Recovering => "recovering",
    }
);

string_enum!(
    /// What a caller may do. A user has one role; agents hold node credentials.
    Role {
        /// Everything, including users, tokens and the audit log.
        Admin => "admin",
        /// Runs the cluster: nodes, drain, quotas; reads every team's jobs; changes no job.
        Operator => "operator",
        /// Submits and manages the jobs of its teams and sees only those.
        #[serde(alias = "user")]
        Member => "member",
        /// Reads what its teams may read; changes nothing.
        Viewer => "viewer",
        /// A node's agent: registers and reports for its own node only.
        Agent => "agent",
    }
);

impl Role {
    /// Parses a role name, accepting `user` (the version-1 name of `member`).
    pub fn parse_lenient(text: &str) -> Option<Self> {
        if text == "user" { Some(Role::Member) } else { Role::parse(text) }
    }
}

string_enum!(
    /// What a stored token is.
    TokenKind {
        /// A user's bearer token.
        Api => "api",
        /// One-time and short-lived: an agent trades it for a node credential.
        Join => "join",
        /// An agent's credential, bound to one node.
        Node => "node",
        /// Calls one service through the gateway and nothing else (`gantry token create
        /// --service NAME`); the API refuses it.
        Invoke => "invoke",
    }
);
