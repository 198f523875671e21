//! Gang assembly: which members of which gang hold reservations, and when a gang is complete.
//! Pure bookkeeping (no I/O, no clock); [`crate::extender::bind`] drives it and owns the timer.
//!
//! One gang assembles at a time. A member of another gang asking to bind meanwhile is refused
//! at once (kube-scheduler retries it with backoff), so two gangs can never each hold part of
//! the capacity the other needs and wait for each other: the gang that holds partial
//! reservations either completes or, at its deadline, releases them all. Each assembly gets an
//! epoch so that a timer set for an earlier assembly of the same gang cannot end a later one.

use std::collections::BTreeMap;

use super::pod::GangRef;

/// A gang collecting its members' reservations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    /// The gang (`namespace/name`).
    pub gang: String,
    /// Its size.
    pub size: u32,
    /// Distinguishes this assembly from earlier ones of the same gang.
    pub epoch: u64,
    /// Member pod (`namespace/name`) → the node kube-scheduler chose for it.
    pub members: BTreeMap<String, String>,
}

/// What a member's `/bind` leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// The first member: a new assembly started; the caller sets its timer.
    Started {
        /// The assembly's epoch, for [`Gangs::expire`].
        epoch: u64,
    },
    /// Reserved; more members are missing.
    Waiting {
        /// Members reserved so far.
        reserved: u32,
        /// The gang's size.
        size: u32,
    },
    /// This member completed the gang: bind all of these (pod → node).
    Complete(BTreeMap<String, String>),
}

/// Why a member cannot join now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GangError {
    /// Another gang holds partial reservations.
    #[error(
        "gang {holder} is being assembled ({reserved} of {size} members reserved); \
         gang {gang} waits until it is bound or released"
    )]
    Busy {
        /// The gang asking.
        gang: String,
        /// The gang assembling.
        holder: String,
        /// Its members reserved so far.
        reserved: u32,
        /// Its size.
        size: u32,
    },
    /// Members disagree on the gang's size.
    #[error("gang {gang} has size {size}, this pod says {asked}")]
    SizeMismatch {
        /// The gang.
        gang: String,
        /// The size of the assembly under way.
        size: u32,
        /// The size this pod's annotation gives.
        asked: u32,
    },
}

/// The gang being assembled, if any.
#[derive(Debug, Default)]
pub struct Gangs {
    assembling: Option<Assembly>,
    epoch: u64,
}

impl Gangs {
    /// Whether a member of `gang` may reserve now (checked before reserving in the model).
    pub fn admits(&self, gang: &GangRef) -> Result<(), GangError> {
        match &self.assembling {
            None => Ok(()),
            Some(a) if a.gang != gang.key => Err(GangError::Busy {
                gang: gang.key.clone(),
                holder: a.gang.clone(),
                reserved: a.members.len() as u32,
                size: a.size,
            }),
            Some(a) if a.size != gang.size => {
                Err(GangError::SizeMismatch { gang: gang.key.clone(), size: a.size, asked: gang.size })
            }
            Some(_) => Ok(()),
        }
    }

    /// Adds a member that now holds a reservation on `node` (a member asking again replaces
    /// its earlier node). When the gang is complete the assembly ends and its members are returned.
    pub fn join(&mut self, gang: &GangRef, pod: &str, node: &str) -> Result<Join, GangError> {
        self.admits(gang)?;
        let started = self.assembling.is_none();
        if started {
            self.epoch += 1;
        }
        let epoch = self.epoch;
        let a = self.assembling.get_or_insert_with(|| Assembly {
            gang: gang.key.clone(),
            size: gang.size,
            epoch,
            members: BTreeMap::new(),
        });
        a.members.insert(pod.to_string(), node.to_string());
        if a.members.len() as u32 >= a.size {
            let done = self.assembling.take().map(|a| a.members).unwrap_or_default();
            return Ok(Join::Complete(done));
        }
        if started {
            return Ok(Join::Started { epoch });
        }
        Ok(Join::Waiting { reserved: a.members.len() as u32, size: a.size })
    }

    /// The deadline of assembly `epoch` of `gang` passed: if it is still assembling, it ends
    /// and its members (whose reservations the caller releases) are returned.
    pub fn expire(&mut self, gang: &str, epoch: u64) -> Option<Assembly> {
        match &self.assembling {
            Some(a) if a.gang == gang && a.epoch == epoch => self.assembling.take(),
            _ => None,
        }
    }

    /// A member pod was deleted: it leaves the assembly (its reservation goes with the pod).
    pub fn leave(&mut self, pod: &str) {
        if let Some(a) = &mut self.assembling {
            a.members.remove(pod);
        }
    }

    /// The gang being assembled.
    pub fn assembling(&self) -> Option<&Assembly> {
        self.assembling.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gang(name: &str, size: u32) -> GangRef {
        GangRef { key: format!("ml/{name}"), size }
    }

    #[test]
    fn a_gang_completes_when_its_last_member_joins_and_returns_every_member() {
        let mut g = Gangs::default();
        let a = gang("a", 3);
        assert_eq!(g.join(&a, "ml/w0", "n1"), Ok(Join::Started { epoch: 1 }));
        assert_eq!(g.join(&a, "ml/w1", "n2"), Ok(Join::Waiting { reserved: 2, size: 3 }));
        let Ok(Join::Complete(members)) = g.join(&a, "ml/w2", "n1") else { panic!("complete") };
        assert_eq!(members.len(), 3);
        assert_eq!(members["ml/w1"], "n2");
        assert!(g.assembling().is_none());
    }

    #[test]
    fn a_second_gang_is_refused_while_the_first_holds_partial_reservations() {
        let mut g = Gangs::default();
        g.join(&gang("a", 2), "ml/a0", "n1").expect("first");
        let busy = g.join(&gang("b", 2), "ml/b0", "n2");
        assert!(matches!(busy, Err(GangError::Busy { reserved: 1, size: 2, .. })), "{busy:?}");
        assert!(matches!(g.join(&gang("a", 3), "ml/a1", "n1"), Err(GangError::SizeMismatch { .. })));
        let expired = g.expire("ml/a", 1).expect("still assembling");
        assert_eq!(expired.members.keys().collect::<Vec<_>>(), ["ml/a0"]);
        assert_eq!(g.join(&gang("b", 2), "ml/b0", "n2"), Ok(Join::Started { epoch: 2 }));
    }

    #[test]
    fn a_timer_of_an_earlier_assembly_does_not_end_a_later_one() {
        let mut g = Gangs::default();
        let a = gang("a", 2);
        g.join(&a, "ml/a0", "n1").expect("first");
        g.join(&a, "ml/a1", "n1").expect("complete");
        assert_eq!(g.join(&a, "ml/a2", "n1"), Ok(Join::Started { epoch: 2 }));
        assert_eq!(g.expire("ml/a", 1), None);
        assert!(g.assembling().is_some());
    }
}
