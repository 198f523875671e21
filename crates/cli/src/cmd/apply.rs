//! `gantry apply -f job.yaml`: the fields of `gantry submit` declared in a file, as `kubectl
//! apply` does for objects.
//!
//! A file's `name` is its job's identity in the team. Applying the same file again (its meaning:
//! the parsed fields and the script it names, not spacing or comments) says `unchanged`; a
//! changed file updates the job or array in place while none of it has started (`configured`,
//! same id); a started one is refused with a sentence unless `--replace`, which cancels what has
//! not ended and submits the file anew (`replaced`); after the job has ended the file makes a new
//! one (`created`). A file without a name keeps the older rule: the same file finds the job it
//! made, a changed one makes another. A field the file does not know is an error with its line,
//! as is bad YAML.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::types::{ApplyRequest, ApplyResponse, SubmitRequest, WhoAmI};
use gantry_api::workflow::{self, ArraySpec};
use serde::{Deserialize, Serialize};

use super::client::{Api, ServerArgs, block_on};
use super::draft::{JobDraft, Program};

/// Arguments of `gantry apply`.
#[derive(Debug, Args)]
#[command(after_help = "Example job.yaml:
  name: lr-sweep
  command: [python, sweep.py, --epochs, \"3\"]   # or `script: train.sh` (beside this file)
  gpus: 1                # or a range for an elastic job: gpus: 2..8
  gpu_model: [A100, H100]
  pool: inference        # a node pool (default: default)
  node_selector: {rack: r1}
  time: 2h
  array: 0-99%8
  after: ok:12
  labels: {exp: lr-sweep}
  env: {OMP_NUM_THREADS: \"8\"}
  workdir: out
Then: gantry apply -f job.yaml      # again: `unchanged`; edited: `configured` while pending
      gantry apply --replace -f job.yaml   # a started job: cancel it and submit the file anew")]
pub struct ApplyArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The job file (YAML; `-` reads stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    file: PathBuf,
    /// When the file's job has started: cancel what has not ended and submit the file anew
    /// (without it, a changed file for a started job is refused).
    #[arg(long)]
    replace: bool,
    /// Do not upload the current directory (the job starts in an empty private directory).
    #[arg(long)]
    no_upload: bool,
}

/// A job file. Sizes in the units `submit` takes: cores, MiB.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// argv.
    #[serde(default)]
    pub command: Vec<String>,
    /// A script to run instead, relative to the file (its `#GANTRY` lines are not read: the
    /// file says everything).
    #[serde(default)]
    pub script: Option<PathBuf>,
    /// Whole GPUs: a number, or a range `"2..8"` for an elastic job.
    #[serde(default)]
    pub gpus: gantry_api::elastic::GpuRange,
    /// A slice of one GPU: MiB (`20000`) or a size with a unit (`"20G"`).
    #[serde(default, deserialize_with = "mib")]
    pub gpu_memory: Option<u64>,
    /// Compute share of the slice, percent.
    #[serde(default)]
    pub gpu_compute: Option<u32>,
    /// GPU models.
    #[serde(default)]
    pub gpu_model: Vec<String>,
    /// The node pool (left out of the digest when absent, so files from before keep theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Node labels its nodes must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// CPU cores.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Host memory: MiB (`32768`) or a size with a unit (`"32G"`).
    #[serde(default, deserialize_with = "mib")]
    pub memory: Option<u64>,
    /// Team.
    #[serde(default)]
    pub team: Option<String>,
    /// Priority.
    #[serde(default)]
    pub priority: i32,
    /// Retries.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Time limit (`2h`, `01:30:00`).
    #[serde(default)]
    pub time: Option<String>,
    /// Array (`0-99%8`).
    #[serde(default)]
    pub array: Option<String>,
    /// Dependencies (`ok:12,any:13`).
    #[serde(default)]
    pub after: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Work directory inside the job's own (the uploaded copy of the directory `apply` runs in).
    #[serde(default)]
    pub workdir: Option<String>,
    /// An absolute path on the node to start in instead; nothing is uploaded (`--chdir`).
    /// Left out of the file's meaning when unset, so older files keep their digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chdir: Option<String>,
    /// Declared inputs, `NAME: URL` (`--input`). Left out of the file's meaning when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    /// The team secret S3 inputs are read with (`--input-secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_secret: Option<String>,
    /// Declared outputs, `NAME: URL` (`--output`). Left out of the file's meaning when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
    /// The team secret outputs are uploaded with (`--output-secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_secret: Option<String>,
    /// The container image it runs in (`--image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The team secret the image's registry is logged in to with (`--registry-secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_secret: Option<String>,
    /// The executable replacing the image's entrypoint (`--entrypoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// The directory in the container to start in (`--container-workdir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_workdir: Option<String>,
    /// Volumes of the team it mounts, each `NAME:/PATH[:ro]` (`--volume`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Workers of a gang, each with `gpus` whole GPUs, placed all at once (`--replicas`).
    #[serde(default)]
    pub replicas: Option<u32>,
    /// Queue even if no node could hold it now.
    #[serde(default)]
    pub wait_for_capacity: bool,
}

/// Applies a job file: prints `job ID created` or `job ID unchanged`.
pub fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let (text, base) = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading stdin")?;
        (text, PathBuf::from("."))
    } else {
        let text = std::fs::read_to_string(&args.file)
            .with_context(|| format!("cannot read {}", args.file.display()))?;
        (text, args.file.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf))
    };
    let file = parse(&text).with_context(|| format!("{} is not a valid job file", args.file.display()))?;
    let api = Api::connect(&args.server)?;
    // The request id is kept per team but unique in the whole store: the user keeps two people
    // applying the same file from finding each other's job.
    let who: WhoAmI = block_on(api.get("/v1/whoami"))??;
    let scope = format!("{} {}", api.base(), who.user.unwrap_or_default());
    let upload = !args.no_upload && file.chdir.is_none();
    let team = file.team.clone();
    let mut body = request(file, &base, &scope)?;
    if upload && let Some(up) = super::upload::current_dir(&api, team.as_deref(), false)? {
        // The directory is part of the job: another one is a change of the file's job.
        let hex = gantry_api::upload::manifest_hex(&up.digest).unwrap_or_default();
        body.request_id = body.request_id.map(|id| format!("{id}-{}", &hex[..16.min(hex.len())]));
        body.upload = Some(up);
    }
    let what = if body.array.is_some() { "array" } else { "job" };
    if body.name.is_none() {
        let resp = super::submit::send(&api, &body)?;
        println!("{what} {} {}", resp.id, if resp.created { "created" } else { "unchanged" });
        eprintln!("hint: a `name:` makes the file's job updatable in place by the next apply");
        return Ok(());
    }
    let req = ApplyRequest { job: body, replace: args.replace };
    let resp: ApplyResponse = block_on(api.post("/v1/jobs/apply", &req))??;
    match resp.replaced {
        Some(old) => println!("{what} {} {} (job {old} cancelled)", resp.id, resp.action),
        None => println!("{what} {} {}", resp.id, resp.action),
    }
    Ok(())
}

/// Parses a job file; errors name the line (serde_norway's `at line L column C`).
pub fn parse(text: &str) -> anyhow::Result<JobFile> {
    let file: JobFile = serde_norway::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(file)
}

/// The submission a job file stands for; its request id is the digest of the file and `scope`
/// (the server and the user).
pub fn request(file: JobFile, base: &Path, scope: &str) -> anyhow::Result<SubmitRequest> {
    let mut meaning = format!("{scope}\n{}", serde_json::to_string(&file)?);
    let draft = draft(file, base)?;
    // A script's text is part of the job: editing it is a change of the file's job.
    if let Program::Script { text, .. } = &draft.program {
        meaning.push('\n');
        meaning.push_str(text);
    }
    draft.resolve(format!("apply-{}", digest(&meaning)))
}

/// The job a file describes (a script it names is read, beside the file); each bad value is
/// refused with its field's name before anything is sent.
pub fn draft(file: JobFile, base: &Path) -> anyhow::Result<JobDraft> {
    let program = match (&file.script, file.command.is_empty()) {
        (Some(_), false) => bail!("command and script: give one of them"),
        (None, _) => Program::Argv(file.command),
        (Some(script), true) => {
            let path = base.join(script);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("script: cannot read {}", path.display()))?;
            Program::Script { path, text, args: Vec::new() }
        }
    };
    let time_limit_s = file
        .time
        .as_deref()
        .map(super::submit::parse_time)
        .transpose()
        .map_err(|e| anyhow::anyhow!("time: {e}"))?;
    let array = file.array.as_deref().map(ArraySpec::parse).transpose().map_err(anyhow::Error::msg)?;
    let after =
        file.after.as_deref().map(workflow::parse_dependencies).transpose().map_err(anyhow::Error::msg)?;
    workflow::check_labels(&file.labels).map_err(anyhow::Error::msg)?;
    if let Some(dir) = &file.workdir {
        workflow::check_workdir(dir).map_err(anyhow::Error::msg)?;
    }
    if let Some(dir) = &file.chdir {
        workflow::check_chdir(dir).map_err(anyhow::Error::msg)?;
    }
    let inputs: Vec<gantry_api::inputs::Input> =
        file.inputs.iter().map(|(name, url)| gantry_api::inputs::Input::new(name, url)).collect();
    gantry_api::inputs::check(&inputs).map_err(anyhow::Error::msg)?;
    let outputs: Vec<gantry_api::outputs::Output> =
        file.outputs.iter().map(|(name, url)| gantry_api::outputs::Output::new(name, url)).collect();
    gantry_api::outputs::check(&outputs).map_err(anyhow::Error::msg)?;
    Ok(JobDraft {
        program,
        name: file.name,
        gpus: file.gpus,
        replicas: file.replicas,
        gpu_memory_mib: file.gpu_memory,
        gpu_compute_pct: file.gpu_compute,
        cpu_milli: file.cpu.map(super::draft::cpu_milli).transpose().map_err(anyhow::Error::msg)?,
        memory_mib: file.memory,
        team: file.team,
        priority: file.priority,
        max_retries: file.max_retries,
        env: file.env,
        time_limit_s,
        wait_for_capacity: file.wait_for_capacity,
        array,
        after: after.unwrap_or_default(),
        labels: file.labels,
        gpu_models: file.gpu_model,
        pool: file.pool,
        node_selector: file.node_selector,
        workdir: file.workdir,
        upload: None,
        chdir: file.chdir,
        inputs,
        input_secret: file.input_secret,
        outputs,
        output_secret: file.output_secret,
        image: file.image,
        registry_secret: file.registry_secret,
        entrypoint: file.entrypoint,
        container_workdir: file.container_workdir,
        volumes: file
            .volumes
            .iter()
            .map(|v| v.parse().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?,
    })
}

/// 128-bit FNV-1a, as hex: stable across builds and platforms (std's hasher is not), and
/// enough to tell job files apart (it names a submission, it guards no secret).
fn digest(text: &str) -> String {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in text.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

/// A size field of a job file: MiB as a number, or a string with a unit (`submit::parse_mib`).
fn mib<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Size {
        Mib(u64),
        Text(String),
    }
    match <Option<Size> as serde::Deserialize>::deserialize(d)? {
        None => Ok(None),
        Some(Size::Mib(n)) => Ok(Some(n)),
        Some(Size::Text(t)) => super::submit::parse_mib(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_field_is_an_error_with_its_line() {
        let err = parse("name: a\ncommand: [x]\ngpu: 2\n").expect_err("unknown field");
        let text = err.to_string();
        assert!(text.contains("unknown field `gpu`") && text.contains("line 3"), "{text}");
    }

    #[test]
    fn a_gpu_range_makes_an_elastic_job_and_a_count_keeps_its_request_id() {
        let elastic = parse("command: [x]\ngpus: 2..8\n").expect("valid");
        let body = request(elastic, Path::new("."), "s").expect("request");
        assert_eq!(body.gpus, gantry_api::elastic::GpuRange { min: 2, max: Some(8) });
        let rigid = parse("command: [x]\ngpus: 2\n").expect("valid");
        assert_eq!(
            serde_json::to_value(&rigid).expect("json")["gpus"],
            2,
            "digests of old files stay the same"
        );
        let err = parse("command: [x]\ngpus: 8..2\n").expect_err("empty range");
        assert!(err.to_string().contains("must not exceed"), "{err}");
    }

    #[test]
    fn bad_yaml_is_an_error_with_its_line() {
        let err = parse("name: a\ncommand: [x\n").expect_err("bad yaml");
        assert!(err.to_string().contains("line"), "{err}");
    }

    #[test]
    fn the_same_meaning_gives_the_same_request_id_and_a_change_a_new_one() {
        let a = parse("command: [python, t.py]\ngpus: 1\n").expect("valid");
        let b = parse("# a comment\ngpus:   1\ncommand:\n  - python\n  - t.py\n").expect("valid");
        let c = parse("command: [python, t.py]\ngpus: 2\n").expect("valid");
        let id = |f: JobFile, s| request(f, Path::new("."), s).expect("request").request_id;
        assert_eq!(id(a.clone(), "http://x"), id(b, "http://x"));
        assert_ne!(id(a.clone(), "http://x"), id(c, "http://x"));
        assert_ne!(id(a.clone(), "http://x"), id(a, "http://y"));
    }

    #[test]
    fn a_script_is_read_beside_the_file_and_runs_under_its_interpreter() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("t.sh"), "#!/bin/bash\necho hi\n").expect("write");
        let file = parse("script: t.sh\n").expect("valid");
        let req = request(file, dir.path(), "s").expect("request");
        assert_eq!(req.command[..3], ["/bin/bash", "-c", "#!/bin/bash\necho hi\n"]);
        let both = parse("script: t.sh\ncommand: [x]\n").expect("valid");
        assert!(request(both, dir.path(), "s").is_err());
    }

    #[test]
    fn bad_values_are_refused_before_anything_is_sent() {
        for (text, field) in [
            ("command: [x]\narray: 9-0\n", "array"),
            ("command: [x]\nafter: soon:1\n", "after"),
            ("command: [x]\nworkdir: ../up\n", "workdir"),
            ("command: [x]\ntime: forever\n", "time"),
            ("gpus: 1\n", "command"),
        ] {
            let err = request(parse(text).expect("parses"), Path::new("."), "s").expect_err(text);
            assert!(err.to_string().contains(field), "{err}");
        }
    }
}
