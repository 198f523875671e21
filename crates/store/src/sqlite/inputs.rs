//! A job's declared inputs and the teams' secrets their S3 sources are read with (issue 22).
//!
//! The inputs are kept as one JSON column beside the job's other fields, written after the
//! row (so the long insert statements stay as they are) and again when the job is placed,
//! with what staging found on its node (`bytes`, `cache_hit`, `staged_s`). A secret is a JSON
//! object of keys and values per team and name; only its names and keys are ever listed.

use std::collections::BTreeMap;

use gantry_api::inputs::Input;

use super::rows;
use crate::db::{Conn, params};
use crate::model::{JobId, SubmitRequest};
use crate::{Result, StoreError};

/// Writes a new (or changed pending) job's inputs and input secret, outputs and output secret.
pub(super) fn save(c: &dyn Conn, id: JobId, spec: &SubmitRequest) -> Result<()> {
    let inputs = (!spec.inputs.is_empty()).then(|| rows::to_json(&spec.inputs)).transpose()?;
    let outputs = (!spec.outputs.is_empty()).then(|| rows::to_json(&spec.outputs)).transpose()?;
    let image = image_json(spec)?;
    let volumes = volumes_json(spec)?;
    c.prepare_cached(
        "UPDATE jobs SET inputs = ?2, input_secret = ?3, outputs = ?4, output_secret = ?5, image = ?6, \
         volumes = ?7 WHERE id = ?1",
    )?
    .execute(params![id, inputs, spec.input_secret, outputs, spec.output_secret, image, volumes])?;
    Ok(())
}

/// A new job's volumes column (`None`: it mounts none).
pub(crate) fn volumes_json(spec: &SubmitRequest) -> Result<Option<String>> {
    (!spec.volumes.is_empty()).then(|| rows::to_json(&spec.volumes)).transpose()
}

/// A new job's image column: its reference and the digest the reference pins, if any.
pub(crate) fn image_json(spec: &SubmitRequest) -> Result<Option<String>> {
    spec.image
        .as_ref()
        .map(|r| {
            rows::to_json(&gantry_api::model::JobImage {
                reference: r.clone(),
                digest: pinned(r),
                secret: spec.registry_secret.clone(),
                entrypoint: spec.entrypoint.clone(),
                workdir: spec.container_workdir.clone(),
            })
        })
        .transpose()
}

/// The digest a reference pins (`…@sha256:…`), if it pins one.
fn pinned(reference: &str) -> Option<String> {
    reference.rsplit_once('@').map(|(_, d)| d.to_owned()).filter(|d| d.starts_with("sha256:"))
}

/// Records the manifest digest a node resolved a job's image to (the first resolution wins:
/// every later attempt runs it).
pub(super) fn resolved_image(c: &dyn Conn, id: JobId, digest: &str) -> Result<()> {
    let text: Option<Option<String>> = c
        .prepare_cached("SELECT image FROM jobs WHERE id = ?1")?
        .query_map(params![id], |r| r.get(0))?
        .next()
        .transpose()?;
    let Some(Some(text)) = text else { return Err(StoreError::NotFound(format!("job {id}'s image"))) };
    let mut image: gantry_api::model::JobImage = rows::json("image", &text)?;
    if image.digest.is_none() {
        image.digest = Some(digest.to_owned());
        c.prepare_cached("UPDATE jobs SET image = ?2 WHERE id = ?1")?
            .execute(params![id, rows::to_json(&image)?])?;
    }
    Ok(())
}

/// Records what staging found of a job's inputs; the names and URLs must be the job's.
pub(super) fn staged(c: &dyn Conn, id: JobId, found: &[Input]) -> Result<()> {
    let text: Option<Option<String>> = c
        .prepare_cached("SELECT inputs FROM jobs WHERE id = ?1")?
        .query_map(params![id], |r| r.get(0))?
        .next()
        .transpose()?;
    let Some(text) = text else { return Err(StoreError::NotFound(format!("job {id}"))) };
    let mut inputs: Vec<Input> = text.map(|t| rows::json("inputs", &t)).transpose()?.unwrap_or_default();
    for i in &mut inputs {
        if let Some(f) = found.iter().find(|f| f.name == i.name && f.url == i.url) {
            (i.bytes, i.cache_hit, i.staged_s) = (f.bytes, f.cache_hit, f.staged_s);
        }
    }
    c.prepare_cached("UPDATE jobs SET inputs = ?2 WHERE id = ?1")?
        .execute(params![id, rows::to_json(&inputs)?])?;
    Ok(())
}

/// Creates or replaces a team's secret.
pub(super) fn set_secret(
    c: &dyn Conn,
    team: &str,
    name: &str,
    data: &BTreeMap<String, String>,
    at: i64,
) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO secrets (team, name, data, updated_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(team, name) DO UPDATE SET data = ?3, updated_at = ?4",
    )?
    .execute(params![team, name, rows::to_json(data)?, at])?;
    Ok(())
}

/// A team's secret, with its values (for the agent staging a job of that team only).
pub(super) fn secret(c: &dyn Conn, team: &str, name: &str) -> Result<Option<BTreeMap<String, String>>> {
    let mut stmt = c.prepare_cached("SELECT data FROM secrets WHERE team = ?1 AND name = ?2")?;
    let text: Option<String> = stmt.query_map(params![team, name], |r| r.get(0))?.next().transpose()?;
    text.map(|t| rows::json("secret", &t)).transpose()
}

/// The teams' secrets without their values: (team, name, keys, updated_at), by team and name.
pub(super) fn secrets(c: &dyn Conn, team: Option<&str>) -> Result<Vec<crate::SecretListing>> {
    let mut stmt = c.prepare_cached(
        "SELECT team, name, data, updated_at FROM secrets WHERE (team = ?1 OR ?1 IS NULL) ORDER BY team, name",
    )?;
    let rows = stmt.query_map(params![team], |r| {
        let data: BTreeMap<String, String> = rows::json("secret", &r.get::<_, String>(2)?)?;
        Ok((r.get(0)?, r.get(1)?, data.into_keys().collect(), r.get(3)?))
    })?;
    rows.collect::<Result<_>>()
}

/// Marks `url` public (idempotent) or private again.
pub(super) fn set_public(c: &dyn Conn, url: &str, public: bool, at: i64) -> Result<()> {
    if public {
        c.prepare_cached(
            "INSERT INTO public_sources (url, added_at) VALUES (?1, ?2) ON CONFLICT(url) DO NOTHING",
        )?
        .execute(params![url, at])?;
    } else {
        c.prepare_cached("DELETE FROM public_sources WHERE url = ?1")?.execute(params![url])?;
    }
    Ok(())
}

/// The public sources: URL and when it was marked, by URL.
pub(super) fn public_sources(c: &dyn Conn) -> Result<Vec<(String, i64)>> {
    let mut stmt = c.prepare_cached("SELECT url, added_at FROM public_sources ORDER BY url")?;
    let rows = stmt.query_map(params![], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect::<Result<_>>()
}
