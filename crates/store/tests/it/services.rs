//! Services and pools in the store, on both backends: a file applied once is created, again
//! unchanged, changed configured (its next generation); scaling records a decision; replicas are
//! jobs naming their service; deleting a service stops them; pools are set and listed.

use gantry_store::*;

use super::{new_job, open};

fn admin(action: &str) -> AuditEntry {
    let actor = Actor { name: "root".into(), role: "admin".into(), team: None, peer: None };
    AuditEntry { actor, action: action.into(), target: String::new(), at: 10, credential: None }
}

fn apply(store: &dyn Store, text: &str) -> Changed {
    let spec: ServiceSpec = serde_json::from_str(text).expect("a valid service file");
    let change =
        Change::ApplyService { team: "ml".into(), digest: text.into(), desired: 1, spec: Box::new(spec) };
    store.apply(change, admin("service.apply")).expect("apply")
}

const ECHO: &str =
    r#"{"name": "echo", "replicas": "1..4", "gpus": 1, "port": 8000, "command": ["python3", "server.py"]}"#;

#[test]
fn a_service_is_created_unchanged_then_configured_scaled_and_deleted_with_its_replicas() {
    let (_dir, store) = open();
    assert_eq!(apply(&*store, ECHO), Changed::Service(ServiceAction::Created, 1));
    assert_eq!(apply(&*store, ECHO), Changed::Service(ServiceAction::Unchanged, 1));
    let changed = ECHO.replace("1..4", "2..4");
    assert_eq!(apply(&*store, &changed), Changed::Service(ServiceAction::Configured, 2));
    let svc = store.service("ml", "echo").expect("read").expect("the service");
    assert_eq!((svc.generation, svc.desired), (2, 2), "a new range moves the count into it");
    assert_eq!(store.services(Some(vec!["ml".into()])).expect("list").len(), 1);
    assert!(store.services(Some(vec!["cv".into()])).expect("list").is_empty(), "another team sees none");
    assert_eq!(store.services(None).expect("list").len(), 1);

    let decision = ServiceDecision { at: 20, from: 2, to: 3, reason: "in_flight over target".into() };
    store.scale_service(svc.id, 3, Some(decision.clone())).expect("scale");
    assert_eq!(store.service_decisions(svc.id, 10).expect("decisions"), vec![decision]);
    assert_eq!(store.service("ml", "echo").expect("read").expect("service").desired, 3);

    let replica = NewJob { service: Some(("echo".into(), 2)), team: "ml".into(), ..new_job("r", 1, 0) };
    let stale = NewJob { service: Some(("echo".into(), 1)), ..replica.clone() };
    let err = store.submit(&stale).expect_err("a replica of a generation the service left");
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    let (id, _) = store.submit(&replica).expect("submit a replica");
    let replicas = store.service_replicas("ml", "echo", 5).expect("replicas");
    assert_eq!(replicas.iter().map(|r| (r.job.id, r.generation)).collect::<Vec<_>>(), vec![(id, 2)]);
    let change = Change::DeleteService { team: "ml".into(), name: "echo".into() };
    store.apply(change, admin("service.delete")).expect("delete");
    assert!(store.service("ml", "echo").expect("read").is_none());
    assert_eq!(
        store.job(id).expect("read").expect("job").state,
        JobState::Cancelled,
        "no replica outlives it"
    );
    // A controller that decided to start a replica before the deletion committed starts none.
    let err = store.submit(&replica).expect_err("a replica of a deleted service");
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    assert_eq!(store.service_replicas("ml", "echo", 5).expect("replicas").len(), 1, "only the stopped one");
}

#[test]
fn replicas_submitted_while_their_service_is_deleted_are_refused_or_stopped_none_outlives_it() {
    let (_dir, store) = open();
    apply(&*store, ECHO);
    let replica = NewJob { service: Some(("echo".into(), 1)), team: "ml".into(), ..new_job("r", 1, 0) };
    // Four controllers keep starting replicas while the service is deleted under them.
    let go = std::sync::Barrier::new(5);
    let deleted = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (store, replica, go, deleted) = (&*store, &replica, &go, &deleted);
            s.spawn(move || {
                go.wait();
                // Until a refusal after the delete committed: every start is raced against it.
                for _ in 0..200 {
                    let done = deleted.load(std::sync::atomic::Ordering::SeqCst);
                    match store.submit(replica) {
                        Ok(_) => {}
                        Err(StoreError::NotFound(_)) if done => return,
                        Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        let (store, go, deleted) = (&*store, &go, &deleted);
        s.spawn(move || {
            go.wait();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let change = Change::DeleteService { team: "ml".into(), name: "echo".into() };
            store.apply(change, admin("service.delete")).expect("delete");
            deleted.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    });
    let left: Vec<Job> = store
        .jobs(&JobFilter { team: Some("ml".into()), ..JobFilter::default() })
        .expect("jobs")
        .into_iter()
        .filter(|j| j.service.is_some() && !j.state.is_terminal() && j.stop.is_none())
        .collect();
    assert!(left.is_empty(), "replicas outlived their service: {left:?}");
}

#[test]
fn pools_are_set_replaced_and_listed_by_name() {
    let (_dir, store) = open();
    let pool = |name: &str, placement, teams: &[&str]| Pool {
        name: name.into(),
        placement,
        teams: teams.iter().map(|t| (*t).to_string()).collect(),
    };
    store.apply(Change::SetPool(pool("train", PoolPlacement::Pack, &[])), admin("pool.set")).expect("set");
    store
        .apply(Change::SetPool(pool("infer", PoolPlacement::Spread, &["ml"])), admin("pool.set"))
        .expect("set");
    store
        .apply(Change::SetPool(pool("train", PoolPlacement::Spread, &["a", "b"])), admin("pool.set"))
        .expect("set");
    let pools = store.pools().expect("pools");
    assert_eq!(
        pools,
        vec![
            pool("infer", PoolPlacement::Spread, &["ml"]),
            pool("train", PoolPlacement::Spread, &["a", "b"])
        ]
    );
}

#[test]
fn each_replicas_gateway_activity_is_kept_per_service_its_last_request_never_moves_back_and_goes_with_the_service()
 {
    let (_dir, store) = open();
    apply(&*store, ECHO);
    let seen = |replica: &str, last: i64, held: u32, at: i64| ServiceActivity {
        team: "ml".into(),
        service: "echo".into(),
        replica: replica.into(),
        last_request_at: last,
        held,
        in_flight: held + 1,
        queue_length: 0,
        rps: 2.5,
        ttft_histogram: vec![(3, held), (40, 1)],
        at,
    };
    store.note_service_activity(&[seen("a", 100, 2, 110), seen("b", 90, 0, 95)]).expect("note");
    // An older request time from a late writer does not move it back; held and at are replaced.
    store.note_service_activity(&[seen("a", 80, 0, 120)]).expect("note");
    assert_eq!(store.service_activity().expect("read"), vec![seen("a", 100, 0, 120), seen("b", 90, 0, 95)]);
    store
        .apply(Change::DeleteService { team: "ml".into(), name: "echo".into() }, admin("service.delete"))
        .expect("delete");
    assert!(store.service_activity().expect("read").is_empty(), "deleted with its service");
}

#[test]
fn a_volume_a_service_mounts_is_not_deleted_under_it() {
    let (_dir, store) = open();
    let volume = Volume {
        name: "data".into(),
        team: "ml".into(),
        path: None,
        node: Some("n1".into()),
        size_bytes: None,
        created_at: 1,
    };
    store.apply(Change::CreateVolume(volume), admin("volume.create")).expect("create");
    apply(&*store, r#"{"name": "web", "port": 8000, "command": ["x"], "volumes": ["data:/mnt/data:ro"]}"#);
    let delete = || Change::DeleteVolume { team: "ml".into(), name: "data".into() };
    let err = store.apply(delete(), admin("volume.delete")).expect_err("a service mounts it");
    assert!(matches!(&err, StoreError::Conflict(m) if m.contains("service web mounts volume data")), "{err}");
    store
        .apply(Change::DeleteService { team: "ml".into(), name: "web".into() }, admin("service.delete"))
        .expect("delete");
    store.apply(delete(), admin("volume.delete")).expect("then the volume goes");
    assert!(store.volumes(None).expect("volumes").is_empty());
}
