//! A CNI runtime: executes a network configuration list (a *conflist*) as the CNI specification
//! 1.0.0 says, for the per-attempt network namespaces of [`super::network`].
//!
//! A conflist names a network and a chain of plugins. `ADD` runs each plugin's binary (found in
//! the `CNI_PATH` directories by its `type`) in order, with `CNI_COMMAND`, `CNI_CONTAINERID`,
//! `CNI_NETNS`, `CNI_IFNAME` and `CNI_PATH` in its environment and its own configuration on
//! stdin, into which the runtime injects the list's `name` and `cniVersion`, the previous
//! plugin's result as `prevResult`, and `runtimeConfig` with the values of the capabilities the
//! plugin declares (`"capabilities": {"portMappings": true}`). The last plugin's result is the
//! attachment's result, which the caller keeps: `DEL` runs the plugins in reverse order, each
//! with that cached result as `prevResult`, and goes on past a failing plugin so that one broken
//! step does not leave the others' state behind (the first error is returned). A plugin that
//! fails exits non-zero and prints `{"code", "msg", "details"}`; its `msg` is the error. A plugin
//! still running after [`PLUGIN_TIMEOUT`] is killed and its step fails.
//!
//! Nothing here knows what the plugins do; [`super::network`] writes the default conflist.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Map, Value};

/// Errors of the CNI runtime.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    /// The conflist cannot be read or is not one.
    #[error("the CNI network configuration {path}: {why}")]
    Conflist {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// No `CNI_PATH` directory holds the plugin's binary.
    #[error("the CNI plugin {plugin} is not in {dirs}")]
    Missing {
        /// The plugin's `type`.
        plugin: String,
        /// The directories looked in.
        dirs: String,
    },
    /// The plugin could not be run or talked to.
    #[error("running the CNI plugin {plugin}: {source}")]
    Exec {
        /// The plugin's `type`.
        plugin: String,
        /// Why.
        source: std::io::Error,
    },
    /// The plugin ran and reported an error.
    #[error("the CNI plugin {plugin} failed ({command}): {msg}")]
    Plugin {
        /// The plugin's `type`.
        plugin: String,
        /// `ADD` or `DEL`.
        command: &'static str,
        /// Its error message (`msg`, with `details` when given), or its output.
        msg: String,
    },
}

/// A parsed conflist.
#[derive(Debug, Clone)]
pub struct Conflist {
    name: String,
    version: String,
    plugins: Vec<Map<String, Value>>,
    /// How long one plugin may run.
    timeout: std::time::Duration,
}

/// How long one plugin may run before it is killed and its step fails.
pub const PLUGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// One attachment: a container's interface in a network namespace.
#[derive(Debug, Clone)]
pub struct Attachment<'a> {
    /// `CNI_CONTAINERID`.
    pub container_id: &'a str,
    /// `CNI_NETNS`: the namespace file.
    pub netns: &'a Path,
    /// `CNI_IFNAME`.
    pub ifname: &'a str,
    /// Capability name → value (`portMappings`); each plugin gets those it declares.
    pub runtime: &'a Map<String, Value>,
}

impl Conflist {
    /// Reads and checks the conflist in `path`.
    pub fn load(path: &Path) -> Result<Self, CniError> {
        let bad = |why: String| CniError::Conflist { path: path.to_path_buf(), why };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        Self::parse(&value).map_err(bad)
    }

    /// Checks a conflist's shape: a `name`, a `cniVersion` and a non-empty `plugins` list of
    /// objects that each have a `type` that is a plain file name.
    pub fn parse(value: &Value) -> Result<Self, String> {
        let text =
            |key: &str| value.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let name = text("name").ok_or("it has no \"name\"")?;
        let version = text("cniVersion").ok_or("it has no \"cniVersion\"")?;
        let list = value.get("plugins").and_then(Value::as_array).ok_or("it has no \"plugins\" list")?;
        if list.is_empty() {
            return Err("its \"plugins\" list is empty".into());
        }
        let mut plugins = Vec::new();
        for (i, p) in list.iter().enumerate() {
            let p = p.as_object().ok_or(format!("plugin {i} is not an object"))?;
            let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind.is_empty() || kind.contains('/') || kind.starts_with('.') {
                return Err(format!("plugin {i} has no plain \"type\" (a binary's file name)"));
            }
            plugins.push(p.clone());
        }
        Ok(Self { name, version, plugins, timeout: PLUGIN_TIMEOUT })
    }

    /// The same list with another limit on how long one plugin may run.
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The network's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugins' types, in order.
    pub fn types(&self) -> Vec<&str> {
        self.plugins.iter().map(kind).collect()
    }

    /// The bridges its `bridge` plugins make (`cni0` when one names none).
    pub fn bridges(&self) -> Vec<String> {
        self.plugins
            .iter()
            .filter(|p| kind(p) == "bridge")
            .map(|p| p.get("bridge").and_then(Value::as_str).unwrap_or("cni0").to_owned())
            .collect()
    }

    /// Runs `ADD` through every plugin in order; returns the last plugin's result.
    pub fn add(&self, dirs: &[PathBuf], at: &Attachment<'_>) -> Result<Value, CniError> {
        let mut prev: Option<Value> = None;
        for plugin in &self.plugins {
            let result = self.invoke(plugin, "ADD", dirs, at, prev.as_ref())?;
            prev = Some(result);
        }
        Ok(prev.unwrap_or(Value::Null))
    }

    /// Runs `DEL` through every plugin in reverse order with the cached result of `ADD` as
    /// `prevResult` (`None` when it was lost); returns the first error after trying them all.
    pub fn del(&self, dirs: &[PathBuf], at: &Attachment<'_>, cached: Option<&Value>) -> Result<(), CniError> {
        let mut first = None;
        for plugin in self.plugins.iter().rev() {
            if let Err(e) = self.invoke(plugin, "DEL", dirs, at, cached) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The configuration one plugin reads on stdin.
    fn stdin_for(&self, plugin: &Map<String, Value>, at: &Attachment<'_>, prev: Option<&Value>) -> Value {
        let mut config = plugin.clone();
        config.insert("name".into(), Value::String(self.name.clone()));
        config.insert("cniVersion".into(), Value::String(self.version.clone()));
        if let Some(prev) = prev.filter(|p| !p.is_null()) {
            config.insert("prevResult".into(), prev.clone());
        }
        let wanted = plugin.get("capabilities").and_then(Value::as_object);
        let runtime: Map<String, Value> = at
            .runtime
            .iter()
            .filter(|(cap, _)| wanted.and_then(|w| w.get(*cap)).and_then(Value::as_bool) == Some(true))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !runtime.is_empty() {
            config.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        Value::Object(config)
    }

    fn invoke(
        &self,
        plugin: &Map<String, Value>,
        command: &'static str,
        dirs: &[PathBuf],
        at: &Attachment<'_>,
        prev: Option<&Value>,
    ) -> Result<Value, CniError> {
        let name = kind(plugin);
        let exec = |source| CniError::Exec { plugin: name.to_owned(), source };
        let binary = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()).ok_or_else(|| {
            let dirs = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":");
            CniError::Missing { plugin: name.to_owned(), dirs }
        })?;
        let stdin = serde_json::to_vec(&self.stdin_for(plugin, at, prev)).map_err(|e| exec(e.into()))?;
        let cni_path = std::env::join_paths(dirs).map_err(|e| exec(std::io::Error::other(e)))?;
        let mut child = Command::new(&binary)
            .env_clear()
            .env("PATH", super::env::DEFAULT_PATH)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", at.container_id)
            .env("CNI_NETNS", at.netns)
            .env("CNI_IFNAME", at.ifname)
            .env("CNI_PATH", cni_path)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(exec)?;
        // A plugin that hangs (a stuck `iptables` lock) must not hang the agent: it is killed.
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let (pid, timeout) = (child.id(), self.timeout);
        let watchdog = std::thread::spawn(move || {
            let late = finished.recv_timeout(timeout).is_err();
            if late {
                super::process::signal_pid(pid, libc::SIGKILL);
            }
            late
        });
        if let Some(mut input) = child.stdin.take() {
            // A plugin may exit without reading its config; its status says what happened.
            let _ = input.write_all(&stdin);
        }
        let out = child.wait_with_output();
        let _ = done.send(());
        if watchdog.join().unwrap_or(false) {
            let msg = format!("it did not finish within {timeout:?} and was killed");
            return Err(CniError::Plugin { plugin: name.to_owned(), command, msg });
        }
        let out = out.map_err(exec)?;
        let parsed: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        if out.status.success() {
            // DEL prints nothing; ADD prints its result.
            return Ok(parsed.unwrap_or(Value::Null));
        }
        Err(CniError::Plugin { plugin: name.to_owned(), command, msg: error_message(parsed.as_ref(), &out) })
    }
}

fn kind(plugin: &Map<String, Value>) -> &str {
    plugin.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// A failed plugin's `msg` (and `details`), else what it printed, else its exit status.
fn error_message(parsed: Option<&Value>, out: &std::process::Output) -> String {
    let field = |k: &str| parsed.and_then(|p| p.get(k)).and_then(Value::as_str).filter(|s| !s.is_empty());
    match (field("msg"), field("details")) {
        (Some(msg), Some(details)) => format!("{msg}: {details}"),
        (Some(msg), None) => msg.to_owned(),
        _ => {
            let text = String::from_utf8_lossy(if out.stdout.is_empty() { &out.stderr } else { &out.stdout });
            let text = text.trim();
            if text.is_empty() { out.status.to_string() } else { text.chars().take(500).collect() }
        }
    }
}

#[cfg(test)]
#[path = "cni_tests.rs"]
mod tests;
