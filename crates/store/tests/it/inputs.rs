//! Declared inputs and team secrets (issue 22): a job keeps its inputs and what staging found
//! of them; a secret is set, replaced and listed without its values, per team.

use gantry_api::inputs::{Input, SecretData};
use gantry_store::*;

use super::{new_job, open};

fn admin(action: &str) -> AuditEntry {
    let actor = Actor { name: "root".into(), role: "admin".into(), team: None, peer: None };
    AuditEntry { actor, action: action.into(), target: String::new(), at: 10, credential: None }
}

#[test]
fn a_job_keeps_its_inputs_and_what_staging_found_of_them() {
    let (_dir, store) = open();
    let mut job = new_job("a", 1, 0);
    job.spec.inputs = vec![Input::new("data", "s3://bucket/train"), Input::new("labels", "file:///shared/l")];
    job.spec.input_secret = Some("s3".into());
    let (id, _) = store.submit(&job).expect("submit");
    let stored = store.job(id).expect("get").expect("job");
    assert_eq!((stored.inputs.len(), stored.input_secret.as_deref()), (2, Some("s3")));
    assert_eq!(stored.inputs[0].bytes, None);
    let found = Input {
        bytes: Some(50 << 20),
        cache_hit: Some(true),
        staged_s: Some(0.25),
        ..job.spec.inputs[0].clone()
    };
    let stranger = Input { bytes: Some(1), ..Input::new("other", "s3://bucket/x") };
    store.staged_inputs(id, &[found.clone(), stranger]).expect("staged");
    let stored = store.job(id).expect("get").expect("job");
    assert_eq!(stored.inputs, [found, job.spec.inputs[1].clone()], "only its own inputs are written");
    let (plain, _) = store.submit(&new_job("b", 1, 0)).expect("submit");
    assert!(store.job(plain).expect("get").expect("job").inputs.is_empty());
    assert!(matches!(store.staged_inputs(999, &[]), Err(StoreError::NotFound(_))));
}

#[test]
fn a_secret_is_set_replaced_and_listed_without_its_values() {
    let (_dir, store) = open();
    let set = |team: &str, pairs: &[(&str, &str)]| {
        let data = SecretData(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        let change = Change::SetSecret { team: team.into(), name: "s3".into(), data };
        store.apply(change, admin("secret.set")).expect("set");
    };
    set("vision", &[("AWS_ACCESS_KEY_ID", "AKIA1"), ("AWS_SECRET_ACCESS_KEY", "hush")]);
    set("nlp", &[("AWS_ACCESS_KEY_ID", "AKIA2")]);
    set("vision", &[("AWS_ACCESS_KEY_ID", "AKIA3")]);
    let values = store.secret("vision", "s3").expect("read").expect("there");
    assert_eq!(
        values.into_iter().collect::<Vec<_>>(),
        [("AWS_ACCESS_KEY_ID".to_owned(), "AKIA3".to_owned())]
    );
    assert!(store.secret("vision", "other").expect("read").is_none());
    let listed = store.secrets(Some("vision")).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].0.as_str(), listed[0].1.as_str(), listed[0].2.clone()),
        ("vision", "s3", vec!["AWS_ACCESS_KEY_ID".to_owned()])
    );
    assert_eq!(store.secrets(None).expect("all").len(), 2);
    let audit = store.audit_rows(0, None, 100).expect("audit");
    let text = format!("{audit:?}");
    assert!(text.contains("secret.set") && !text.contains("AKIA") && !text.contains("hush"), "{text}");
}

#[test]
fn a_source_is_marked_public_once_made_private_again_and_each_change_audited() {
    let (_dir, store) = open();
    let set = |url: &str, public: bool| {
        let change = Change::SetPublicSource { url: url.into(), public };
        store.apply(change, admin("cache.public")).expect("set");
    };
    set("s3://datasets/imagenet", true);
    set("s3://datasets/imagenet", true);
    set("file:///shared/coco", true);
    let urls: Vec<String> = store.public_sources().expect("list").into_iter().map(|(u, _)| u).collect();
    assert_eq!(urls, ["file:///shared/coco", "s3://datasets/imagenet"], "listed once, by URL");
    set("s3://datasets/imagenet", false);
    let urls: Vec<String> = store.public_sources().expect("list").into_iter().map(|(u, _)| u).collect();
    assert_eq!(urls, ["file:///shared/coco"]);
    let audit = format!("{:?}", store.audit_rows(0, None, 100).expect("audit"));
    assert!(audit.contains("source/s3://datasets/imagenet"), "{audit}");
}
