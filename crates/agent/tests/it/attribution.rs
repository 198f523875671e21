//! Process → job attribution from a fake `/proc`.

use gantry_agent::exporter::attribution::Attributor;
use gantry_gpu::ProcessUsage;
use std::path::Path;

fn proc_entry(root: &Path, pid: u32, ppid: u32, environ: Option<&[u8]>, cgroup: &str) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("stat"), format!("{pid} (python (x) 3) S {ppid} 1 1 0")).expect("stat");
    if let Some(env) = environ {
        std::fs::write(dir.join("environ"), env).expect("environ");
    }
    std::fs::write(dir.join("cgroup"), cgroup).expect("cgroup");
}

fn usage(pid: u32, job_id: Option<&str>) -> ProcessUsage {
    ProcessUsage {
        pid,
        gpu_index: 0,
        memory_used_bytes: 1,
        job_id: job_id.map(str::to_owned),
        util_percent: None,
    }
}

#[test]
fn jobs_come_from_the_environment_an_ancestor_the_cgroup_or_are_unknown() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    proc_entry(r, 10, 1, Some(b"PATH=/bin\0GANTRY_JOB_ID=job-own\0"), "0::/user.slice\n");
    proc_entry(r, 20, 1, Some(b"GANTRY_JOB_ID=job-parent\0"), "0::/\n");
    proc_entry(r, 21, 20, Some(b"HOME=/root\0"), "0::/\n");
    proc_entry(r, 30, 1, None, "0::/system.slice/gantry-job-job-cg.scope\n");
    proc_entry(r, 40, 1, Some(b"GANTRY_JOB_ID_OTHER=x\0"), "0::/\n");
    let mut a = Attributor::new(r);
    let jobs = a.attribute(&[
        usage(10, None),
        usage(21, None),
        usage(30, None),
        usage(40, None),
        usage(99, None),
        usage(50, Some("sim-job")),
    ]);
    let jobs: Vec<&str> = jobs.iter().map(|j| j.as_ref()).collect();
    assert_eq!(jobs, ["job-own", "job-parent", "job-cg", "unknown", "unknown", "sim-job"]);
}

#[test]
fn a_sandboxed_jobs_cgroup_outweighs_the_job_id_it_claims_in_its_environment() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    let v1 = "6:freezer:/gantry/0a1b2c3d4e5f/12-3\n4:memory:/gantry/0a1b2c3d4e5f/12-3\n0::/\n";
    proc_entry(r, 10, 1, Some(b"GANTRY_JOB_ID=7\0"), v1);
    proc_entry(r, 20, 1, Some(b"GANTRY_JOB_ID=7\0"), "0::/gantry/0a1b2c3d4e5f/13-1\n");
    proc_entry(r, 30, 1, Some(b"GANTRY_JOB_ID=7\0"), "0::/gantry/notes/readme\n");
    let mut a = Attributor::new(r);
    let jobs = a.attribute(&[usage(10, None), usage(20, None), usage(30, None)]);
    let jobs: Vec<&str> = jobs.iter().map(|j| j.as_ref()).collect();
    assert_eq!(jobs, ["12", "13", "7"]);
}

#[test]
fn a_pid_that_left_and_came_back_is_looked_up_again() {
    let root = tempfile::tempdir().expect("tempdir");
    proc_entry(root.path(), 10, 1, Some(b"GANTRY_JOB_ID=first\0"), "");
    let mut a = Attributor::new(root.path());
    assert_eq!(a.attribute(&[usage(10, None)])[0].as_ref(), "first");
    assert!(a.attribute(&[]).is_empty());
    proc_entry(root.path(), 10, 1, Some(b"GANTRY_JOB_ID=second\0"), "");
    assert_eq!(a.attribute(&[usage(10, None)])[0].as_ref(), "second");
}
