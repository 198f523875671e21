//! Declared outputs: the directories a job's results are uploaded from when an attempt ends
//! (stage-out, issue 22).
//!
//! A job names each output `NAME=URL` (`--output`, `outputs:` in a job file), the URL an S3
//! prefix (a job writes to storage the nodes mount by itself). The agent gives each attempt an
//! empty directory per output, private to the job's user, at `GANTRY_OUTPUT_<NAME>`. When the
//! attempt ends — succeeded, failed, cancelled or preempted — and after its GPUs are released,
//! the agent uploads the regular files the job's user owns there to `URL/<relative path>`,
//! removes the directory and reports each output's result ([`OutputReport`],
//! `POST /v1/agent/outputs`), which is kept on the job's [`Output`] and listed by
//! `gantry job N`. Credentials are the team secret `--output-secret` names, else the job's
//! `--input-secret`, else the agent's environment, as for inputs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::inputs::Source;

/// Most outputs one job may declare.
pub const MAX_OUTPUTS: usize = 16;

/// Most bytes one output may upload.
pub const MAX_BYTES: u64 = 10 << 30;

/// Most files one output may upload.
pub const MAX_FILES: u64 = 100_000;

/// Where an output's upload stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OutputState {
    /// No attempt has ended yet.
    #[default]
    Pending,
    /// An ended attempt's directory is being uploaded.
    Uploading,
    /// Uploaded.
    Uploaded,
    /// The upload failed (`error` says why); the files are not kept on the node.
    Failed,
}

impl OutputState {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Uploading => "uploading",
            Self::Uploaded => "uploaded",
            Self::Failed => "failed",
        }
    }
}

/// One declared output, and once an attempt has ended what its upload did.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// Its name: the job finds its directory at `$GANTRY_OUTPUT_<NAME>` (letters, digits, `_`).
    pub name: String,
    /// Where it goes: `s3://bucket/prefix`; each file to `prefix/<relative path>`.
    pub url: String,
    /// Where its upload stands.
    #[serde(default)]
    pub state: OutputState,
    /// Bytes uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Files uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Entries not uploaded: links, devices, sockets, files another user owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// How long the upload took, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded_s: Option<f64>,
    /// The attempt whose directory this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Why the upload failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Eq for Output {}

impl Output {
    /// An output nothing was uploaded to yet.
    pub fn new(name: &str, url: &str) -> Self {
        Self { name: name.to_owned(), url: url.to_owned(), ..Self::default() }
    }

    /// The same output, as declared (no result).
    pub fn declared(&self) -> Self {
        Self::new(&self.name, &self.url)
    }

    /// The environment variable the job finds its directory in.
    pub fn env_name(&self) -> String {
        format!("GANTRY_OUTPUT_{}", self.name.to_ascii_uppercase())
    }

    /// The bucket and key prefix (without a trailing `/`) it uploads to.
    pub fn target(&self) -> Result<(String, String), String> {
        target(&self.url)
    }

    /// One line of `gantry job N`: `model → s3://b/p: uploaded 2 files, 1.2 MiB in 0.3 s`.
    pub fn line(&self) -> String {
        let mut line = format!("{} → {}: {}", self.name, self.url, self.state.as_str());
        if let (Some(files), Some(bytes)) = (self.files, self.bytes) {
            line.push_str(&format!(" {files} files, {bytes} bytes"));
        }
        if let Some(s) = self.uploaded_s {
            line.push_str(&format!(" in {s:.1} s"));
        }
        if let Some(n) = self.skipped.filter(|n| *n > 0) {
            line.push_str(&format!(", {n} skipped"));
        }
        if let Some(a) = self.attempt {
            line.push_str(&format!(" (attempt {a})"));
        }
        if let Some(e) = &self.error {
            line.push_str(&format!(": {e}"));
        }
        line
    }
}

/// The bucket and key prefix (no trailing `/`) of an output URL, or why it is not one: only
/// `s3://bucket/prefix`.
pub fn target(url: &str) -> Result<(String, String), String> {
    if !url.starts_with("s3://") {
        return Err(format!(
            "`{url}`: an output is uploaded to s3://bucket/prefix; a job writes to shared (file://) storage itself"
        ));
    }
    match Source::parse(url)? {
        Source::S3 { bucket, prefix } => Ok((bucket, prefix.trim_end_matches('/').to_owned())),
        _ => Err(format!("`{url}`: an output is s3://bucket/prefix")),
    }
}

/// Parses `NAME=URL` (`--output`).
pub fn parse(text: &str) -> Result<Output, String> {
    let Some((name, url)) = text.split_once('=') else {
        return Err(format!("`{text}`: an output is NAME=URL, e.g. model=s3://results/run-1"));
    };
    let output = Output::new(name, url);
    check(std::slice::from_ref(&output))?;
    Ok(output)
}

/// Checks a job's outputs: at most [`MAX_OUTPUTS`], names as inputs' (1 to 64 letters, digits
/// and `_`, not starting with a digit, each once ignoring case), S3 URLs.
pub fn check(outputs: &[Output]) -> Result<(), String> {
    let declared = outputs.iter().map(|o| (o.name.as_str(), o.url.as_str()));
    crate::inputs::check_declared("outputs", MAX_OUTPUTS, declared, |url| target(url).map(drop))
}

/// An agent's report of an ended attempt's outputs (`POST /v1/agent/outputs`): first each
/// `uploading` (answered with the credentials to upload with), then each `uploaded` or
/// `failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OutputReport {
    /// The node.
    pub node_id: String,
    /// The epoch the agent registered under.
    pub epoch: u64,
    /// The job.
    pub job_id: i64,
    /// The attempt that ended; the node must be the one it ran on.
    pub attempt: u32,
    /// Its outputs (names and URLs as the job declared them) with where each stands.
    pub outputs: Vec<Output>,
}

/// The answer to an [`OutputReport`].
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputAnswer {
    /// The keys and values of the team secret the outputs are uploaded with (the job's
    /// `output_secret`, else its `input_secret`); empty: the agent's environment. Only in the
    /// answer to an `uploading` report.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret: BTreeMap<String, String>,
}

impl std::fmt::Debug for OutputAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputAnswer").field("secret", &self.secret.keys().collect::<Vec<_>>()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_is_a_name_and_an_s3_url() {
        let o = parse("model=s3://results/run-1/").expect("parses");
        assert_eq!(o.env_name(), "GANTRY_OUTPUT_MODEL");
        assert_eq!(o.target().expect("s3"), ("results".to_owned(), "run-1".to_owned()));
        let file = parse("m=file:///shared/x").expect_err("file");
        assert!(file.contains("shared (file://) storage itself"), "{file}");
        assert!(parse("m=https://example.org/x").is_err());
        assert!(parse("no-url").is_err());
        assert!(parse("bad-name=s3://bucket/p").is_err());
        let twice = [Output::new("a", "s3://bucket/p"), Output::new("A", "s3://bucket/q")];
        assert!(check(&twice).expect_err("twice").contains("twice"));
    }

    #[test]
    fn a_line_says_what_the_upload_did() {
        let o = Output {
            state: OutputState::Uploaded,
            bytes: Some(10),
            files: Some(2),
            skipped: Some(1),
            uploaded_s: Some(0.25),
            attempt: Some(1),
            ..Output::new("m", "s3://b/p")
        };
        assert_eq!(o.line(), "m → s3://b/p: uploaded 2 files, 10 bytes in 0.2 s, 1 skipped (attempt 1)");
        let json = serde_json::to_value(&o).expect("json");
        assert_eq!(json["state"], "uploaded");
        assert_eq!(Output::new("m", "s3://b/p").line(), "m → s3://b/p: pending");
    }
}
