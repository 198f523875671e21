//! `gantry submit` (queue a job, print its id; `--wait` waits for its result) and `gantry run`
//! (submit, stream its output, exit with its status: Slurm's `srun`).
//!
//! A batch script takes the command's place (`gantry submit train.sh`): its `#GANTRY` lines
//! before the first command hold flags, as `#SBATCH` lines do for `sbatch`, and flags on the
//! command line win over them. Its `#SBATCH` lines are read too, through [`super::sbatch`]
//! (`#GANTRY` wins over them). The script travels in the job (it need not exist on the node) and
//! runs under the interpreter its `#!` line names, `/bin/sh` without one.
//!
//! Both read their flags into a [`super::draft::JobDraft`] and send what its one pure
//! `resolve` makes of it, as `gantry apply` does with a job file.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, FromArgMatches};
use gantry_api::elastic::GpuRange;
use gantry_api::types::{SubmitRequest, SubmitResponse};
use gantry_api::workflow::ArraySpec;

use super::client::{Api, ApiStatus, ServerArgs, block_on};
use super::draft::{JobDraft, Program};
use super::watch::{self, Announcer};

/// Arguments of `gantry submit`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry submit --gpus 2 --cpu 8 --memory 32G -- python train.py --lr 3e-4
  gantry submit slurm.sh          # its #SBATCH lines too (--gres=gpu:2, -J, --mem, -t, -a, -d)
  gantry submit --gpus 1 --wait -- ./eval.sh && echo passed
  gantry submit --replicas 4 --gpus 2 -- torchrun train.py   # 4 workers × 2 GPUs, all at once
  gantry submit --nodes 2 --gpus-per-node 4 --per-node -- torchrun train.py   # one launcher per node
  gantry submit --gpus 2..8 -- sh -c 'torchrun --nproc-per-node $WORLD_SIZE train.py'   # elastic: 2 to 8 GPUs
  gantry submit train.sh            # flags from its `#GANTRY --gpus 2` lines
  gantry submit --gpus 4 train.sh -- --epochs 3   # --gpus wins; script arguments after --
  gantry submit --array 0-99%8 --gpus 1 -- python sweep.py   # 100 jobs, at most 8 at once
  gantry submit --after ok:12,any:13 -- python report.py     # starts once 12 succeeded and 13 ended
  gantry submit --gpu-model A100,H100 --gpus 8 --label exp=lr-sweep --workdir out -- ./train.sh
  gantry submit --chdir /shared/project -- python train.py   # start there, upload nothing")]
pub struct SubmitArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Whole GPUs: a count, or a range `MIN..MAX` for an elastic job (one node). The scheduler
    /// starts it at MIN, grows it onto idle GPUs when nothing waits for them and shrinks it
    /// back (never below MIN) when a job needs them; each resize is SIGTERM, the grace period
    /// to checkpoint, then a new attempt with WORLD_SIZE and CUDA_VISIBLE_DEVICES set to its
    /// width. Example: `--gpus 2..8`.
    #[arg(long, value_name = "N|MIN..MAX", default_value = "0", conflicts_with = "gpu_memory",
        value_parser = GpuRange::parse)]
    gpus: GpuRange,
    /// Workers of a gang, each with `--gpus` GPUs, started all at once (on one node if one has
    /// room, else on the fewest nodes). Each gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    /// MASTER_PORT as torchrun would set them; one failed worker ends the whole gang.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    replicas: Option<u32>,
    /// Nodes of a gang, with `--gpus-per-node` (Slurm's `--nodes`): one worker per GPU (a gang
    /// of N × G one-GPU workers), or with `--per-node` one worker per node holding its G GPUs.
    #[arg(long, value_name = "N", requires = "gpus_per_node", conflicts_with_all = ["replicas", "gpu_memory"],
        value_parser = clap::value_parser!(u32).range(1..=256))]
    nodes: Option<u32>,
    /// GPUs on each node of `--nodes` (Slurm's `--gpus-per-node`).
    #[arg(long, value_name = "G", requires = "nodes", value_parser = clap::value_parser!(u32).range(1..=64))]
    gpus_per_node: Option<u32>,
    /// One worker per node (a launcher such as torchrun that starts a process per GPU itself),
    /// with all of that node's G GPUs visible: PET_NNODES, PET_NODE_RANK and PET_NPROC_PER_NODE
    /// say so. A node with more than G free GPUs may hold two such workers, each its own G.
    #[arg(long, requires = "nodes")]
    per_node: bool,
    /// A slice of one GPU with this much GPU memory: MiB, or with a unit (`20G`, `20GiB`,
    /// `512M`). Example: `--gpu-memory 20G`.
    #[arg(long, value_name = "SIZE", value_parser = parse_mib)]
    gpu_memory: Option<u64>,
    /// Compute share of the slice, percent.
    #[arg(long, value_name = "PCT", requires = "gpu_memory")]
    gpu_compute: Option<u32>,
    /// CPU cores (fractions allowed).
    #[arg(long, value_name = "C", value_parser = super::draft::parse_cpu)]
    cpu: Option<u64>,
    /// Host memory: MiB, or with a unit (`32G`, `32GiB`, `512M`, `1T`). Example: `--memory 32G`.
    #[arg(long, value_name = "SIZE", value_parser = parse_mib)]
    memory: Option<u64>,
    /// Team (default: the token's team).
    #[arg(long)]
    team: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// The job may be preempted at any time, and so may run on idle GPUs their owners lent
    /// (`gantry team idle … --action lend`) until the owners use them again: a priority below 0
    /// (`--priority` when lower, else -1).
    #[arg(long)]
    preemptible: bool,
    /// Display name (default: the program's or the script's name).
    #[arg(long)]
    name: Option<String>,
    /// Placements lost to failures before the job fails.
    #[arg(long)]
    max_retries: Option<u32>,
    /// An environment variable for the job, `NAME=VALUE` (repeatable). Nothing else of this
    /// shell's environment reaches the job.
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Longest a run may take: `90s`, `30m`, `2h`, `1d`, Slurm's `HH:MM:SS`, `MM:SS` or
    /// `D-HH:MM:SS`, or a number of minutes. Then SIGTERM, the grace period, SIGKILL, and state
    /// `timeout` (`--wait` and `run` exit 124). Example: `--time 2h`.
    #[arg(long, value_name = "DURATION", value_parser = parse_time)]
    time: Option<u64>,
    /// Queue the job even if no registered node could ever hold what it asks for (one may join
    /// later); without it such a request is refused at once with the reason.
    #[arg(long)]
    wait_for_capacity: bool,
    /// A job array: one job per index, with `GANTRY_ARRAY_INDEX` (and `GANTRY_ARRAY_ID`) in its
    /// environment; `%N` runs at most N at once. Prints the array's id; `gantry cancel ID`
    /// cancels every member. Example: `--array 0-99%8`, `--array 1,3,5`.
    #[arg(long, value_name = "INDICES", value_parser = ArraySpec::parse)]
    pub(super) array: Option<ArraySpec>,
    /// Start only after other jobs ended as asked: `ok:ID` (succeeded), `notok:ID` (failed,
    /// cancelled or timed out), `any:ID` (ended). If one can no longer be met the job is
    /// cancelled with the reason. Example: `--after ok:12,any:13`.
    #[arg(long, value_name = "DEPS", value_parser = parse_after)]
    pub(super) after: Option<String>,
    /// Only GPUs of these models (a name matches `A100-80GB` as `A100`); refused when no node
    /// has one, unless --wait-for-capacity. Example: `--gpu-model A100,H100`.
    #[arg(long, value_name = "MODELS", value_delimiter = ',')]
    pub(super) gpu_model: Vec<String>,
    /// Run in this node pool (`gantry pools` lists them; default: `default`); its placement
    /// (pack or spread) decides where. Example: `--pool inference`.
    #[arg(long, value_name = "NAME")]
    pub(super) pool: Option<String>,
    /// Only on nodes with this label, `KEY=VALUE` (repeatable; every one must match): labels
    /// agents declare (`--label`) and `gpu.model`, `gpu.count`. Example: `--node-selector rack=r1`.
    #[arg(long = "node-selector", value_name = "KEY=VALUE", value_parser = gantry_api::workflow::parse_label)]
    pub(super) node_selector: Vec<(String, String)>,
    /// Start in this directory, relative to the job's private work directory (made for it;
    /// no `..`, not absolute). Example: `--workdir runs/out`.
    #[arg(long, value_name = "DIR", value_parser = parse_workdir)]
    pub(super) workdir: Option<String>,
    /// Do not upload the current directory: the job starts in an empty private directory (by
    /// default it starts in a private copy of the directory `gantry` runs in, `.gitignore` and
    /// `.gantryignore` honoured, at most 100 MiB).
    #[arg(long)]
    pub(super) no_upload: bool,
    /// Start in this absolute path on the node instead (storage every node mounts), as Slurm's
    /// `--chdir`; nothing is uploaded. Example: `--chdir /shared/project`.
    #[arg(long, value_name = "DIR", value_parser = parse_chdir, conflicts_with_all = ["workdir", "no_upload"])]
    pub(super) chdir: Option<String>,
    /// A dataset the job reads, `NAME=URL` (repeatable): `s3://bucket/prefix` (any
    /// S3-compatible endpoint), `https://…` or `file:///shared/path`. The node the scheduler
    /// picks copies it into its cache while the job waits, without holding its GPUs; the job
    /// starts once it is there and finds it, read-only, at `$GANTRY_INPUT_<NAME>`.
    /// Example: `--input imagenet=s3://datasets/imagenet`.
    #[arg(long = "input", value_name = "NAME=URL", value_parser = gantry_api::inputs::parse)]
    pub(super) inputs: Vec<gantry_api::inputs::Input>,
    /// The team secret S3 inputs are read with (`gantry secret set NAME AWS_ACCESS_KEY_ID=…
    /// AWS_SECRET_ACCESS_KEY=… AWS_ENDPOINT_URL=…`); without it, the node agent's environment.
    #[arg(long, value_name = "NAME", requires = "inputs")]
    pub(super) input_secret: Option<String>,
    /// A directory of results to upload when the job ends, `NAME=URL` (repeatable), the URL
    /// `s3://bucket/prefix` (a job writes to shared storage itself). The job writes into the
    /// empty directory `$GANTRY_OUTPUT_<NAME>` (private to it); when an attempt ends —
    /// succeeded, failed, cancelled or preempted — its files go to `prefix/<relative path>`
    /// (links and other users' files are skipped; at most 10 GiB and 100,000 files).
    /// Example: `--output model=s3://results/run-1`.
    #[arg(long = "output", value_name = "NAME=URL", value_parser = gantry_api::outputs::parse)]
    pub(super) outputs: Vec<gantry_api::outputs::Output>,
    /// The team secret outputs are uploaded with (keys as `--input-secret`'s); without it the
    /// `--input-secret`, else the node agent's environment.
    #[arg(long, value_name = "NAME", requires = "outputs")]
    pub(super) output_secret: Option<String>,
    /// Run in a container of this image: a registry reference (`host[:port]/repo:tag`,
    /// `…@sha256:…`, Docker Hub short names as Docker reads them). The node pulls it before the
    /// job starts; the command replaces the image's CMD and keeps its ENTRYPOINT; the job runs as
    /// its team's user with its working directory bound in at the same path.
    /// Example: `--image nvcr.io/nvidia/pytorch:24.05-py3`.
    #[arg(long, value_name = "REF", conflicts_with = "chdir")]
    pub(super) image: Option<String>,
    /// The team secret the image's registry is logged in to with (`gantry secret set NAME
    /// username=… password=…`; for NGC `username='$oauthtoken' password=<API key>`).
    #[arg(long, value_name = "NAME", requires = "image")]
    pub(super) registry_secret: Option<String>,
    /// The executable that replaces the image's ENTRYPOINT (the command follows it as its
    /// arguments; the image's CMD is not used), as `docker run --entrypoint`.
    #[arg(long, value_name = "EXE", requires = "image")]
    pub(super) entrypoint: Option<String>,
    /// The absolute directory in the container to start in (pyxis's flag); default: the
    /// uploaded directory, else the image's WORKDIR.
    #[arg(long, value_name = "DIR", requires = "image")]
    pub(super) container_workdir: Option<String>,
    /// A volume of the job's team to mount, `NAME:/PATH[:ro]` (repeatable; `gantry volumes`
    /// lists them), the path under /mnt, /data, /scratch, /datasets, /models, /workspace or
    /// /volumes. Example: `--volume data:/mnt/data:ro`.
    #[arg(long = "volume", value_name = "NAME:/PATH[:ro]")]
    pub(super) volumes: Vec<gantry_api::volumes::VolumeMount>,
    /// A label, `KEY=VALUE` (repeatable); `gantry jobs -l KEY=VALUE` selects by it.
    /// Example: `--label exp=lr-sweep`.
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE", value_parser = gantry_api::workflow::parse_label)]
    pub(super) labels: Vec<(String, String)>,
    /// Wait until the job ends, saying its state changes on stderr, and exit with its exit status
    /// (as `sbatch --wait`): `gantry submit --wait -- ./test.sh && deploy`.
    #[arg(long)]
    wait: bool,
    /// A batch script to run instead of a command; `#GANTRY --flag value` lines at its top are
    /// read as flags (the command line wins).
    #[arg(value_name = "SCRIPT")]
    script: Option<PathBuf>,
    /// The command to run, after `--` (with a script: the script's arguments).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Arguments of `gantry run`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  gantry run --gpus 1 -- sh -c 'echo my GPU: $CUDA_VISIBLE_DEVICES'   # with the driver: -- nvidia-smi -L
  gantry run --gpus 2 -- python train.py || echo \"training failed with $?\"
  gantry run eval.sh
  gantry run --gpus 1 -- python3 eval.py   # eval.py from this directory: it travels with the job")]
pub struct RunArgs {
    #[command(flatten)]
    pub(super) submit: SubmitArgs,
    /// Do not say the job's state changes on stderr (its output still streams).
    #[arg(short, long)]
    quiet: bool,
    /// Ctrl-C leaves the job running and only stops following it (by default the first
    /// Ctrl-C cancels the job, as `srun` does, and a second within a second detaches instead).
    #[arg(long)]
    detach: bool,
}

/// Submits; prints the id, or with `--wait` waits for the result.
pub fn run(args: SubmitArgs) -> anyhow::Result<()> {
    let args = match &args.script {
        Some(script) => reparse::<SubmitArgs>(script)?,
        None => args,
    };
    let wait = args.wait;
    if wait && args.array.is_some() {
        bail!("--wait waits for one job; for an array, submit a job with `--after any:ARRAY_ID --wait`");
    }
    let (api, id) = submit(args, false)?;
    println!("{id}");
    if !wait {
        return Ok(());
    }
    let job = block_on(watch::until_done(&api, id, &mut Announcer::default()))??;
    watch::result_of(&job)
}

/// Submits, streams the output until the job ends and exits with its status.
pub fn run_attached(args: RunArgs) -> anyhow::Result<()> {
    let args = match &args.submit.script {
        Some(script) => reparse::<RunArgs>(script)?,
        None => args,
    };
    let quiet = args.quiet;
    if args.submit.array.is_some() {
        bail!("`gantry run` runs one job; use `gantry submit --array` for an array");
    }
    let detach = args.detach;
    let (api, id) = submit(args.submit, quiet)?;
    let mut announce = Announcer::new(quiet);
    match block_on(follow_until_interrupted(&api, id, &mut announce, detach))?? {
        Some(job) => watch::result_of(&job),
        None => {
            eprintln!("job {id} keeps running: gantry cancel {id}");
            Err(watch::JobExitCode(130).into())
        }
    }
}

/// Follows job `id` to its end, as `srun` treats Ctrl-C: the first cancels the job (after a
/// second in which another Ctrl-C detaches instead) and follows it to its end; with `detach`
/// the first detaches. `None`: detached, the job left running.
async fn follow_until_interrupted(
    api: &Api,
    id: i64,
    announce: &mut Announcer,
    detach: bool,
) -> anyhow::Result<Option<gantry_api::model::Job>> {
    let following = super::logs::follow(api, id, announce);
    tokio::pin!(following);
    tokio::select! {
        done = &mut following => return done.map(Some),
        _ = tokio::signal::ctrl_c() => {}
    }
    if detach {
        return Ok(None);
    }
    eprintln!("gantry: cancelling job {id} (Ctrl-C again within 1 s leaves it running)");
    if tokio::time::timeout(std::time::Duration::from_secs(1), tokio::signal::ctrl_c()).await.is_ok() {
        return Ok(None);
    }
    let cancelled: anyhow::Result<gantry_api::model::Job> =
        api.post(&format!("/v1/jobs/{id}/cancel"), &serde_json::Map::new()).await;
    if let Err(e) = cancelled {
        eprintln!("gantry: could not cancel job {id}: {e:#}");
    }
    tokio::select! {
        done = &mut following => done.map(Some),
        _ = tokio::signal::ctrl_c() => Ok(None),
    }
}

/// Parses the command line again with the script's directives in front of it, so that the
/// command line's flags (later) win.
fn reparse<A: Args + FromArgMatches>(script: &Path) -> anyhow::Result<A> {
    let directives = directives(&read_script(script)?)?;
    let plain = directives.is_empty();
    let parsed = with_directives::<A>(directives, std::env::args_os().skip(2).collect());
    if plain {
        parsed
    } else {
        parsed.with_context(|| format!("in the #GANTRY lines of {}", script.display()))
    }
}

/// What `argv` (the command line after `gantry submit`) means with a script's directives in
/// front of it.
pub(super) fn with_directives<A: Args + FromArgMatches>(
    directives: Vec<String>,
    argv: Vec<OsString>,
) -> anyhow::Result<A> {
    let mut all: Vec<OsString> = directives.into_iter().map(OsString::from).collect();
    all.extend(argv);
    parse::<A>(all)
}

pub(super) fn parse<A: Args + FromArgMatches>(argv: Vec<OsString>) -> anyhow::Result<A> {
    let command = A::augment_args(clap::Command::new("gantry").no_binary_name(true).args_override_self(true));
    let matches = command.try_get_matches_from(argv).map_err(|e| anyhow::anyhow!("{}", e.render()))?;
    Ok(A::from_arg_matches(&matches)?)
}

fn read_script(script: &Path) -> anyhow::Result<String> {
    if !script.is_file() {
        bail!(
            "`{}` is not a script file; to run a program, put it after `--`: \
             gantry submit [FLAGS] -- {} …",
            script.display(),
            script.display()
        );
    }
    std::fs::read_to_string(script).with_context(|| format!("cannot read {}", script.display()))
}

/// Flags that say where to send the token: never taken from a script (a script from elsewhere
/// would send your token to its server).
const NOT_IN_SCRIPTS: &[&str] = &["--server", "--token", "--context", "--ca"];

/// The flags of the `#SBATCH` and `#GANTRY` lines before the script's first command (`#SBATCH`
/// ones first, so `#GANTRY` wins); the `#SBATCH` options not applied are said on stderr.
pub fn directives(text: &str) -> anyhow::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut slurm = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("#SBATCH") {
            slurm.extend(split_words(rest).with_context(|| format!("line {}", n + 1))?);
        } else if let Some(rest) = line.strip_prefix("#GANTRY") {
            let found = split_words(rest).with_context(|| format!("line {}", n + 1))?;
            if let Some(bad) = found.iter().find(|w| NOT_IN_SCRIPTS.iter().any(|f| w.starts_with(f))) {
                bail!("line {}: {bad} is not accepted in a script; pass it on the command line", n + 1);
            }
            words.extend(found);
        } else if !line.is_empty() && !line.starts_with('#') {
            break;
        }
    }
    let translated = super::sbatch::translate(&slurm)?;
    for warning in &translated.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(translated.flags.into_iter().chain(words).collect())
}

/// Splits on whitespace, keeping `'…'` and `"…"` together (no escapes inside).
fn split_words(text: &str) -> anyhow::Result<Vec<String>> {
    let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if quote.is_some() {
        bail!("unclosed quote");
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    Ok(words)
}

fn submit(args: SubmitArgs, quiet: bool) -> anyhow::Result<(Api, i64)> {
    let upload = !args.no_upload && args.chdir.is_none();
    let (server, mut draft) = draft(args)?;
    let api = Api::connect(&server)?;
    if upload {
        draft.upload = super::upload::current_dir(&api, draft.team.as_deref(), quiet)?;
    }
    let body = draft.resolve(request_id()?)?;
    let id = send(&api, &body)?.id;
    Ok((api, id))
}

/// The job the flags describe (a script named is read here), and where to send it.
pub(super) fn draft(args: SubmitArgs) -> anyhow::Result<(ServerArgs, JobDraft)> {
    let program = match &args.script {
        Some(script) => {
            Program::Script { path: script.clone(), text: read_script(script)?, args: args.command }
        }
        None => Program::Argv(args.command),
    };
    let after = match &args.after {
        Some(text) => gantry_api::workflow::parse_dependencies(text).map_err(anyhow::Error::msg)?,
        None => Vec::new(),
    };
    // `--nodes N --gpus-per-node G`: N×G one-GPU workers, or N workers of G with `--per-node`.
    let (gpus, replicas) = match (args.nodes, args.gpus_per_node) {
        (Some(nodes), Some(per)) => {
            if args.gpus != GpuRange::default() {
                anyhow::bail!("--nodes and --gpus-per-node give the GPUs; leave out --gpus");
            }
            if args.per_node {
                (GpuRange::count(per), Some(nodes))
            } else {
                (GpuRange::count(1), Some(nodes * per))
            }
        }
        _ => (args.gpus, args.replicas),
    };
    let draft = JobDraft {
        program,
        name: args.name,
        gpus,
        replicas,
        gpu_memory_mib: args.gpu_memory,
        gpu_compute_pct: args.gpu_compute,
        cpu_milli: args.cpu,
        memory_mib: args.memory,
        team: args.team,
        priority: if args.preemptible { args.priority.min(-1) } else { args.priority },
        max_retries: args.max_retries,
        env: args.env.into_iter().collect(),
        time_limit_s: args.time,
        wait_for_capacity: args.wait_for_capacity,
        array: args.array,
        after,
        labels: args.labels.into_iter().collect(),
        gpu_models: args.gpu_model,
        pool: args.pool,
        node_selector: args.node_selector.into_iter().collect(),
        workdir: args.workdir,
        upload: None,
        chdir: args.chdir,
        inputs: args.inputs,
        input_secret: args.input_secret,
        outputs: args.outputs,
        output_secret: args.output_secret,
        image: args.image,
        registry_secret: args.registry_secret,
        entrypoint: args.entrypoint,
        container_workdir: args.container_workdir,
        volumes: args.volumes,
    };
    Ok((args.server, draft))
}

/// Posts a submission, once more after a dropped connection (the request id keeps it one job,
/// which is also why the client may send it on to another server: [`Api::post_keyed`]).
pub(super) fn send(api: &Api, body: &SubmitRequest) -> anyhow::Result<SubmitResponse> {
    block_on(async {
        // A retry after a dropped connection carries the same request id: still one job.
        match api.post_keyed("/v1/jobs", body).await {
            Err(e) if e.to_string().contains("cannot reach") => Err(e),
            Err(e) if ApiStatus::of(&e).is_some_and(|s| (400..500).contains(&s)) => Err(in_flags(e)),
            Err(_) => api.post_keyed("/v1/jobs", body).await,
            ok => ok,
        }
    })?
}

/// The API's field names in a refusal, as the flags that set them (`time_limit_s:` is `--time:`).
fn in_flags(e: anyhow::Error) -> anyhow::Error {
    const FIELDS: &[(&str, &str)] = &[
        ("time_limit_s", "--time"),
        ("gpu_memory_mib", "--gpu-memory"),
        ("gpu_compute_pct", "--gpu-compute"),
        ("memory_mib", "--memory"),
        ("cpu_milli", "--cpu"),
        ("gpu_models", "--gpu-model"),
        ("pool", "--pool"),
        ("node_selector", "--node-selector"),
        ("gpus_max", "--gpus"),
        ("max_retries", "--max-retries"),
        ("labels", "--label"),
        ("env", "--env"),
        ("after", "--after"),
        ("array", "--array"),
        ("workdir", "--workdir"),
        ("chdir", "--chdir"),
        ("inputs", "--input"),
        ("input_secret", "--input-secret"),
        ("outputs", "--output"),
        ("output_secret", "--output-secret"),
        ("image", "--image"),
        ("registry_secret", "--registry-secret"),
        ("entrypoint", "--entrypoint"),
        ("container_workdir", "--container-workdir"),
        ("volumes", "--volume"),
        ("upload", "the upload"),
        ("replicas", "--replicas"),
        ("priority", "--priority"),
        ("team", "--team"),
        ("name", "--name"),
        ("gpus", "--gpus"),
        ("command", "the command"),
    ];
    let Some(status) = e.downcast_ref::<ApiStatus>() else { return e };
    let mut message = status.message.replace(" (wait_for_capacity)", "");
    if let Some((field, rest)) = message.split_once(": ")
        && let Some((_, flag)) = FIELDS.iter().find(|(f, _)| *f == field)
    {
        message = format!("{flag}: {rest}");
    }
    ApiStatus { status: status.status, message }.into()
}

fn request_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A size in MiB: a plain number is MiB (Slurm's `--mem` and our API's unit); `K`, `M`, `G`,
/// `T` with an optional `iB` (or `B`) suffix are binary units (`32G` = `32GiB` = 32768).
pub fn parse_mib(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = || format!("`{text}` is not a size: use MiB (`32768`) or a unit (`32G`, `32GiB`, `512M`)");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit = unit.trim();
    let unit = unit.strip_suffix("iB").or_else(|| unit.strip_suffix('B')).unwrap_or(unit);
    let kib = match unit.to_ascii_uppercase().as_str() {
        "K" => return Ok(number.div_ceil(1024)),
        "" | "M" => 1,
        "G" => 1 << 10,
        "T" => 1 << 20,
        _ => return Err(bad()),
    };
    number.checked_mul(kib).ok_or_else(|| format!("`{text}` is too large"))
}

/// A duration in seconds: `90s`, `30m`, `2h`, `1d`, `HH:MM:SS`, `MM:SS`, `D-HH:MM:SS`, or
/// minutes.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a duration: use 90s, 30m, 2h, 1d, HH:MM:SS or D-HH:MM:SS");
    let number = |t: &str| t.parse::<u64>().map_err(|_| bad());
    let t = text.trim();
    let seconds = if let Some((days, rest)) = t.split_once('-') {
        number(days)? * 86_400 + clock(rest, true).ok_or_else(bad)?
    } else if t.contains(':') {
        clock(t, false).ok_or_else(bad)?
    } else if let Some(unit) = t.chars().last().filter(char::is_ascii_alphabetic) {
        let n = number(&t[..t.len() - 1])?;
        n * match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        }
    } else {
        number(t)? * 60
    };
    if seconds == 0 { Err(format!("`{text}` is no time at all")) } else { Ok(seconds) }
}

/// `HH:MM:SS` or `MM:SS` (after days: `HH`, `HH:MM` or `HH:MM:SS`) in seconds.
fn clock(text: &str, after_days: bool) -> Option<u64> {
    let parts: Vec<u64> = text.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match (parts.as_slice(), after_days) {
        ([h], true) => Some(h * 3600),
        ([h, m], true) => Some(h * 3600 + m * 60),
        ([m, s], false) => Some(m * 60 + s),
        ([h, m, s], _) => Some(h * 3600 + m * 60 + s),
        _ => None,
    }
}

fn parse_after(text: &str) -> Result<String, String> {
    gantry_api::workflow::parse_dependencies(text).map(|_| text.to_owned())
}

fn parse_chdir(text: &str) -> Result<String, String> {
    gantry_api::workflow::check_chdir(text).map(|()| text.to_owned())
}

fn parse_workdir(text: &str) -> Result<String, String> {
    gantry_api::workflow::check_workdir(text).map(|()| text.to_owned())
}

pub(super) fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not NAME=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_stop_at_the_first_command_and_keep_quoted_words() {
        let text = "#!/bin/bash\n#GANTRY --gpus 2 --name 'my run'\n# a comment\n\n#GANTRY -e A=\"x y\"\necho hi\n#GANTRY --gpus 8\n";
        assert_eq!(directives(text).expect("parses"), ["--gpus", "2", "--name", "my run", "-e", "A=x y"]);
    }

    #[test]
    fn sbatch_lines_are_read_before_gantry_lines_so_gantry_wins() {
        let text =
            "#!/bin/bash\n#SBATCH --gres=gpu:2 -J slurm\n#GANTRY --name mine\n#SBATCH --mem=2G\necho hi\n";
        let flags = directives(text).expect("parses");
        assert_eq!(flags, ["--gpus", "2", "--name", "slurm", "--memory", "2048", "--name", "mine"]);
    }

    #[test]
    fn refusals_name_flags_not_api_fields_and_no_status_phrase() {
        let refusal = |m: &str| anyhow::Error::from(ApiStatus { status: 422, message: m.into() });
        let said = in_flags(refusal("time_limit_s: must be between 1 second and 31 days")).to_string();
        assert_eq!(said, "--time: must be between 1 second and 31 days");
        let said = in_flags(refusal(
            "no node could: submit with --wait-for-capacity (wait_for_capacity) to queue it",
        ));
        assert_eq!(said.to_string(), "no node could: submit with --wait-for-capacity to queue it");
        let failed = anyhow::Error::from(ApiStatus { status: 500, message: "internal error".into() });
        assert_eq!(failed.to_string(), "internal error (HTTP 500)");
    }

    #[test]
    fn sizes_are_mib_plain_or_with_binary_units() {
        assert_eq!(parse_mib("32768"), Ok(32768));
        assert_eq!(parse_mib("32G"), Ok(32768));
        assert_eq!(parse_mib("20GiB"), Ok(20480));
        assert_eq!(parse_mib("512M"), Ok(512));
        assert_eq!(parse_mib("512MB"), Ok(512));
        assert_eq!(parse_mib("1T"), Ok(1 << 20));
        assert_eq!(parse_mib("1536K"), Ok(2));
        for bad in ["", "G", "12 parsecs", "1.5G", "-3"] {
            assert!(parse_mib(bad).is_err(), "{bad}");
        }
        assert!(parse_mib("99999999999999999T").is_err());
    }

    #[test]
    fn time_limits_read_as_slurm_and_with_units() {
        let cases = [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86_400), ("01:30:00", 5400)];
        for (text, secs) in cases.into_iter().chain([("05:00", 300), ("1-02:00:00", 93_600), ("10", 600)]) {
            assert_eq!(parse_time(text), Ok(secs), "{text}");
        }
        assert!(parse_time("soon").is_err() && parse_time("0s").is_err() && parse_time("1:2:3:4").is_err());
    }

    #[test]
    fn a_script_may_not_say_where_the_token_goes() {
        let err = directives("#GANTRY --server=http://elsewhere\n").expect_err("refused");
        assert!(err.to_string().contains("--server"), "{err}");
    }
}
