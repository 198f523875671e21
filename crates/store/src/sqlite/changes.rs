//! Audited changes: each is applied and appended to the audit log in one savepoint.

use crate::db::Conn;

use super::{apply, audit, idle, inputs, jobs, nodes, pools, services, tokens, volumes, workflow};
use crate::Result;
use crate::model::*;

pub(super) fn apply(c: &dyn Conn, change: Change, mut entry: AuditEntry) -> Result<Changed> {
    if let Some(credential) = &entry.credential {
        tokens::still_holds(c, credential, entry.at)?;
    }
    let changed = match change {
        Change::Submit(job) => {
            let (id, created) = jobs::submit(c, &job)?;
            entry.target = format!("job/{id}");
            Changed::Submitted { id, created }
        }
        Change::Apply { job, replace } => {
            let applied = apply::apply(c, &job, replace, entry.at)?;
            entry.target = format!("job/{}", applied.id);
            Changed::Applied(applied)
        }
        Change::Cancel(id) => Changed::Job(Box::new(jobs::cancel(c, id, entry.at)?)),
        Change::CancelArray(id) => Changed::Job(Box::new(workflow::cancel_array(c, id, entry.at)?)),
        Change::SetTeam(team) => tokens::set_team(c, &team).map(|()| Changed::Done)?,
        Change::SetUser(user) => tokens::set_user(c, &user, entry.at).map(|()| Changed::Done)?,
        Change::CreateToken(token) => {
            let id = tokens::create(c, &token)?;
            entry.target = format!("token/{id}");
            Changed::Token(id)
        }
        Change::RevokeToken(id) => tokens::revoke(c, id, entry.at).map(|()| Changed::Done)?,
        Change::Join { join_token, credential } => Changed::Token(tokens::join(c, join_token, &credential)?),
        Change::RegisterNode(registration) => Changed::Registered(nodes::register(c, &registration)?),
        Change::SetPool(pool) => pools::set(c, &pool, entry.at).map(|()| Changed::Done)?,
        Change::SetIdlePolicy(policy) => idle::set(c, &policy, entry.at).map(|()| Changed::Done)?,
        Change::IdleAction { job, action, evidence } => {
            idle::act(c, job, &action, &evidence, entry.at).map(|()| Changed::Done)?
        }
        Change::SetNodeScheduling { node, scheduling, drain_at } => {
            nodes::set_scheduling(c, &node, scheduling, drain_at, entry.at).map(|()| Changed::Done)?
        }
        Change::ApplyService { team, spec, digest, desired } => {
            let (action, generation) = services::apply(c, &team, &spec, &digest, desired, entry.at)?;
            Changed::Service(action, generation)
        }
        Change::SetSecret { team, name, data } => {
            entry.target = format!("secret/{team}/{name}");
            inputs::set_secret(c, &team, &name, &data.0, entry.at).map(|()| Changed::Done)?
        }
        Change::SetPublicSource { url, public } => {
            entry.target = format!("source/{url}");
            inputs::set_public(c, &url, public, entry.at).map(|()| Changed::Done)?
        }
        Change::CreateVolume(v) => {
            entry.target = format!("volume/{}/{}", v.team, v.name);
            volumes::create(c, &v).map(|()| Changed::Done)?
        }
        Change::DeleteVolume { team, name } => {
            entry.target = format!("volume/{team}/{name}");
            volumes::delete(c, &team, &name).map(|()| Changed::Done)?
        }
        Change::DeleteService { team, name } => {
            services::delete(c, &team, &name, entry.at).map(|()| Changed::Done)?
        }
    };
    audit::append(c, &entry, "ok")?;
    Ok(changed)
}
