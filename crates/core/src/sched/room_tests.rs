use super::*;
use crate::queue::Victim;

fn shape(workers: u32, per_worker: u32, priority: i32) -> Shape {
    Shape { workers, per_worker, cpu_milli: 1000, memory_mib: 1024, priority }
}

fn node(eligible: bool, idle: u32) -> NodeRoom {
    NodeRoom { eligible, idle, freeing: 0, cpu_free: 64_000, memory_free: 512 * 1024 }
}

fn holder(id: u64, node: usize, gpus: u32, priority: i32) -> Holder {
    Holder {
        node,
        victim: Victim { id, priority, gpus, lost_gpu_s: id as f64 },
        cpu_milli: 1000,
        memory_mib: 1024,
        service: None,
    }
}

#[test]
fn victims_are_taken_only_on_nodes_the_job_may_use() {
    // Node 0 (A100, allowed) and node 1 (H100, not allowed), both full; the queue chose node 1.
    let nodes = [node(true, 0), node(false, 0)];
    let holders = [holder(1, 0, 1, 0), holder(2, 1, 1, 0), holder(3, 1, 1, 0)];
    let room = find_room(&shape(1, 1, 50), &nodes, &holders, &[(1, 1)]).expect("node 0 can be freed");
    assert_eq!(room, Room { parts: vec![(0, 1)], victims: vec![1] });
}

#[test]
fn a_job_preemption_cannot_help_preempts_nobody() {
    // Four allowed GPUs in all, the job needs eight on one node.
    let nodes = [node(true, 0), node(false, 0)];
    let holders = [holder(1, 0, 4, 0), holder(2, 1, 8, 0)];
    assert_eq!(find_room(&shape(1, 8, 50), &nodes, &holders, &[(1, 8)]), None);
    // Equal priority is never a victim.
    assert_eq!(find_room(&shape(1, 4, 0), &nodes, &holders, &[(0, 4)]), None);
}

#[test]
fn gpus_already_being_freed_count_and_no_one_more_is_stopped() {
    let mut n = node(true, 0);
    n.freeing = 2;
    let room = find_room(&shape(1, 2, 50), &[n], &[holder(1, 0, 2, 0)], &[(0, 2)]).expect("room is coming");
    assert!(room.victims.is_empty(), "{room:?}");
}

#[test]
fn a_node_short_of_cpu_gets_one_more_victim_for_it() {
    let mut n = node(true, 1);
    n.cpu_free = 0;
    let mut small = holder(1, 0, 0, 0);
    small.victim.gpus = 1;
    small.cpu_milli = 0;
    let room =
        find_room(&shape(1, 1, 50), &[n], &[small, holder(2, 0, 1, 0)], &[(0, 1)]).expect("CPU can be freed");
    assert_eq!(room.victims, vec![2], "the idle GPU suffices, the CPU comes from job 2");
}

#[test]
fn a_gang_is_split_only_where_whole_workers_fit_once_victims_end() {
    let nodes = [node(true, 1), node(true, 0), node(false, 4)];
    let holders = [holder(1, 0, 1, 0), holder(2, 1, 2, 0), holder(3, 2, 4, 0)];
    let room =
        find_room(&shape(2, 2, 10), &nodes, &holders, &[(2, 4)]).expect("nodes 0 and 1 hold a worker each");
    let mut parts = room.parts.clone();
    parts.sort_unstable();
    assert_eq!(parts, vec![(0, 2), (1, 2)]);
    assert_eq!(room.victims.len(), 2, "{room:?}");
}

mod rules {
    use crate::queue::Team;
    use crate::sched::{Contender, TeamsNow};

    const TEAMS: [Team; 2] =
        [Team { guaranteed_gpus: 0, weight: 1.0 }, Team { guaranteed_gpus: 1, weight: 1.0 }];

    fn job(team: usize, priority: i32) -> Contender {
        Contender { team, priority, gpus: 1 }
    }

    #[test]
    fn priority_alone_never_crosses_teams_unless_an_admin_allows_it() {
        let now = TeamsNow { teams: &TEAMS, held: &[0, 1], preempts_others: &[false, false] };
        assert_eq!(now.judged_priority(&job(0, 1000), &job(1, 0)), None);
        assert_eq!(now.judged_priority(&job(0, 1000), &job(0, 0)), Some(0));
        let allowed = TeamsNow { preempts_others: &[true, false], ..now };
        assert_eq!(allowed.judged_priority(&job(0, 1000), &job(1, 0)), Some(0));
    }

    #[test]
    fn a_team_under_its_guarantee_reclaims_from_a_borrower_of_equal_priority() {
        let now = TeamsNow { teams: &TEAMS, held: &[2, 0], preempts_others: &[false, false] };
        assert_eq!(now.judged_priority(&job(1, 0), &job(0, 0)), Some(-1), "judged below the preemptor");
        let within = TeamsNow { held: &[0, 0], ..now };
        assert_eq!(within.judged_priority(&job(1, 0), &job(0, 0)), None, "team 0 borrows nothing");
        assert_eq!(now.judged_priority(&job(1, 0), &job(0, 5)), None, "higher priority is kept");
    }
}
