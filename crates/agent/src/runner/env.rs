//! A job's environment, built from an allow-list.
//!
//! The agent's own environment holds its credentials (`GANTRY_JOIN_TOKEN`, `GANTRY_TOKEN`) and
//! whatever its service manager put there; a job inheriting it would print the join token in its
//! first `env`. So a job starts from nothing and gets, in increasing precedence:
//!
//! 1. a base: `PATH` (a fixed default), `HOME` (its work directory), `LANG` (the agent's, else
//!    `C.UTF-8`), `USER` and `LOGNAME`, and the MPS directories when the agent has them (jobs
//!    need them to reach the MPS control daemon; they are paths, not secrets);
//! 2. the variables the job declared, which may replace the base (a job may bring its own
//!    `PATH`) but never a placement variable ([`gantry_api::job_env::check`]);
//! 3. the placement: `GANTRY_JOB_ID`, for an array member `GANTRY_ARRAY_ID` and
//!    `GANTRY_ARRAY_INDEX`, `CUDA_VISIBLE_DEVICES` and the GPU grant
//!    (`GANTRY_GPU_MEMORY_LIMIT_MIB` and, under MPS, the MPS share limits); for an elastic job
//!    (`--gpus 2..8`) `WORLD_SIZE`, its width in this attempt (its number of GPUs), which
//!    changes when the scheduler resizes it;
//! 4. the launch variables training code and launchers read ([`launch`]). A gang's worker is
//!    one process (or one launcher) that sees its own GPUs only, so it is a "node" of its own
//!    to a launcher: `RANK` and `WORLD_SIZE` (workers), `LOCAL_RANK` 0 and `LOCAL_WORLD_SIZE` 1
//!    (`torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` names a GPU it sees), `NODE_RANK`
//!    and `NNODES` (= `RANK` and `WORLD_SIZE`), `MASTER_ADDR`, `MASTER_PORT`, `GANTRY_GANG_ID`,
//!    and torchrun's `PET_NNODES`, `PET_NODE_RANK`, `PET_NPROC_PER_NODE` (the worker's GPUs),
//!    `PET_MASTER_ADDR`, `PET_MASTER_PORT`: `gantry submit --replicas 4 --gpus 2 -- torchrun
//!    train.py` runs 4 launchers of 2 processes, one world of 8. Every job gets Slurm's
//!    `SLURM_JOB_ID` (a worker: its gang's), `SLURM_JOB_NAME`, `SLURM_NTASKS`, `SLURM_PROCID`,
//!    `SLURM_LOCALID` (the worker's rank among the gang's workers on its node), `SLURM_NODEID`,
//!    `SLURM_JOB_NUM_NODES`, `SLURM_GPUS_ON_NODE` (GPUs it sees), `SLURM_SUBMIT_DIR` (where it
//!    starts), `SLURM_CPUS_PER_TASK` (when it asked for CPUs) and, for an array member,
//!    `SLURM_ARRAY_JOB_ID` and `SLURM_ARRAY_TASK_ID`.
//!
//! A job can declare none of the variables of 3 and 4.

use std::collections::BTreeMap;
use std::path::Path;

use gantry_api::types::Assignment;

use super::error::AgentError;

/// `PATH` for jobs that do not declare one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables of the agent passed to jobs unchanged: locations of the MPS daemon.
const PASSED_THROUGH: &[&str] = &["CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"];

/// The environment of one attempt run as `user` in its work directory `workdir`, with `home`
/// its `$HOME`.
pub fn build(
    a: &Assignment,
    user: &str,
    workdir: &Path,
    home: &Path,
) -> Result<BTreeMap<String, String>, AgentError> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_owned(), DEFAULT_PATH.to_owned());
    env.insert("HOME".to_owned(), home.display().to_string());
    env.insert("LANG".to_owned(), std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".to_owned()));
    env.insert("USER".to_owned(), user.to_owned());
    env.insert("LOGNAME".to_owned(), user.to_owned());
    for name in PASSED_THROUGH {
        if let Ok(value) = std::env::var(name) {
            env.insert((*name).to_owned(), value);
        }
    }
    for (name, value) in &a.env {
        gantry_api::job_env::check(name, value).map_err(AgentError::Refused)?;
        env.insert(name.clone(), value.clone());
    }
    env.extend(placement(a, mps_in_use()));
    let start = a.chdir.clone().unwrap_or_else(|| match &a.workdir {
        Some(w) => workdir.join(w).display().to_string(),
        None => workdir.display().to_string(),
    });
    env.extend(launch(a, &start));
    Ok(env)
}

/// The variables that describe where the job runs and what it may use of its GPUs.
fn placement(a: &Assignment, mps: bool) -> Vec<(String, String)> {
    let mut vars = vec![
        ("CUDA_VISIBLE_DEVICES".to_owned(), a.gpu_uuids.join(",")),
        ("GANTRY_JOB_ID".to_owned(), a.job_id.to_string()),
    ];
    if let Some(array) = a.array {
        vars.push(("GANTRY_ARRAY_ID".to_owned(), array.id.to_string()));
        vars.push(("GANTRY_ARRAY_INDEX".to_owned(), array.index.to_string()));
    }
    vars.extend(rendezvous(a));
    if a.elastic && a.gang.is_none() {
        vars.push(("WORLD_SIZE".to_owned(), a.gpu_uuids.len().to_string()));
    }
    if a.gpu_memory_mib > 0 {
        vars.push(("GANTRY_GPU_MEMORY_LIMIT_MIB".to_owned(), a.gpu_memory_mib.to_string()));
        if mps {
            let limits: Vec<String> =
                a.gpu_uuids.iter().map(|u| format!("{u}={}M", a.gpu_memory_mib)).collect();
            vars.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), limits.join(",")));
            if a.gpu_compute_pct > 0 {
                vars.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(), a.gpu_compute_pct.to_string()));
            }
        }
    }
    vars
}

/// A gang worker's rendezvous variables (none for a job of one worker or a gang not yet placed).
fn rendezvous(a: &Assignment) -> Vec<(String, String)> {
    let Some(g) = a.gang.as_ref().filter(|g| g.is_worker()) else {
        return Vec::new();
    };
    let (Some(rank), Some(_), Some(addr), Some(port)) = (g.rank, g.local_rank, &g.master_addr, g.master_port)
    else {
        return Vec::new();
    };
    let per_worker = a.gpu_uuids.len().max(1);
    [
        ("GANTRY_GANG_ID", g.id.to_string()),
        ("MASTER_ADDR", addr.clone()),
        ("MASTER_PORT", port.to_string()),
        ("WORLD_SIZE", g.replicas.to_string()),
        ("RANK", rank.to_string()),
        ("LOCAL_RANK", "0".to_owned()),
        ("LOCAL_WORLD_SIZE", "1".to_owned()),
        ("NODE_RANK", rank.to_string()),
        ("NNODES", g.replicas.to_string()),
        ("PET_NNODES", g.replicas.to_string()),
        ("PET_NODE_RANK", rank.to_string()),
        ("PET_NPROC_PER_NODE", per_worker.to_string()),
        ("PET_MASTER_ADDR", addr.clone()),
        ("PET_MASTER_PORT", port.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Slurm's variables, as `srun` would set them for this task (see the module documentation);
/// `start` is the directory the job starts in.
fn launch(a: &Assignment, start: &str) -> Vec<(String, String)> {
    let worker = a.gang.as_ref().filter(|g| g.is_worker());
    let job_id = worker.map_or(a.job_id, |g| g.id);
    let mut vars = vec![
        ("SLURM_JOB_ID", job_id.to_string()),
        ("SLURM_JOB_NAME", a.launch.name.clone()),
        ("SLURM_NTASKS", worker.map_or(1, |g| g.replicas).to_string()),
        ("SLURM_PROCID", worker.and_then(|g| g.rank).unwrap_or(0).to_string()),
        ("SLURM_LOCALID", worker.and_then(|g| g.local_rank).unwrap_or(0).to_string()),
        ("SLURM_NODEID", a.launch.node_rank.unwrap_or(0).to_string()),
        ("SLURM_JOB_NUM_NODES", a.launch.nodes.unwrap_or(1).to_string()),
        ("SLURM_GPUS_ON_NODE", a.gpu_uuids.len().to_string()),
        ("SLURM_SUBMIT_DIR", start.to_owned()),
    ];
    if a.cpu_milli > 0 {
        vars.push(("SLURM_CPUS_PER_TASK", a.cpu_milli.div_ceil(1000).to_string()));
    }
    if let Some(array) = a.array {
        vars.push(("SLURM_ARRAY_JOB_ID", array.id.to_string()));
        vars.push(("SLURM_ARRAY_TASK_ID", array.index.to_string()));
    }
    vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Whether an MPS control daemon's pipe directory is configured.
fn mps_in_use() -> bool {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").is_some() || Path::new("/tmp/nvidia-mps/control").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(env: &[(&str, &str)]) -> Assignment {
        Assignment {
            job_id: 7,
            attempt: 1,
            command: vec!["true".into()],
            gpu_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            gpu_memory_mib: 0,
            gpu_compute_pct: 0,
            team: "t".into(),
            user: Some("u".into()),
            memory_mib: 0,
            cpu_milli: 0,
            pids_limit: None,
            env: env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            log_limit_bytes: 0,
            time_limit_s: None,
            array: None,
            workdir: None,
            gang: None,
            elastic: false,
            port: None,
            upload: None,
            chdir: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            launch: Default::default(),
            image: None,
            volumes: Vec::new(),
        }
    }

    #[test]
    fn an_elastic_job_learns_its_width_as_world_size_and_a_rigid_one_does_not() {
        let elastic = Assignment { elastic: true, ..assignment(&[]) };
        let env = build(&elastic, "gantry-job", Path::new("/w/7-1"), Path::new("/homes/t/u")).expect("env");
        assert_eq!((env["WORLD_SIZE"].as_str(), env["CUDA_VISIBLE_DEVICES"].as_str()), ("2", "GPU-a,GPU-b"));
        let rigid =
            build(&assignment(&[]), "gantry-job", Path::new("/w/7-1"), Path::new("/homes/t/u")).expect("env");
        assert!(!rigid.contains_key("WORLD_SIZE"));
    }

    #[test]
    fn an_array_member_learns_its_array_and_index() {
        let a = Assignment {
            array: Some(gantry_api::workflow::ArrayMember { id: 12, index: 3, max_running: Some(8) }),
            ..assignment(&[])
        };
        let env = build(&a, "gantry-job", Path::new("/w/15-1"), Path::new("/homes/t/u")).expect("env");
        assert_eq!((env["GANTRY_ARRAY_ID"].as_str(), env["GANTRY_ARRAY_INDEX"].as_str()), ("12", "3"));
    }

    #[test]
    fn a_gang_worker_gets_the_rendezvous_consistent_with_the_gpus_it_sees_and_cannot_declare_it() {
        let mut a = assignment(&[]);
        a.gang = Some(gantry_api::model::Gang {
            id: 5,
            replicas: 4,
            rank: Some(3),
            local_rank: Some(1),
            master_addr: Some("node-a".into()),
            master_port: Some(29_505),
        });
        a.launch = gantry_api::types::Launch { name: "train".into(), node_rank: Some(1), nodes: Some(2) };
        a.cpu_milli = 1_500;
        let env = build(&a, "u", Path::new("/w"), Path::new("/homes/t/u")).expect("env");
        let want = [
            ("MASTER_ADDR", "node-a"),
            ("MASTER_PORT", "29505"),
            ("WORLD_SIZE", "4"),
            ("RANK", "3"),
            // The worker sees two GPUs (GPU-a, GPU-b): its local rank names the first of them.
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "1"),
            ("NODE_RANK", "3"),
            ("NNODES", "4"),
            ("GANTRY_GANG_ID", "5"),
            ("PET_NNODES", "4"),
            ("PET_NODE_RANK", "3"),
            ("PET_NPROC_PER_NODE", "2"),
            ("PET_MASTER_ADDR", "node-a"),
            ("PET_MASTER_PORT", "29505"),
            ("SLURM_JOB_ID", "5"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_SUBMIT_DIR", "/w"),
            ("SLURM_CPUS_PER_TASK", "2"),
        ];
        let got: Vec<(&str, &str)> = want.iter().map(|(k, _)| (*k, env[*k].as_str())).collect();
        assert_eq!(got, want);
        let local: usize = env["LOCAL_RANK"].parse().expect("a number");
        assert!(local < env["CUDA_VISIBLE_DEVICES"].split(',').count());
        for name in ["RANK", "MASTER_ADDR", "LOCAL_WORLD_SIZE", "PET_NNODES", "SLURM_PROCID"] {
            a.env = [(name.to_owned(), "0".to_owned())].into();
            assert!(
                build(&a, "u", Path::new("/w"), Path::new("/homes/t/u")).is_err(),
                "{name} must not be declarable"
            );
        }
    }

    #[test]
    fn an_array_member_gets_slurms_array_variables_and_its_own_job_id() {
        let a = Assignment {
            array: Some(gantry_api::workflow::ArrayMember { id: 12, index: 3, max_running: Some(8) }),
            chdir: Some("/shared/proj".into()),
            ..assignment(&[])
        };
        let env = build(&a, "u", Path::new("/w/15-1"), Path::new("/homes/t/u")).expect("env");
        let got: Vec<&str> =
            ["SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_NTASKS", "SLURM_SUBMIT_DIR"]
                .iter()
                .map(|k| env[*k].as_str())
                .collect();
        assert_eq!(got, ["7", "12", "3", "1", "/shared/proj"]);
    }

    #[test]
    fn a_job_of_one_worker_gets_no_rendezvous() {
        let env = build(&assignment(&[]), "u", Path::new("/w"), Path::new("/homes/t/u")).expect("env");
        assert!(!env.contains_key("RANK") && !env.contains_key("MASTER_ADDR"));
    }

    #[test]
    fn a_job_gets_the_base_its_placement_and_nothing_of_the_agents() {
        let env =
            build(&assignment(&[]), "gantry-job", Path::new("/w/7-1"), Path::new("/homes/t/u")).expect("env");
        let names: Vec<&str> = env.keys().map(String::as_str).filter(|n| !n.starts_with("SLURM_")).collect();
        let mut expected =
            vec!["CUDA_VISIBLE_DEVICES", "GANTRY_JOB_ID", "HOME", "LANG", "LOGNAME", "PATH", "USER"];
        expected.extend(PASSED_THROUGH.iter().filter(|n| std::env::var_os(n).is_some()));
        expected.sort_unstable();
        assert_eq!(names, expected);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
        assert_eq!(env["HOME"], "/homes/t/u", "the user's persistent home");
        assert_eq!(env["USER"], "gantry-job");
    }

    #[test]
    fn declared_variables_may_replace_the_base() {
        let env = build(
            &assignment(&[("PATH", "/opt/bin"), ("OMP_NUM_THREADS", "4")]),
            "u",
            Path::new("/w"),
            Path::new("/homes/t/u"),
        )
        .expect("env");
        assert_eq!(env["PATH"], "/opt/bin");
        assert_eq!(env["OMP_NUM_THREADS"], "4");
    }

    #[test]
    fn a_declared_placement_variable_refuses_the_job() {
        for name in ["CUDA_VISIBLE_DEVICES", "GANTRY_JOB_ID", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] {
            let err = build(&assignment(&[(name, "x")]), "u", Path::new("/w"), Path::new("/homes/t/u"))
                .expect_err(name);
            assert!(err.to_string().contains(name), "{err}");
        }
    }

    #[test]
    fn a_slice_gets_its_grant_and_under_mps_its_share_limits() {
        let mut a = assignment(&[]);
        a.gpu_memory_mib = 20_000;
        a.gpu_compute_pct = 25;
        let plain: BTreeMap<String, String> = placement(&a, false).into_iter().collect();
        assert_eq!(plain["GANTRY_GPU_MEMORY_LIMIT_MIB"], "20000");
        assert!(!plain.contains_key("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
        let mps: BTreeMap<String, String> = placement(&a, true).into_iter().collect();
        assert_eq!(mps["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "GPU-a=20000M,GPU-b=20000M");
        assert_eq!(mps["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    }
}
