//! The agent's error type.

/// Why the agent could not do something.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The HTTP request failed (connection, timeout, decoding).
    #[error("request to the server failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The server answered with an error.
    #[error("server answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Its message.
        body: String,
    },
    /// The server no longer accepts this agent's epoch: stop everything and register again.
    #[error("fenced by the server: {0}")]
    Fenced(String),
    /// The GPU layer failed.
    #[error(transparent)]
    Gpu(#[from] gantry_gpu::GpuError),
    /// A local file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The job sandbox (users, work directories, cgroups) could not be set up.
    #[error("job sandbox: {0}")]
    Sandbox(String),
    /// The assignment asks for something the agent will not do (e.g. override a placement
    /// variable); the job fails with this reason.
    #[error("{0}")]
    Refused(String),
}
