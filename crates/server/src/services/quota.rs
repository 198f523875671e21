//! How many more replicas a service's team may hold, and the sentence `gantry service get`
//! shows when that is what keeps a service below its count.
//!
//! A replica is a job of its team, so it is bound by what binds the team's jobs:
//!
//! - **GPUs, with a guarantee** (`gantry team set T --guarantee N`): replicas asking for whole
//!   GPUs stay within it, counting every active job of the team. A replica is long-running, and a
//!   GPU it borrowed beyond the guarantee would be taken back by preemption as soon as the owner
//!   asks, so a service does not grow into borrowed GPUs.
//! - **GPUs, without a guarantee**: every GPU the team holds is borrowed, and the scheduling
//!   core caps a team's holding at `guarantee + borrow_limit × the cluster's GPUs` (what `gantry
//!   queues` shows as its cap). Past it a replica could only wait pending forever; it is not
//!   submitted, and the sentence says so.
//! - **Pending jobs** (`--pending-limit`, default 100,000): a replica is submitted pending like
//!   any job; the controller does not submit past the team's limit, which a user's submission
//!   could not pass either. This binds slices (`gpu_memory`) too, which no GPU cap counts.
//!
//! - **Replicas** (`gantry team set T --max-replicas N`, default 100): every replica of the
//!   team's services that has not ended counts, so that one team's services cannot hold every
//!   replica port (`--service-ports`) of the cluster.
//!
//! The tightest of these is the room; the sentence names it. Within one tick the controller
//! charges each replica it starts to its team ([`TeamQuota::charge`]), so two services of one
//! team cannot each take the last GPU.

/// What binds one team's replicas, as of this tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamQuota {
    /// The team.
    pub team: String,
    /// Its guarantee in whole GPUs, if it has one.
    pub guarantee: Option<u32>,
    /// The most whole GPUs the scheduler lets it hold when it has no guarantee.
    pub cap: u32,
    /// Whole GPUs its active jobs ask for (pending, scheduled, running; a gang's workers).
    pub used_gpus: u32,
    /// Its pending jobs.
    pub pending: u64,
    /// The most it may have pending.
    pub pending_limit: u64,
    /// Replicas of its services that have not ended.
    pub replicas: u32,
    /// The most replicas it may hold at once.
    pub replica_limit: u32,
}

impl TeamQuota {
    /// More replicas of `gpus` whole GPUs each (0: a slice or CPU only) the team may hold, and
    /// the sentence for when that number is the limit.
    pub fn room(&self, gpus: u32) -> (u32, String) {
        let (room, why) = self.job_room(gpus);
        let replica_room = self.replica_limit.saturating_sub(self.replicas);
        if replica_room >= room {
            return (room, why);
        }
        let team = &self.team;
        let why = format!(
            "team {team}'s services hold {} replica(s) and may hold {}: no room for another \
             (gantry team set {team} --max-replicas N)",
            self.replicas, self.replica_limit
        );
        (replica_room, why)
    }

    /// [`TeamQuota::room`] by what binds any job of the team.
    fn job_room(&self, gpus: u32) -> (u32, String) {
        let team = &self.team;
        let pending_room = u32::try_from(self.pending_limit.saturating_sub(self.pending)).unwrap_or(u32::MAX);
        let pending_why = format!(
            "team {team} has {} pending job(s) and may have {}: no room for another replica \
             (gantry team set {team} --pending-limit N)",
            self.pending, self.pending_limit
        );
        if gpus == 0 {
            return (pending_room, pending_why);
        }
        let used = self.used_gpus;
        let (limit, why) = match self.guarantee {
            Some(g) => (
                g,
                format!(
                    "team {team}'s guarantee is {g} GPU(s) and its jobs ask for {used}: no room for another \
                     replica of {gpus} GPU(s) (replicas stay within the guarantee; gantry team set {team} \
                     --guarantee N)"
                ),
            ),
            None => (
                self.cap,
                format!(
                    "team {team} has no guarantee and may hold at most {} GPU(s) (the scheduler's borrowing \
                     cap), and its jobs ask for {used}: no room for another replica of {gpus} GPU(s) \
                     (gantry team set {team} --guarantee N)",
                    self.cap
                ),
            ),
        };
        let gpu_room = limit.saturating_sub(used) / gpus;
        if gpu_room <= pending_room { (gpu_room, why) } else { (pending_room, pending_why) }
    }

    /// Counts a replica of `gpus` GPUs started this tick.
    pub fn charge(&mut self, gpus: u32) {
        self.used_gpus = self.used_gpus.saturating_add(gpus);
        self.pending = self.pending.saturating_add(1);
        self.replicas = self.replicas.saturating_add(1);
    }
}

/// The scheduler's cap on a team's whole GPUs: its guarantee plus `borrow_limit` of the
/// cluster's `gpus` (as `gantry_core::queue::admit` computes it).
pub fn cap(guarantee: Option<u32>, borrow_limit: f64, gpus: u32) -> u32 {
    let borrow = (borrow_limit * f64::from(gpus)).round().max(0.0) as u32;
    guarantee.unwrap_or(0).saturating_add(borrow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(guarantee: Option<u32>, used: u32) -> TeamQuota {
        TeamQuota {
            team: "ml".into(),
            guarantee,
            cap: cap(guarantee, 1.0, 4),
            used_gpus: used,
            pending: 0,
            pending_limit: 100_000,
            replicas: 0,
            replica_limit: 100,
        }
    }

    #[test]
    fn a_teams_replica_cap_binds_when_it_is_the_tightest_and_each_start_counts() {
        let mut q = TeamQuota { replicas: 98, replica_limit: 100, ..quota(None, 0) };
        let (room, why) = q.room(0);
        assert_eq!(room, 2);
        assert!(why.contains("team ml's services hold 98 replica(s) and may hold 100"), "{why}");
        q.charge(0);
        q.charge(0);
        assert_eq!(q.room(0).0, 0);
        assert_eq!(q.room(1).0, 0, "whatever the GPUs");
        let roomy = TeamQuota { replicas: 0, replica_limit: 100, ..quota(Some(2), 1) };
        assert!(roomy.room(1).1.contains("guarantee"), "the GPUs bind first here");
    }

    #[test]
    fn a_team_without_a_guarantee_holds_no_more_replicas_than_the_schedulers_cap_and_says_why() {
        let (room, why) = quota(None, 1).room(1);
        assert_eq!(room, 3, "4 GPUs in the cluster, borrow limit 1.0, 1 in use");
        assert!(why.contains("team ml has no guarantee and may hold at most 4 GPU(s)"), "{why}");
        assert_eq!(quota(None, 4).room(1).0, 0);
        assert_eq!(quota(None, 1).room(2).0, 1, "replicas of two GPUs: one more fits in 3");
        assert_eq!(cap(None, 0.5, 8), 4);
        assert_eq!(cap(Some(2), 0.5, 8), 6);
    }

    #[test]
    fn a_guarantee_is_the_limit_of_whole_gpu_replicas() {
        let (room, why) = quota(Some(2), 1).room(1);
        assert_eq!(room, 1);
        assert!(why.contains("team ml's guarantee is 2 GPU(s) and its jobs ask for 1"), "{why}");
    }

    #[test]
    fn the_pending_limit_binds_slices_and_whole_gpus_when_it_is_the_tighter() {
        let q = TeamQuota { pending: 9, pending_limit: 10, ..quota(None, 0) };
        let (room, why) = q.room(0);
        assert_eq!(room, 1);
        assert!(why.contains("team ml has 9 pending job(s) and may have 10"), "{why}");
        assert_eq!(q.room(1).0, 1, "the pending limit (1) is tighter than the GPUs (4)");
        assert!(q.room(1).1.contains("pending"));
        let full = TeamQuota { pending: 10, ..q };
        assert_eq!(full.room(0).0, 0);
    }

    #[test]
    fn a_replica_started_this_tick_is_charged_to_its_team() {
        let mut q = quota(Some(2), 0);
        q.charge(1);
        assert_eq!(q.room(1).0, 1);
        q.charge(1);
        assert_eq!(q.room(1).0, 0);
        assert_eq!(q.pending, 2);
    }
}
