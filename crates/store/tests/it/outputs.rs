//! Declared outputs (issue 22, stage-out): a job keeps its outputs, its output secret and where
//! each attempt's upload stands; a late report of an older attempt changes nothing.

use gantry_api::outputs::{Output, OutputState};
use gantry_store::*;

use super::{new_job, open};

#[test]
fn a_job_keeps_its_outputs_and_where_each_upload_stands() {
    let (_dir, store) = open();
    let mut job = new_job("a", 1, 0);
    job.spec.outputs =
        vec![Output::new("model", "s3://bucket/run/model"), Output::new("logs", "s3://bucket/l")];
    job.spec.output_secret = Some("out".into());
    let (id, _) = store.submit(&job).expect("submit");
    let stored = store.job(id).expect("get").expect("job");
    assert_eq!(
        (stored.outputs.clone(), stored.output_secret.as_deref()),
        (job.spec.outputs.clone(), Some("out"))
    );
    assert_eq!(stored.outputs[0].state, OutputState::Pending);
    let done = Output {
        state: OutputState::Uploaded,
        bytes: Some(12),
        files: Some(2),
        skipped: Some(1),
        uploaded_s: Some(0.5),
        ..job.spec.outputs[0].clone()
    };
    let stranger = Output { state: OutputState::Uploaded, ..Output::new("other", "s3://bucket/x") };
    let now = store.reported_outputs(id, 2, &[done.clone(), stranger]).expect("reported");
    let want = [Output { attempt: Some(2), ..done.clone() }, job.spec.outputs[1].clone()];
    assert_eq!(now, want, "only its own outputs are written");
    assert_eq!(store.job(id).expect("get").expect("job").outputs, want);
    let late =
        Output { state: OutputState::Failed, error: Some("late".into()), ..job.spec.outputs[0].clone() };
    store.reported_outputs(id, 1, &[late]).expect("reported");
    assert_eq!(store.job(id).expect("get").expect("job").outputs, want, "attempt 1 does not hide attempt 2");
    let (plain, _) = store.submit(&new_job("b", 1, 0)).expect("submit");
    assert!(store.job(plain).expect("get").expect("job").outputs.is_empty());
    assert!(matches!(store.reported_outputs(999, 1, &[]), Err(StoreError::NotFound(_))));
}
