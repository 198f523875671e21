//! Jobs that checkpoint (`QueueInput::checkpointing`): ranked by the service they received and
//! stopped for any job the queue ranks above them, whatever the priorities and teams; jobs that
//! do not checkpoint keep the server's rules (priority within a team, guarantees across).

use super::service_tests::{cluster, job, pass, running};

fn in_team(mut j: gantry_api::model::Job, team: &str) -> gantry_api::model::Job {
    team.clone_into(&mut j.team);
    j
}

/// One 4-GPU node held by job 1 (4 GPUs, submitted first, of `team_1`), and job 2 (4 GPUs, of
/// `team_2`) waiting.
fn contended(team_1: &str, team_2: &str) -> super::Snapshot {
    let mut s = cluster(&[4]);
    running(&mut s, in_team(job(1, 4, 0, 0), team_1), "n0", &[0, 1, 2, 3]);
    s.pending = vec![in_team(job(2, 4, 0, 0), team_2)];
    s
}

#[test]
fn a_job_that_checkpoints_yields_its_gpus_to_a_less_served_job_of_any_team() {
    for (a, b) in [("ml", "ml"), ("a", "b")] {
        let mut s = contended(a, b);
        let p = pass(&s);
        assert!(p.preemptions.is_empty(), "equal priority, no checkpointing: {p:?}");
        // Job 1 received far more service: the queue ranks job 2 (band 0) above it.
        s.queue.checkpointing = [(1, 1.0e6), (2, 0.0)].into();
        let p = pass(&s);
        assert_eq!(p.preemptions.len(), 1, "{a}/{b}: {p:?}");
        assert_eq!((p.preemptions[0].job_id, p.preemptions[0].by), (1, Some(2)));
        assert!(p.preemptions[0].reason.contains("ranks above it"), "{}", p.preemptions[0].reason);
    }
}

#[test]
fn a_job_that_checkpoints_keeps_its_gpus_against_a_job_the_queue_ranks_below_it() {
    let mut s = contended("a", "b");
    // Both in band 0: FIFO ranks job 1, submitted first, above job 2.
    s.queue.checkpointing = [(1, 100.0), (2, 0.0)].into();
    let p = pass(&s);
    assert!(p.preemptions.is_empty(), "{p:?}");
    assert!(p.placements.is_empty(), "{p:?}");
}
