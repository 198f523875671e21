//! One job request from whatever the user wrote it in.
//!
//! A job reaches the server from four spellings: `gantry submit`'s flags, `gantry run`'s (the
//! same flags, then the output streamed), a job file for `gantry apply`, and the `#SBATCH` and
//! `#GANTRY` lines of a batch script (read as flags, [`super::sbatch`]). Each front end reads
//! its own syntax into a [`JobDraft`], typed as the request will be (a [`GpuRange`], an
//! [`ArraySpec`], [`Dependency`] values, sizes in MiB and milli-cores), with the file I/O done
//! (a script's text is read into the draft); then [`JobDraft::resolve`], a pure function, makes
//! the one [`SubmitRequest`] all of them send. So two spellings of one job are one request, and
//! the snapshot tests below show each spelling's request as the server receives it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;
use gantry_api::elastic::GpuRange;
use gantry_api::types::SubmitRequest;
use gantry_api::workflow::{ArraySpec, Dependency};

/// What the job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A command line (`-- python train.py`, `command: [python, train.py]`).
    Argv(Vec<String>),
    /// A batch script's text, run under its `#!` interpreter (else `/bin/sh`) with `args`; it
    /// travels in the job, so it need not exist on the node.
    Script {
        /// Where it was read (its file name is the job's default name and `$0`).
        path: PathBuf,
        /// Its text.
        text: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl Default for Program {
    fn default() -> Self {
        Self::Argv(Vec::new())
    }
}

/// A job as a front end read it: every field typed, nothing sent yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobDraft {
    /// What it runs.
    pub program: Program,
    /// Display name (default: the script's file name, else the server's: the program's).
    pub name: Option<String>,
    /// Whole GPUs, or an elastic range.
    pub gpus: GpuRange,
    /// Workers of a gang.
    pub replicas: Option<u32>,
    /// A slice of one GPU, MiB.
    pub gpu_memory_mib: Option<u64>,
    /// Compute share of the slice, percent.
    pub gpu_compute_pct: Option<u32>,
    /// CPU, milli-cores ([`cpu_milli`]).
    pub cpu_milli: Option<u64>,
    /// Host memory, MiB.
    pub memory_mib: Option<u64>,
    /// Team.
    pub team: Option<String>,
    /// Priority.
    pub priority: i32,
    /// Retries after lost placements.
    pub max_retries: Option<u32>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Time limit, seconds.
    pub time_limit_s: Option<u64>,
    /// Queue even if no node could hold it now.
    pub wait_for_capacity: bool,
    /// A job array.
    pub array: Option<ArraySpec>,
    /// Jobs to wait for.
    pub after: Vec<Dependency>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// GPU models.
    pub gpu_models: Vec<String>,
    /// The node pool.
    pub pool: Option<String>,
    /// Node labels its nodes must carry.
    pub node_selector: BTreeMap<String, String>,
    /// Work directory inside the job's own.
    pub workdir: Option<String>,
    /// The working directory uploaded for it (the front ends upload before they resolve).
    pub upload: Option<gantry_api::upload::Upload>,
    /// A path on the node to start in instead (`--chdir`).
    pub chdir: Option<String>,
    /// Declared inputs (`--input NAME=URL`, `inputs:`).
    pub inputs: Vec<gantry_api::inputs::Input>,
    /// The team secret S3 inputs are read with (`--input-secret`).
    pub input_secret: Option<String>,
    /// Declared outputs (`--output NAME=URL`, `outputs:`).
    pub outputs: Vec<gantry_api::outputs::Output>,
    /// The team secret outputs are uploaded with (`--output-secret`).
    pub output_secret: Option<String>,
    /// The container image it runs in (`--image`, `image:`, `#SBATCH --container-image`).
    pub image: Option<String>,
    /// The team secret the image's registry is logged in to with (`--registry-secret`).
    pub registry_secret: Option<String>,
    /// The executable replacing the image's entrypoint (`--entrypoint`).
    pub entrypoint: Option<String>,
    /// The directory in the container to start in (`--container-workdir`).
    pub container_workdir: Option<String>,
    /// The team's volumes it mounts (`--volume`, `volumes:`).
    pub volumes: Vec<gantry_api::volumes::VolumeMount>,
}

impl JobDraft {
    /// The submission this draft stands for, under the idempotency key `request_id` (random for
    /// `submit`, the file's digest for `apply`). Pure: the same draft is the same request.
    pub fn resolve(self, request_id: String) -> anyhow::Result<SubmitRequest> {
        let (command, name) = match self.program {
            Program::Argv(argv) if argv.is_empty() => bail!(
                "nothing to run: give a command (gantry submit --gpus 1 -- python train.py; in a job \
                 file `command: [python, train.py]`) or a batch script (gantry submit train.sh; `script: train.sh`)"
            ),
            Program::Argv(argv) => (argv, self.name),
            Program::Script { path, text, args } => {
                let name = self.name.or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()));
                (script_command(&path, text, args), name)
            }
        };
        Ok(SubmitRequest {
            command,
            gpus: self.gpus,
            gpu_memory_mib: self.gpu_memory_mib.unwrap_or(0),
            gpu_compute_pct: self.gpu_compute_pct.unwrap_or(0),
            cpu_milli: self.cpu_milli.unwrap_or(0),
            memory_mib: self.memory_mib.unwrap_or(0),
            team: self.team,
            priority: self.priority,
            name,
            max_retries: self.max_retries,
            request_id: Some(request_id),
            env: self.env,
            wait_for_capacity: self.wait_for_capacity,
            time_limit_s: self.time_limit_s,
            array: self.array,
            after: self.after,
            labels: self.labels,
            gpu_models: self.gpu_models,
            pool: self.pool,
            node_selector: self.node_selector,
            workdir: self.workdir,
            replicas: self.replicas,
            upload: self.upload,
            chdir: self.chdir,
            inputs: self.inputs,
            input_secret: self.input_secret,
            outputs: self.outputs,
            output_secret: self.output_secret,
            image: self.image,
            registry_secret: self.registry_secret,
            entrypoint: self.entrypoint,
            container_workdir: self.container_workdir,
            volumes: self.volumes,
        })
    }
}

/// CPU cores (fractions allowed, 0 to 4096) in milli-cores.
pub fn cpu_milli(cores: f64) -> Result<u64, String> {
    if !(0.0..=4096.0).contains(&cores) {
        return Err(format!("cpu: must be between 0 and 4096 cores, not {cores}"));
    }
    Ok((cores * 1000.0).round() as u64)
}

/// `--cpu C` (clap's value parser).
pub fn parse_cpu(text: &str) -> Result<u64, String> {
    let cores: f64 =
        text.trim().parse().map_err(|_| format!("`{text}` is not a number of cores (e.g. 8 or 0.5)"))?;
    cpu_milli(cores)
}

/// The argv that runs a script's text: its `#!` interpreter (else `/bin/sh`) with `-c`, the
/// text, the script's name as `$0` and then its arguments.
pub fn script_command(script: &std::path::Path, text: String, args: Vec<String>) -> Vec<String> {
    let mut argv: Vec<String> = match text.lines().next().and_then(|l| l.strip_prefix("#!")) {
        Some(interp) if !interp.trim().is_empty() => interp.split_whitespace().map(str::to_owned).collect(),
        _ => vec!["/bin/sh".into()],
    };
    let name = script.file_name().map_or("script".into(), |n| n.to_string_lossy().into_owned());
    argv.extend(["-c".into(), text, name]);
    argv.extend(args);
    argv
}

#[cfg(test)]
mod tests;
