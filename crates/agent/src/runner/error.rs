//! The agent's error type.

/// Why the agent could not do something.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The HTTP request failed (connection, timeout, decoding).
    #[error("request to the server failed: {0}")]
    Http(#[from] reqwest::Error),
    /// TLS failed: the server's certificate is not trusted, a PEM file is unusable, or the
    /// client certificate was refused.
    #[error("TLS: {0}")]
    Tls(String),
    /// The server address (or list of addresses) is not usable.
    #[error("server address: {0}")]
    Servers(String),
    /// The CA the server sent is not the one pinned by hash.
    #[error("the server's CA has SHA-256 {got}, not the expected {expected}")]
    CaMismatch {
        /// The pinned hash.
        expected: String,
        /// The hash of what the server sent.
        got: String,
    },
    /// The server answered with an error.
    #[error("server answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Its message.
        body: String,
    },
    /// The join token or the stored credential was refused.
    #[error("the server refused this node's credentials: {0}")]
    CredentialRefused(String),
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
