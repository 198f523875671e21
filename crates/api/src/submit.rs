//! A job submission, typed: what the CLI builds, what travels, what the server checks and the
//! store keeps ([`SubmitRequest`]).
//!
//! Each field arrives as the value it means: a GPU count or range ([`GpuRange`]), the array's
//! indices ([`ArraySpec`]), its dependencies ([`Dependency`]). Text such as `0-99%8` or `2..8` is
//! parsed once, where it is typed (the CLI, a job file), and a value that does not parse never
//! becomes a request. The JSON keeps the shape it had before the fields were typed, so scripts
//! that post it need no change: `"gpus": 2, "gpus_max": 8` is the range `2..8` and `"array":
//! "0-99%8"` the array; a bad array is refused while the body is read (422, naming `array`).
//! The JSON form is `SubmitJson`, private to this module; serde converts through it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::elastic::GpuRange;
use crate::model::JobRequest;
use crate::workflow::{ArraySpec, Dependency};

/// A job submission.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SubmitJson", into = "SubmitJson")]
pub struct SubmitRequest {
    /// argv; the first element is the program.
    pub command: Vec<String>,
    /// Whole GPUs: a count, or a range for an elastic job (one node, `gpus` to `gpus_max` on the
    /// wire). For a gang, each worker's.
    pub gpus: GpuRange,
    /// A slice of one GPU with this much memory, MiB (0: no slice).
    pub gpu_memory_mib: u64,
    /// Compute share of the slice, percent (0: not limited).
    pub gpu_compute_pct: u32,
    /// CPU, milli-cores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// Team (default: the token's team, else `default`).
    pub team: Option<String>,
    /// Higher runs first (-1000..=1000).
    pub priority: i32,
    /// Display name (default: the program's name).
    pub name: Option<String>,
    /// Placements lost to node or GPU failures before the job fails (default 3).
    pub max_retries: Option<u32>,
    /// Idempotency key: a retried submission with the same key returns the same job.
    pub request_id: Option<String>,
    /// Environment variables for the job.
    pub env: BTreeMap<String, String>,
    /// Queue the job even when no registered node could ever hold what it asks for.
    pub wait_for_capacity: bool,
    /// Longest a run may take, seconds.
    pub time_limit_s: Option<u64>,
    /// A job array: its indices and how many members may run at once.
    pub array: Option<ArraySpec>,
    /// Jobs to wait for.
    pub after: Vec<Dependency>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Acceptable GPU models (empty: any).
    pub gpu_models: Vec<String>,
    /// The node pool to run in (none: the selector's `pool`, else `default`).
    pub pool: Option<String>,
    /// Node labels every node it runs on must carry.
    pub node_selector: BTreeMap<String, String>,
    /// Where the job starts, relative to its private directory.
    pub workdir: Option<String>,
    /// Workers of a gang (None or 1: a job of one worker).
    pub replicas: Option<u32>,
    /// The working directory uploaded for it (`gantry submit` packs the one it runs in).
    pub upload: Option<crate::upload::Upload>,
    /// Start in this absolute path on the node instead of a private copy (Slurm's `--chdir`).
    pub chdir: Option<String>,
    /// Declared inputs, staged onto its node while it waits.
    pub inputs: Vec<crate::inputs::Input>,
    /// The team secret its S3 inputs are read with.
    pub input_secret: Option<String>,
    /// Declared outputs, uploaded when an attempt ends.
    pub outputs: Vec<crate::outputs::Output>,
    /// The team secret its outputs are uploaded with (none: `input_secret`).
    pub output_secret: Option<String>,
    /// The container image it runs in (none: a process on the node).
    pub image: Option<String>,
    /// The team secret its image's registry is logged in to with (`username`, `password`).
    pub registry_secret: Option<String>,
    /// The executable that replaces the image's entrypoint.
    pub entrypoint: Option<String>,
    /// The directory in the container it starts in.
    pub container_workdir: Option<String>,
    /// The team's volumes it mounts, and where.
    pub volumes: Vec<crate::volumes::VolumeMount>,
}

impl SubmitRequest {
    /// What the job asks of a node, as the store and the scheduler keep it.
    pub fn resources(&self) -> JobRequest {
        JobRequest {
            gpus: self.gpus.min,
            gpus_max: self.gpus.max,
            gpu_memory_mib: self.gpu_memory_mib,
            gpu_compute_pct: self.gpu_compute_pct,
            cpu_milli: self.cpu_milli,
            memory_mib: self.memory_mib,
        }
    }

    /// Workers of the job: 1 unless it is a gang.
    pub fn workers(&self) -> u32 {
        self.replicas.unwrap_or(1).max(1)
    }
}

impl TryFrom<SubmitJson> for SubmitRequest {
    type Error = String;

    fn try_from(j: SubmitJson) -> Result<Self, String> {
        Ok(Self {
            command: j.command,
            gpus: GpuRange { min: j.gpus, max: j.gpus_max },
            gpu_memory_mib: j.gpu_memory_mib,
            gpu_compute_pct: j.gpu_compute_pct,
            cpu_milli: j.cpu_milli,
            memory_mib: j.memory_mib,
            team: j.team,
            priority: j.priority,
            name: j.name,
            max_retries: j.max_retries,
            request_id: j.request_id,
            env: j.env,
            wait_for_capacity: j.wait_for_capacity,
            time_limit_s: j.time_limit_s,
            array: j.array.as_deref().map(ArraySpec::parse).transpose()?,
            after: j.after,
            labels: j.labels,
            gpu_models: j.gpu_models,
            pool: j.pool,
            node_selector: j.node_selector,
            workdir: j.workdir,
            replicas: j.replicas,
            upload: j.upload,
            chdir: j.chdir,
            inputs: j.inputs,
            input_secret: j.input_secret,
            outputs: j.outputs,
            output_secret: j.output_secret,
            image: j.image,
            registry_secret: j.registry_secret,
            entrypoint: j.entrypoint,
            container_workdir: j.container_workdir,
            volumes: j.volumes,
        })
    }
}

impl From<SubmitRequest> for SubmitJson {
    fn from(r: SubmitRequest) -> Self {
        Self {
            command: r.command,
            gpus: r.gpus.min,
            gpus_max: r.gpus.max,
            gpu_memory_mib: r.gpu_memory_mib,
            gpu_compute_pct: r.gpu_compute_pct,
            cpu_milli: r.cpu_milli,
            memory_mib: r.memory_mib,
            team: r.team,
            priority: r.priority,
            name: r.name,
            max_retries: r.max_retries,
            request_id: r.request_id,
            env: r.env,
            wait_for_capacity: r.wait_for_capacity,
            time_limit_s: r.time_limit_s,
            array: r.array.map(|a| a.to_string()),
            after: r.after,
            labels: r.labels,
            gpu_models: r.gpu_models,
            pool: r.pool,
            node_selector: r.node_selector,
            workdir: r.workdir,
            replicas: r.replicas,
            upload: r.upload,
            chdir: r.chdir,
            inputs: r.inputs,
            input_secret: r.input_secret,
            outputs: r.outputs,
            output_secret: r.output_secret,
            image: r.image,
            registry_secret: r.registry_secret,
            entrypoint: r.entrypoint,
            container_workdir: r.container_workdir,
            volumes: r.volumes,
        }
    }
}

/// The OpenAPI document describes the JSON form, under the name clients know.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SubmitRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <SubmitJson as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SubmitRequest {
    fn name() -> std::borrow::Cow<'static, str> {
        <SubmitJson as utoipa::ToSchema>::name()
    }

    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
        <SubmitJson as utoipa::ToSchema>::schemas(schemas);
    }
}

// The JSON form the HTTP API has always taken (`gpus` and `gpus_max`, `array` as Slurm's
// text), which `SubmitRequest` reads and writes; its doc comments are the OpenAPI document's.
/// A job submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = SubmitRequest))]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitJson {
    /// argv; the first element is the program.
    command: Vec<String>,
    /// Whole GPUs; for an elastic job, its minimum.
    #[serde(default)]
    gpus: u32,
    /// Makes the job elastic: it runs on one node with `gpus` to `gpus_max` whole GPUs
    /// (`--gpus 2..8` is `"gpus": 2, "gpus_max": 8`). The scheduler starts it at `gpus`, grows
    /// it onto idle GPUs when no job waits for them and shrinks it back (never below `gpus`)
    /// when one does; each resize stops it (SIGTERM, then the grace period, to checkpoint) and
    /// starts a new attempt with `WORLD_SIZE` and `CUDA_VISIBLE_DEVICES` set to its new width.
    /// At least `gpus`, at most the GPUs of the largest node (422 otherwise); not with a slice
    /// or `replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpus_max: Option<u32>,
    /// A slice of one GPU with this much memory, MiB (not with `gpus`).
    #[serde(default)]
    gpu_memory_mib: u64,
    /// Compute share of the slice, percent.
    #[serde(default)]
    gpu_compute_pct: u32,
    /// CPU, milli-cores.
    #[serde(default)]
    cpu_milli: u64,
    /// Host memory, MiB.
    #[serde(default)]
    memory_mib: u64,
    /// Team (default: the token's team, else `default`).
    team: Option<String>,
    /// Higher runs first (-1000..=1000).
    #[serde(default)]
    priority: i32,
    /// Display name (default: the program's name).
    name: Option<String>,
    /// Placements lost to node or GPU failures before the job fails (default 3).
    max_retries: Option<u32>,
    /// Idempotency key: a retried submission with the same key returns the same job.
    request_id: Option<String>,
    /// Environment variables for the job (not `GANTRY_*`, `CUDA_MPS_*` or
    /// `CUDA_VISIBLE_DEVICES`, which Gantry sets). Nothing of the agent's environment reaches it.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Queue the job even when no registered node could ever hold what it asks for (a larger
    /// node may join later). Without it such a submission is refused with the reason (422).
    #[serde(default)]
    wait_for_capacity: bool,
    /// Longest a run may take, seconds (1 to 31 days); then SIGTERM, the grace period, SIGKILL,
    /// and the job ends in state `timeout`. None: no limit.
    time_limit_s: Option<u64>,
    /// A job array in Slurm's syntax: `0-99`, `1,3,5`, `0-99%8` (at most 8 members at once).
    /// One job per index, with `GANTRY_ARRAY_INDEX` and `GANTRY_ARRAY_ID` in its environment;
    /// the response's id is the array's (its first member's).
    array: Option<String>,
    /// Jobs to wait for: the job starts once each has ended as asked; if one cannot any more
    /// (an `ok` dependency failed) the job is cancelled with the reason. Only jobs of teams the
    /// caller sees (404 otherwise).
    #[serde(default)]
    after: Vec<crate::workflow::Dependency>,
    /// Labels (`key: value`, selectable with `GET /v1/jobs?label=key=value`).
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Acceptable GPU models, e.g. `["A100", "H100"]` (empty: any); refused when no registered
    /// node has one, unless `wait_for_capacity`.
    #[serde(default)]
    gpu_models: Vec<String>,
    /// The node pool to run in (`gantry pools` lists them; a node's `pool` label names its
    /// pool). None: the node selector's `pool`, else `default`. Refused (422) when the pool has
    /// no node that could hold the job (unless `wait_for_capacity`), 403 when the job's team may
    /// not use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pool: Option<String>,
    /// Node labels every node the job runs on must carry (`gpu.model`, `gpu.count` and the
    /// labels agents declare with `--label`), e.g. `{"rack": "r1"}`; within its pool.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    node_selector: BTreeMap<String, String>,
    /// Where the job starts: a relative path inside its private directory, created for it
    /// (no `..`, not absolute).
    workdir: Option<String>,
    /// Workers of a gang (2 to 256), each asking for `gpus` whole GPUs, placed all at once:
    /// on one node when one has room, else on the fewest nodes. Each worker gets `RANK`,
    /// `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`; one failed worker ends the
    /// whole gang. None or 1: a job of one worker.
    #[serde(default)]
    replicas: Option<u32>,
    /// The working directory the job starts in a private copy of: the `digest`, `files` and
    /// `bytes` the server answered when its manifest was posted (`PUT /v1/uploads/manifest`),
    /// checked again here (422 when the team holds no such upload). `workdir` is relative to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upload: Option<crate::upload::Upload>,
    /// Start in this absolute path on the node (Slurm's `--chdir`) instead of the job's private
    /// directory; not with `upload` or `workdir`. The node must have it (else the job fails with
    /// the reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chdir: Option<String>,
    /// Declared inputs (`--input NAME=URL`): each `{"name", "url"}`, the URL `s3://bucket/prefix`
    /// (any S3-compatible endpoint), `https://…` or `file:///path` (storage the nodes mount).
    /// The node the scheduler picks stages them into its cache while the job is pending, without
    /// holding its GPUs; the job starts once they are there, with `GANTRY_INPUT_<NAME>` naming a
    /// read-only copy. At most 16, names of letters, digits and `_`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<crate::inputs::Input>,
    /// The team secret (`gantry secret set NAME KEY=VALUE…`) S3 inputs are read with
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`); none:
    /// the agent's environment, as the AWS SDKs read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_secret: Option<String>,
    /// Declared outputs (`--output NAME=URL`): each `{"name", "url"}`, the URL `s3://bucket/prefix`
    /// (a job writes to storage the nodes mount by itself). Each attempt gets an empty directory
    /// per output, private to the job's user, at `GANTRY_OUTPUT_<NAME>`; when the attempt ends
    /// (succeeded, failed, cancelled or preempted), after its GPUs are released, the agent
    /// uploads the regular files the job's user owns there to `prefix/<relative path>` (links
    /// and other users' files are skipped and counted; at most 10 GiB and 100,000 files) and
    /// removes the directory. `gantry job N` shows each upload's `state`, `bytes`, `files`,
    /// `skipped`, `uploaded_s`, `attempt` and `error`. At most 16, names as inputs'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    outputs: Vec<crate::outputs::Output>,
    /// The team secret outputs are uploaded with (keys as `input_secret`'s); none: the job's
    /// `input_secret`, else the agent's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_secret: Option<String>,
    /// The container image the job runs in (`--image`): a registry reference
    /// (`host[:port]/repo:tag` or `…@sha256:…`; Docker Hub's short names as Docker reads them).
    /// The node pulls it before the job starts (the job's `image` then carries the digest it
    /// runs); the command replaces the image's `Cmd` and keeps its `Entrypoint`, and the job runs
    /// as its team's user, its work directory bound in at the same path. 422 for a malformed
    /// reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    /// The team secret (`gantry secret set NAME username=… password=…`) the image's registry is
    /// logged in to with (HTTP basic, or the registry's token service); none: anonymous. A
    /// layer the node holds from another team's pull is used only after the manifest was
    /// fetched with these credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    registry_secret: Option<String>,
    /// The executable that replaces the image's `Entrypoint` (`--entrypoint`, as `docker run
    /// --entrypoint`): the job's command follows it as arguments, and the image's `Cmd` is not
    /// used. Only with `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    entrypoint: Option<String>,
    /// The absolute directory inside the container the job starts in (`--container-workdir`,
    /// pyxis's name); default: the uploaded working directory when there is one (at the same
    /// path as on the node), else the image's `WorkingDir`. Only with `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_workdir: Option<String>,
    /// Volumes of the job's team it mounts (`gantry volume create`; `--volume NAME:/mnt/x[:ro]`):
    /// each `{"name", "path", "read_only"}`, the path under /mnt, /data, /scratch, /datasets,
    /// /models, /workspace or /volumes. 404 for a volume the team does not have; a job mounting
    /// a node-local volume runs on that node only. At most 8.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    volumes: Vec<crate::volumes::VolumeMount>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::DependencyKind;

    #[test]
    fn the_json_of_before_the_fields_were_typed_still_reads() {
        let old = r#"{"command": ["train"], "gpus": 2, "gpus_max": 8, "array": "0-3,7%2",
            "after": [{"kind": "ok", "job": 12}]}"#;
        let r: SubmitRequest = serde_json::from_str(old).expect("old form");
        assert_eq!(r.gpus, GpuRange { min: 2, max: Some(8) });
        assert_eq!(r.array, Some(ArraySpec { indices: vec![0, 1, 2, 3, 7], max_running: Some(2) }));
        assert_eq!(r.after, [Dependency { kind: DependencyKind::Ok, job: 12 }]);
        let back = serde_json::to_value(&r).expect("json");
        assert_eq!((back["gpus"].clone(), back["gpus_max"].clone()), (2.into(), 8.into()));
        assert_eq!(back["array"], "0-3,7%2");
        assert_eq!(serde_json::from_value::<SubmitRequest>(back).expect("round trip"), r);
    }

    #[test]
    fn a_bad_array_or_an_unknown_field_is_refused_while_reading() {
        let err = serde_json::from_str::<SubmitRequest>(r#"{"command": ["x"], "array": "9-0"}"#)
            .expect_err("counts down");
        assert!(err.to_string().starts_with("array: "), "{err}");
        let err =
            serde_json::from_str::<SubmitRequest>(r#"{"command": ["x"], "gpu": 1}"#).expect_err("unknown");
        assert!(err.to_string().contains("unknown field `gpu`"), "{err}");
    }

    #[test]
    fn the_resources_are_what_the_store_keeps() {
        let r =
            SubmitRequest { gpus: GpuRange { min: 1, max: Some(4) }, memory_mib: 512, ..Default::default() };
        let j = r.resources();
        assert_eq!((j.gpus, j.gpus_max, j.memory_mib, r.workers()), (1, Some(4), 512, 1));
    }
}
