//! `/bind`: reserve in the model, create the `Binding`, and assemble gangs all-or-nothing.
//!
//! **A single pod.** The model reserves the pod's GPUs on the chosen node (refusing, with the
//! reason, if they are no longer free), then the [`Binder`] creates the `Binding`. Success turns
//! the reservation into a bound pod; an API error (409 Conflict: the pod was bound by someone
//! else or re-created meanwhile) drops the reservation, leaving the model as it was, and is
//! kube-scheduler's bind error. There is no node lock: the API server's check that the pod is
//! still unbound is the only concurrency control across schedulers, and the model's reservation
//! keeps this extender's concurrent binds from handing out the same GPUs twice.
//!
//! **A gang** (pods sharing `gantry.dev/gang` in one namespace, with `gantry.dev/gang-size`):
//! - a member's `/bind` reserves its GPUs and *holds*: the HTTP answer waits until the gang is
//!   complete or its timeout (`--gang-timeout`, default [`DEFAULT_GANG_TIMEOUT`]) passes.
//!   kube-scheduler binds in a goroutine per pod, so held binds do not stop it scheduling the
//!   other members; its `httpTimeout` for the extender must exceed the gang timeout;
//! - the member whose reservation completes the gang creates every member's `Binding`, and each
//!   held `/bind` answers with its own member's outcome. No `Binding` exists before every
//!   member holds a reservation: all or nothing, up to the API server. After that a `Binding`
//!   the API refuses (the member was deleted or bound by someone else meanwhile) fails that
//!   member only; the others are still bound, since Kubernetes has no transaction across pods;
//! - at the timeout every reservation of the gang is released and each held `/bind` answers
//!   with an error; kube-scheduler retries those pods later, which starts a new assembly;
//! - one gang assembles at a time ([`super::gang`]): a member of another gang is refused at
//!   once and retried by kube-scheduler, so two gangs never deadlock holding halves of the
//!   capacity each needs;
//! - a gang is a batch of exactly `gang-size` pods: once bound it is forgotten, and a further pod
//!   naming it starts a new batch;
//! - a member deleted while the gang assembles leaves it (a replacement pod may take its place).
//!
//! Without an API server ([`Binder::Record`]) the same steps run and a bind is only recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use super::binder::{Binder, Target};
use super::gang::{Assembly, Gangs, Join};
use super::model::Model;
use super::wire::ExtenderBindingArgs;

/// How long a gang may hold partial reservations.
pub const DEFAULT_GANG_TIMEOUT: Duration = Duration::from_secs(30);

/// The shared model behind the routes.
pub type SharedModel = Arc<Mutex<Model>>;

/// A held member's outcome: `Ok`, or the error string for kube-scheduler.
type Outcome = Result<(), String>;

#[derive(Debug, Default)]
struct Table {
    gangs: Gangs,
    waiters: HashMap<String, oneshot::Sender<Outcome>>,
}

/// The extender's state: the model, the gang being assembled and where binds go.
#[derive(Debug)]
pub struct Extender {
    model: SharedModel,
    table: Mutex<Table>,
    binder: Binder,
    gang_timeout: Duration,
}

/// The model lock was poisoned by a panic elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("internal error")]
pub struct Poisoned;

enum Step {
    Single(Target),
    Hold(oneshot::Receiver<Outcome>),
    Complete(Vec<Target>),
}

impl Extender {
    /// An extender over `model` binding through `binder`.
    pub fn new(model: SharedModel, binder: Binder, gang_timeout: Duration) -> Arc<Self> {
        Arc::new(Self { model, table: Mutex::new(Table::default()), binder, gang_timeout })
    }

    /// The model.
    pub fn model(&self) -> &SharedModel {
        &self.model
    }

    /// Locks the model (lock order: model, then the gang table).
    pub fn lock_model(&self) -> Result<MutexGuard<'_, Model>, Poisoned> {
        self.model.lock().map_err(|_| Poisoned)
    }

    fn lock_table(&self) -> Result<MutexGuard<'_, Table>, Poisoned> {
        self.table.lock().map_err(|_| Poisoned)
    }

    /// Binds the pod (see the module docs); the error is kube-scheduler's bind error.
    pub async fn bind(self: &Arc<Self>, args: &ExtenderBindingArgs) -> Result<Outcome, Poisoned> {
        let key = format!("{}/{}", args.pod_namespace, args.pod_name);
        if self.lock_model()?.pending(&key).is_none() {
            match self.binder.fetch(&args.pod_namespace, &args.pod_name).await {
                Ok(Some(pod)) => self.lock_model()?.remember(&pod),
                Ok(None) => {}
                Err(e) => return Ok(Err(e)),
            }
        }
        let step = match self.reserve(args)? {
            Ok(step) => step,
            Err(e) => return Ok(Err(e)),
        };
        Ok(match step {
            Step::Single(t) => self.bind_all(vec![t]).await?.remove(0).1,
            Step::Hold(rx) => rx.await.unwrap_or_else(|_| {
                Err(format!(
                    "bind of {}/{} was superseded or its gang abandoned",
                    args.pod_namespace, args.pod_name
                ))
            }),
            Step::Complete(members) => {
                let key = format!("{}/{}", args.pod_namespace, args.pod_name);
                let mut own = Err(format!("pod {key} is not among its gang's members"));
                let outcomes = self.bind_all(members).await?;
                let mut table = self.lock_table()?;
                for (member, outcome) in outcomes {
                    if member == key {
                        own = outcome;
                    } else if let Some(tx) = table.waiters.remove(&member) {
                        let _ = tx.send(outcome);
                    }
                }
                own
            }
        })
    }

    /// Reserves the pod's GPUs and decides what happens next, under the locks.
    fn reserve(self: &Arc<Self>, args: &ExtenderBindingArgs) -> Result<Result<Step, String>, Poisoned> {
        let key = format!("{}/{}", args.pod_namespace, args.pod_name);
        let mut model = self.lock_model()?;
        let Some(pod) = model.pending(&key).cloned() else {
            return Ok(Err(super::ModelError::UnknownPod(key).to_string()));
        };
        let target = |key: &str, node: &str, model: &Model| {
            let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
            let uid = model.pending(key).map(|p| p.uid.clone()).unwrap_or_default();
            Target { namespace: namespace.into(), name: name.into(), uid, node: node.into() }
        };
        let Some(gang) = &pod.gang else {
            if let Err(e) = model.reserve(&key, &args.node) {
                return Ok(Err(e.to_string()));
            }
            return Ok(Ok(Step::Single(target(&key, &args.node, &model))));
        };
        let mut table = self.lock_table()?;
        if let Err(e) = table.gangs.admits(gang) {
            return Ok(Err(e.to_string()));
        }
        if let Err(e) = model.reserve(&key, &args.node) {
            return Ok(Err(e.to_string()));
        }
        let join = match table.gangs.join(gang, &key, &args.node) {
            Ok(join) => join,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let step = match join {
            Join::Complete(members) => {
                Step::Complete(members.iter().map(|(k, n)| target(k, n, &model)).collect())
            }
            Join::Started { epoch } => {
                self.start_timer(gang.key.clone(), epoch);
                Step::Hold(Self::wait(&mut table, &key))
            }
            Join::Waiting { .. } => Step::Hold(Self::wait(&mut table, &key)),
        };
        Ok(Ok(step))
    }

    fn wait(table: &mut Table, key: &str) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        // A member asking again (kube-scheduler retried it) replaces its earlier wait.
        table.waiters.insert(key.to_string(), tx);
        rx
    }

    fn start_timer(self: &Arc<Self>, gang: String, epoch: u64) {
        let ext = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(ext.gang_timeout).await;
            if let Err(e) = ext.expire(&gang, epoch) {
                tracing::error!(%gang, error = %e, "could not release an expired gang's reservations");
            }
        });
    }

    /// Releases the reservations of `gang` if assembly `epoch` has not completed.
    fn expire(&self, gang: &str, epoch: u64) -> Result<(), Poisoned> {
        let mut model = self.lock_model()?;
        let mut table = self.lock_table()?;
        let Some(a) = table.gangs.expire(gang, epoch) else { return Ok(()) };
        let msg = format!(
            "gang {gang} did not complete within {}s: {} of {} members were placeable; their reservations are released",
            self.gang_timeout.as_secs_f64(),
            a.members.len(),
            a.size
        );
        tracing::info!(%gang, "{msg}");
        for member in a.members.keys() {
            model.unreserve(member);
            if let Some(tx) = table.waiters.remove(member) {
                let _ = tx.send(Err(msg.clone()));
            }
        }
        Ok(())
    }

    /// A pod was deleted: it leaves the gang being assembled, and its held `/bind` ends.
    pub fn pod_gone(&self, key: &str) -> Result<(), Poisoned> {
        let mut table = self.lock_table()?;
        table.gangs.leave(key);
        if let Some(tx) = table.waiters.remove(key) {
            let _ = tx.send(Err(format!("pod {key} was deleted")));
        }
        Ok(())
    }

    /// Creates every target's Binding (all of them, even after a failure: see the module docs),
    /// then confirms or drops each reservation.
    async fn bind_all(&self, targets: Vec<Target>) -> Result<Vec<(String, Outcome)>, Poisoned> {
        let mut outcomes = Vec::with_capacity(targets.len());
        for t in &targets {
            let key = format!("{}/{}", t.namespace, t.name);
            let outcome = self.binder.bind(t).await.map_err(|e| e.to_string());
            outcomes.push((key, outcome));
        }
        let mut model = self.lock_model()?;
        for (key, outcome) in &outcomes {
            match outcome {
                Ok(()) => model.confirm(key),
                Err(e) => {
                    tracing::info!(pod = %key, error = %e, "bind failed; its reservation is released");
                    model.unreserve(key);
                }
            }
        }
        Ok(outcomes)
    }

    /// The gang being assembled and its members (for tests and logs).
    pub fn assembling(&self) -> Result<Option<Assembly>, Poisoned> {
        Ok(self.lock_table()?.gangs.assembling().cloned())
    }
}
