//! Each front end's spelling of a job, resolved: the request the server receives, snapshotted.

use std::ffi::OsString;
use std::path::Path;

use super::*;
use crate::cmd::submit::{RunArgs, SubmitArgs};

/// One job in `gantry submit`'s flags, as after `gantry submit`.
const FLAGS: &[&str] = &[
    "--gpus",
    "2..8",
    "--cpu",
    "1.5",
    "--memory",
    "32G",
    "--array",
    "0-9,20%2",
    "--after",
    "ok:12,any:13",
    "--label",
    "exp=lr",
    "-e",
    "A=1",
    "--time",
    "2h",
    "--gpu-model",
    "A100,H100",
    "--workdir",
    "out",
    "--priority",
    "5",
    "--team",
    "nlp",
    "--",
    "python",
    "train.py",
];

/// The same job as a job file for `gantry apply`.
const FILE: &str = "command: [python, train.py]\ngpus: 2..8\ncpu: 1.5\nmemory: 32G\narray: 0-9,20%2\n\
after: ok:12,any:13\nlabels: {exp: lr}\nenv: {A: \"1\"}\ntime: 2h\ngpu_model: [A100, H100]\nworkdir: out\n\
priority: 5\nteam: nlp\n";

fn argv(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

fn submit_draft(words: &[&str]) -> JobDraft {
    let args: SubmitArgs = crate::cmd::submit::parse(argv(words)).expect("flags parse");
    crate::cmd::submit::draft(args).expect("a draft").1
}

#[test]
fn submit_flags_resolve_to_typed_fields_sent_in_the_api_json() {
    let request = submit_draft(FLAGS).resolve("req-1".into()).expect("resolves");
    assert_eq!(request.gpus, GpuRange { min: 2, max: Some(8) });
    assert_eq!(request.array.as_ref().map(|a| a.indices.len()), Some(11));
    insta::assert_json_snapshot!(request);
}

#[test]
fn run_sends_what_submit_sends() {
    let run: RunArgs = crate::cmd::submit::parse(argv(&[&["-q"], FLAGS].concat())).expect("flags parse");
    let run = crate::cmd::submit::draft(run.submit).expect("a draft").1;
    assert_eq!(run, submit_draft(FLAGS));
}

#[test]
fn a_job_file_is_the_draft_of_the_same_flags_and_keeps_its_digest_as_request_id() {
    let file = crate::cmd::apply::parse(FILE).expect("valid file");
    let draft = crate::cmd::apply::draft(file.clone(), Path::new(".")).expect("a draft");
    assert_eq!(draft, submit_draft(FLAGS));
    let request = crate::cmd::apply::request(file, Path::new("."), "http://server alice").expect("resolves");
    insta::assert_json_snapshot!(request);
}

#[test]
fn a_slurm_script_resolves_with_its_gantry_lines_and_the_command_line_winning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("train.sbatch");
    let text = "#!/bin/bash\n#SBATCH --gres=gpu:a100:4 -J slurm-name --mem=8G -t 01:00:00 -a 0-3%2\n\
#SBATCH --dependency=afterok:7 -c 2 --chdir=runs -o out.log\n#GANTRY --name gantry-name --label src=slurm\n\
srun python train.py\n";
    std::fs::write(&script, text).expect("write script");
    let directives = crate::cmd::submit::directives(text).expect("directives");
    let script_arg = script.to_string_lossy().into_owned();
    let args: SubmitArgs = crate::cmd::submit::with_directives(
        directives,
        argv(&["--gpus", "2", &script_arg, "--", "--epochs", "3"]),
    )
    .expect("flags parse");
    let request =
        crate::cmd::submit::draft(args).expect("a draft").1.resolve("req-2".into()).expect("resolves");
    assert_eq!(
        (request.gpus.min, request.name.as_deref()),
        (2, Some("gantry-name")),
        "the command line wins"
    );
    insta::assert_json_snapshot!(request);
}

#[test]
fn a_draft_without_a_command_or_script_is_refused() {
    let err = JobDraft::default().resolve("r".into()).expect_err("nothing to run");
    assert!(err.to_string().contains("nothing to run"), "{err}");
    let err = submit_draft(&["--gpus", "1"]).resolve("r".into()).expect_err("nothing to run");
    assert!(err.to_string().contains("nothing to run"), "{err}");
}

#[test]
fn cpu_cores_become_milli_cores_within_bounds() {
    assert_eq!(parse_cpu("1.5"), Ok(1500));
    assert_eq!(cpu_milli(0.0), Ok(0));
    assert!(parse_cpu("5000").expect_err("too many").contains("between 0 and 4096"));
    assert!(parse_cpu("lots").is_err());
}

#[test]
fn a_script_runs_under_its_interpreter_with_its_arguments() {
    let argv =
        script_command(Path::new("/x/t.py"), "#!/usr/bin/env python3\nprint(1)\n".into(), vec!["a".into()]);
    assert_eq!(argv, ["/usr/bin/env", "python3", "-c", "#!/usr/bin/env python3\nprint(1)\n", "t.py", "a"]);
    assert_eq!(script_command(Path::new("s"), "echo".into(), vec![])[0], "/bin/sh");
}

#[test]
fn outputs_in_a_job_file_are_the_output_flags_and_a_file_url_is_refused_with_a_sentence() {
    let flags = ["--output", "model=s3://results/run", "--output-secret", "out", "--", "train"];
    let file = "command: [train]\noutputs: {model: s3://results/run}\noutput_secret: out\n";
    let from_file = crate::cmd::apply::draft(crate::cmd::apply::parse(file).expect("valid"), Path::new("."));
    let from_flags = submit_draft(&flags);
    assert_eq!(from_file.expect("a draft"), from_flags);
    assert_eq!(from_flags.outputs[0].env_name(), "GANTRY_OUTPUT_MODEL");
    let bad = "command: [train]\noutputs: {model: file:///shared/x}\n";
    let err = crate::cmd::apply::draft(crate::cmd::apply::parse(bad).expect("parses"), Path::new("."))
        .expect_err("file:// is refused");
    assert!(err.to_string().contains("a job writes to shared (file://) storage itself"), "{err}");
    let err = crate::cmd::submit::parse::<SubmitArgs>(argv(&["--output", "x=file:///s", "--", "t"]))
        .expect_err("refused");
    assert!(err.to_string().contains("s3://bucket/prefix"), "{err}");
}
