//! The job gauges' counts: jobs per (team, state), a gang counting once. Triggers (migration
//! 11) keep them in `job_counts` in the transaction of every write to `jobs`, so that reading
//! them costs a handful of rows however many jobs there are, instead of a count over every job.

use crate::db::{Conn, params};

use super::rows;
use crate::Result;
use crate::model::*;

/// The counts kept by the triggers, ordered by team and state.
pub(super) fn maintained(c: &dyn Conn) -> Result<Vec<(String, JobState, u64)>> {
    query(c, "SELECT team, state, n FROM job_counts WHERE n > 0 ORDER BY team, state")
}

/// The same counts from every job (the reference the maintained ones must equal).
pub(super) fn scan(c: &dyn Conn) -> Result<Vec<(String, JobState, u64)>> {
    // A gang counts once, not once per worker.
    query(
        c,
        "SELECT team, state, COUNT(*) FROM jobs WHERE gang_id IS NULL GROUP BY team, state ORDER BY team, state",
    )
}

fn query(c: &dyn Conn, sql: &str) -> Result<Vec<(String, JobState, u64)>> {
    let mut stmt = c.prepare_cached(sql)?;
    let rows = stmt.query_map(params![], |r| {
        let state: String = r.get(1)?;
        Ok((r.get(0)?, rows::parse_enum("job state", &state, JobState::parse)?, r.get(2)?))
    })?;
    rows.collect::<Result<_>>()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rusqlite::params;

    use super::*;

    const TEAMS: [&str; 3] = ["a", "b", "c"];
    const STATES: [&str; 4] = ["pending", "running", "succeeded", "cancelled"];

    #[derive(Debug, Clone)]
    enum Op {
        Insert { team: usize, state: usize, worker_of: Option<usize> },
        SetState { job: usize, state: usize },
        SetTeam { job: usize, team: usize },
        SetGang { job: usize, gang: Option<usize> },
        SetCommand { job: usize, len: usize },
        Delete { job: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..TEAMS.len(), 0..STATES.len(), proptest::option::weighted(0.3, 0usize..40))
                .prop_map(|(team, state, worker_of)| Op::Insert { team, state, worker_of }),
            4 => (0usize..40, 0..STATES.len()).prop_map(|(job, state)| Op::SetState { job, state }),
            1 => (0usize..40, 0..TEAMS.len()).prop_map(|(job, team)| Op::SetTeam { job, team }),
            1 => (0usize..40, proptest::option::of(0usize..40)).prop_map(|(job, gang)| Op::SetGang { job, gang }),
            1 => (0usize..40, 0usize..300).prop_map(|(job, len)| Op::SetCommand { job, len }),
            2 => (0usize..40).prop_map(|job| Op::Delete { job }),
        ]
    }

    /// A database at schema version 10 (before the counts table), then migrated: the counts
    /// must be backfilled from the jobs already there.
    fn migrated_with(jobs: &[(usize, usize, Option<usize>)]) -> rusqlite::Connection {
        let mut c = rusqlite::Connection::open_in_memory().expect("open");
        super::super::migrate::apply_up_to(&mut c, 10).expect("migrate to 10");
        for &(team, state, worker_of) in jobs {
            insert(&c, team, state, worker_of);
        }
        super::super::migrate::apply(&mut c).expect("migrate");
        // The ops below delete gangs before their workers and chain gangs: the counts must
        // hold whatever the rows reference.
        c.pragma_update(None, "foreign_keys", "OFF").expect("foreign keys off");
        c
    }

    fn insert(c: &rusqlite::Connection, team: usize, state: usize, worker_of: Option<usize>) {
        let gang = worker_of.and_then(|i| nth_id(c, i));
        c.execute(
            "INSERT INTO jobs (team, name, priority, command, gpus, gpu_memory_mib, gpu_compute_pct,
                               cpu_milli, memory_mib, state, max_retries, submitted_at, gang_id)
             VALUES (?1, 'j', 0, ?4, 1, 0, 0, 1000, 1024, ?2, 0, 0, ?3)",
            params![
                TEAMS[team],
                STATES[state],
                gang,
                format!("[\"{}é\"]", "x".repeat(team * 13 + state * 5))
            ],
        )
        .expect("insert");
    }

    /// The id of the `i`-th job still there (modulo their number), if any.
    fn nth_id(c: &rusqlite::Connection, i: usize) -> Option<i64> {
        let ids: Vec<i64> = c
            .prepare("SELECT id FROM jobs ORDER BY id")
            .expect("prepare")
            .query_map(params![], |r| r.get(0))
            .expect("ids")
            .collect::<rusqlite::Result<_>>()
            .expect("ids");
        (!ids.is_empty()).then(|| ids[i % ids.len()])
    }

    /// Bytes per team and state.
    type Bytes = Vec<(String, String, i64)>;

    /// Bytes per (team, state) as the triggers keep them, and as a scan over the jobs gives them.
    fn bytes(c: &rusqlite::Connection) -> (Bytes, Bytes) {
        let read = |sql: &str| -> Bytes {
            c.prepare(sql)
                .expect("prepare")
                .query_map(params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .expect("query")
                .collect::<rusqlite::Result<_>>()
                .expect("rows")
        };
        (
            read("SELECT team, state, bytes FROM job_counts WHERE n > 0 ORDER BY team, state"),
            read(
                "SELECT team, state, SUM(length(CAST(command AS BLOB)) + length(CAST(COALESCE(env, '') AS BLOB))) \
                 FROM jobs WHERE gang_id IS NULL GROUP BY team, state ORDER BY team, state",
            ),
        )
    }

    fn apply(c: &rusqlite::Connection, op: &Op) {
        match *op {
            Op::SetCommand { job, len } => {
                if let Some(id) = nth_id(c, job) {
                    let command = format!("[\"{}\"]", "y".repeat(len));
                    c.execute("UPDATE jobs SET command = ?1 WHERE id = ?2", params![command, id])
                        .expect("command");
                }
            }
            Op::Insert { team, state, worker_of } => insert(c, team, state, worker_of),
            Op::SetState { job, state } => {
                if let Some(id) = nth_id(c, job) {
                    c.execute("UPDATE jobs SET state = ?1 WHERE id = ?2", params![STATES[state], id])
                        .expect("state");
                }
            }
            Op::SetTeam { job, team } => {
                if let Some(id) = nth_id(c, job) {
                    c.execute("UPDATE jobs SET team = ?1 WHERE id = ?2", params![TEAMS[team], id])
                        .expect("team");
                }
            }
            Op::SetGang { job, gang } => {
                if let Some(id) = nth_id(c, job) {
                    let gang = gang.and_then(|g| nth_id(c, g));
                    c.execute("UPDATE jobs SET gang_id = ?1 WHERE id = ?2", params![gang, id]).expect("gang");
                }
            }
            Op::Delete { job } => {
                if let Some(id) = nth_id(c, job) {
                    c.execute("DELETE FROM jobs WHERE id = ?1", [id]).expect("delete");
                }
            }
        }
    }

    #[test]
    fn the_migration_backfills_the_counts_from_the_jobs_there() {
        let c = migrated_with(&[(0, 0, None), (0, 0, None), (1, 1, None), (1, 1, Some(2)), (2, 3, None)]);
        let counts = maintained(&c).expect("counts");
        assert_eq!(counts, scan(&c).expect("scan"));
        let expected = vec![
            ("a".to_owned(), JobState::Pending, 2),
            ("b".to_owned(), JobState::Running, 1),
            ("c".to_owned(), JobState::Cancelled, 1),
        ];
        assert_eq!(counts, expected);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// After any inserts, state/team/gang changes and deletes, the counts the triggers keep
        /// equal a `GROUP BY` over the jobs (and no count of 0 is left behind).
        #[test]
        fn maintained_counts_equal_a_count_over_every_job(
            before in proptest::collection::vec((0..TEAMS.len(), 0..STATES.len(), proptest::option::of(0usize..10)), 0..10),
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let c = migrated_with(&before);
            prop_assert_eq!(maintained(&c).expect("counts"), scan(&c).expect("scan"));
            let (kept, scanned) = bytes(&c);
            prop_assert_eq!(kept, scanned, "the backfill");
            for op in &ops {
                apply(&c, op);
                prop_assert_eq!(maintained(&c).expect("counts"), scan(&c).expect("scan"), "after {:?}", op);
                let (kept, scanned) = bytes(&c);
                prop_assert_eq!(kept, scanned, "bytes after {:?}", op);
            }
            let zeros: i64 = c.query_row("SELECT COUNT(*) FROM job_counts WHERE n <= 0", [], |r| r.get(0)).expect("zeros");
            prop_assert_eq!(zeros, 0);
        }
    }
}
