//! Moving a cluster: a SQLite store's whole state copied into an empty PostgreSQL database
//! (`gantry db migrate --from DATA_DIR --to postgres://…`).
//!
//! **What is copied** is read from the schemas, not listed here: every table of the SQLite
//! store, every column of each, in an order that puts a referenced table before the tables
//! that reference it. A table or column that one side has and the other lacks is refused with a
//! sentence rather than dropped; the only PostgreSQL-only table the copier knows is
//! `scheduler_seq` (the change log's counter row, which SQLite's AUTOINCREMENT stands for), set
//! to continue after the copied log.
//!
//! **One transaction.** The target must hold no table at all. The PostgreSQL migrations, the
//! copy and the fix-ups run in one transaction (PostgreSQL's DDL is transactional), so a failure
//! anywhere leaves the database as empty as it was. The rows the migrations seed (the `admin`
//! user) are replaced by the source's; the tables' own triggers (change log, job counts, the
//! audit chain's and allocations' checks) are off while the copy writes, because the copied
//! rows already are what they would keep, and on again before the commit. Identity columns
//! continue after the highest copied id (or SQLite's AUTOINCREMENT counter, if higher: an id
//! once given is never given again).
//!
//! **The source** is read inside one SQLite read transaction (a snapshot), after its own
//! pending migrations; the caller makes sure no server is using it (`gantry.lock`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::db::{Conn, Row, Value};
use crate::{Result, StoreError};

use super::conn::PgConn;

/// Why a copy did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The source or target is not one the copier may use; nothing was written.
    #[error("{0}")]
    Refused(String),
    /// A database failed; the target's transaction was rolled back.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What was copied: rows per table, in copy order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    /// (table, rows).
    pub tables: Vec<(String, u64)>,
}

impl Copied {
    /// Rows copied in all.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, n)| n).sum()
    }
}

/// PostgreSQL-only tables the copier fills itself: (table, SQL run after the copy; `?1` is the
/// highest value SQLite's AUTOINCREMENT gave the change log).
const DERIVED: &[(&str, &str)] = &[(
    "scheduler_seq",
    "UPDATE scheduler_seq SET seq = GREATEST(CAST(?1 AS BIGINT), \
     COALESCE((SELECT MAX(seq) FROM scheduler_changes), 0)) WHERE one = 1",
)];

/// Rows read from SQLite at a time.
const PAGE: i64 = 5_000;

/// Rows per `INSERT` (PostgreSQL takes at most 65,535 parameters in one statement).
const BATCH_PARAMS: usize = 30_000;

/// Copies the SQLite store in `dir` into the empty PostgreSQL database at `url`.
pub fn sqlite_to_postgres(dir: &Path, url: &str) -> std::result::Result<Copied, CopyError> {
    let db = dir.join("gantry.db");
    if !dir.is_dir() {
        return Err(CopyError::Refused(format!("{} is not a directory", dir.display())));
    }
    if !db.is_file() {
        return Err(CopyError::Refused(format!(
            "{} holds no SQLite store (no gantry.db): is it a gantry data directory?",
            dir.display()
        )));
    }
    // The target first: a URL that does not connect leaves the source untouched.
    let (settings, runtime) = super::open_parts(url)?;
    let target = match PgConn::open(runtime.handle(), &settings) {
        Ok(target) => target,
        Err(e) => {
            runtime.shutdown_background();
            return Err(e.into());
        }
    };
    let mut source = rusqlite::Connection::open_with_flags(
        &db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(StoreError::from)?;
    source.busy_timeout(std::time::Duration::from_secs(10)).map_err(StoreError::from)?;
    crate::sqlite::migrate_for_copy(&mut source)?;
    source.execute_batch("BEGIN").map_err(StoreError::from)?;
    let result = copy(&source, &target);
    let _ = source.execute_batch("ROLLBACK");
    if result.is_err() {
        let _ = target.batch("ROLLBACK");
    }
    drop(target);
    runtime.shutdown_background();
    result
}

fn copy(source: &dyn Conn, target: &dyn Conn) -> std::result::Result<Copied, CopyError> {
    target.batch("BEGIN")?;
    target.exec("SELECT pg_advisory_xact_lock(?1)", &[Value::Int(super::migrate::LOCK)])?;
    let present = strings(
        target,
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY 1",
    )?;
    if !present.is_empty() {
        let shown: Vec<&str> = present.iter().take(5).map(String::as_str).collect();
        return Err(CopyError::Refused(format!(
            "the target database is not empty: it has {} tables ({}{}); gantry db migrate copies \
             into an empty database only (create one with `createdb`)",
            present.len(),
            shown.join(", "),
            if present.len() > shown.len() { ", …" } else { "" }
        )));
    }
    super::migrate::apply_in_transaction(target)?;

    let ours = strings(
        source,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let theirs: BTreeSet<String> = strings(
        target,
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
         AND table_name <> 'gantry_schema' ORDER BY 1",
    )?
    .into_iter()
    .collect();
    for table in &ours {
        if !theirs.contains(table) {
            return Err(CopyError::Refused(format!(
                "table `{table}` of the SQLite store has no twin in PostgreSQL: this gantry does not \
                 know how to copy it (is the store from a newer gantry?)"
            )));
        }
    }
    for table in &theirs {
        if !ours.contains(table) && !DERIVED.iter().any(|(t, _)| t == table) {
            return Err(CopyError::Refused(format!(
                "table `{table}` exists only in PostgreSQL and the copier does not know how to fill it"
            )));
        }
    }
    let order = copy_order(source, &ours)?;
    let mut columns = BTreeMap::new();
    for table in &order {
        columns.insert(table.clone(), matching_columns(source, target, table)?);
    }

    for table in theirs.iter() {
        target.batch(&format!("ALTER TABLE {} DISABLE TRIGGER USER", quote(table)))?;
    }
    // What the migrations seeded (the admin user), children first.
    for table in order.iter().rev() {
        target.exec(&format!("DELETE FROM {}", quote(table)), &[])?;
    }
    let mut copied = Copied::default();
    for table in &order {
        let n = copy_table(source, target, table, &columns[table])?;
        copied.tables.push((table.clone(), n));
    }
    continue_identities(source, target)?;
    let log_counter = autoincrement(source, "scheduler_changes")?;
    for (_, sql) in DERIVED {
        target.exec(sql, &[Value::Int(log_counter)])?;
    }
    for table in theirs.iter() {
        target.batch(&format!("ALTER TABLE {} ENABLE TRIGGER USER", quote(table)))?;
    }
    target.batch("COMMIT")?;
    Ok(copied)
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn strings(c: &dyn Conn, sql: &str) -> Result<Vec<String>> {
    c.rows(sql, &[])?.iter().map(|r| r.get(0)).collect()
}

/// Tables ordered so that each comes after the tables its foreign keys name (a table that
/// names itself is copied in id order).
fn copy_order(source: &dyn Conn, tables: &[String]) -> std::result::Result<Vec<String>, CopyError> {
    let mut needs: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for table in tables {
        let parents =
            strings(source, &format!("SELECT DISTINCT \"table\" FROM pragma_foreign_key_list('{table}')"))?;
        needs.insert(table, parents.into_iter().filter(|p| p != table).collect());
    }
    let mut order: Vec<String> = Vec::new();
    while order.len() < tables.len() {
        let ready: Vec<&str> = needs
            .iter()
            .filter(|(t, parents)| {
                !order.iter().any(|o| o == *t) && parents.iter().all(|p| order.contains(p))
            })
            .map(|(t, _)| *t)
            .collect();
        if ready.is_empty() {
            let left: Vec<&str> = needs.keys().copied().filter(|t| !order.iter().any(|o| o == t)).collect();
            return Err(CopyError::Refused(format!(
                "the tables {} reference each other (or a table that does not exist): no order copies them",
                left.join(", ")
            )));
        }
        order.extend(ready.into_iter().map(str::to_owned));
    }
    Ok(order)
}

/// A column of the target: its name and PostgreSQL type.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: String,
}

/// The columns of `table` in SQLite's order, each with its PostgreSQL type; a column on one side
/// only is refused.
fn matching_columns(
    source: &dyn Conn,
    target: &dyn Conn,
    table: &str,
) -> std::result::Result<Vec<Column>, CopyError> {
    let ours = strings(source, &format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"))?;
    let theirs: BTreeMap<String, String> = target
        .rows(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = ?1",
            &[Value::Text(table.to_owned())],
        )?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?)))
        .collect::<Result<_>>()?;
    if let Some(missing) = ours.iter().find(|c| !theirs.contains_key(*c)) {
        return Err(CopyError::Refused(format!(
            "column `{table}.{missing}` of the SQLite store has no twin in PostgreSQL"
        )));
    }
    if let Some(extra) = theirs.keys().find(|c| !ours.contains(c)) {
        return Err(CopyError::Refused(format!(
            "column `{table}.{extra}` exists only in PostgreSQL and the copier does not know how to fill it"
        )));
    }
    Ok(ours.into_iter().map(|name| Column { ty: theirs[&name].clone(), name }).collect())
}

/// The value as the target column takes it, or why it cannot be (SQLite keeps any value in any
/// column; PostgreSQL would misread one of another kind).
fn fit(table: &str, column: &Column, v: Value) -> std::result::Result<Value, CopyError> {
    let integer = matches!(column.ty.as_str(), "bigint" | "integer" | "smallint" | "boolean");
    let real = matches!(column.ty.as_str(), "double precision" | "real");
    let text = matches!(column.ty.as_str(), "text" | "character varying" | "json" | "jsonb");
    let bad = |what: &str| {
        CopyError::Refused(format!(
            "`{table}.{}` is {} in PostgreSQL but a row holds {what} there",
            column.name, column.ty
        ))
    };
    Ok(match v {
        Value::Null => Value::Null,
        Value::Int(i) if integer || real => Value::Int(i),
        Value::Int(i) if text => Value::Text(i.to_string()),
        Value::Real(r) if real => Value::Real(r),
        Value::Real(r) if integer && r.fract() == 0.0 && r.abs() < 9.0e15 => Value::Int(r as i64),
        Value::Text(s) if text => Value::Text(s),
        Value::Text(s) if integer => {
            Value::Int(s.trim().parse().map_err(|_| bad(&format!("the text {s:?}")))?)
        }
        Value::Text(s) if real => Value::Real(s.trim().parse().map_err(|_| bad(&format!("the text {s:?}")))?),
        other if !(integer || real || text) => {
            return Err(CopyError::Refused(format!(
                "`{table}.{}` has the type {}, which the copier does not know ({other:?})",
                column.name, column.ty
            )));
        }
        other => return Err(bad(&format!("{other:?}"))),
    })
}

fn copy_table(
    source: &dyn Conn,
    target: &dyn Conn,
    table: &str,
    columns: &[Column],
) -> std::result::Result<u64, CopyError> {
    let names: Vec<String> = columns.iter().map(|c| quote(&c.name)).collect();
    let list = names.join(", ");
    // Read in pages by rowid, so that a table of millions of rows (events, usage samples) is
    // never in memory whole; a WITHOUT ROWID table (small ones: counts, graph edges) at once.
    let without_rowid = source.rows(&format!("SELECT rowid FROM {} LIMIT 0", quote(table)), &[]).is_err();
    let per_insert = (BATCH_PARAMS / columns.len().max(1)).clamp(1, 500);
    let mut after = i64::MIN;
    let mut copied = 0u64;
    loop {
        let page = if without_rowid {
            source.rows(&format!("SELECT {list} FROM {}", quote(table)), &[])?
        } else {
            source.rows(
                &format!(
                    "SELECT rowid, {list} FROM {} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
                    quote(table)
                ),
                &[Value::Int(after), Value::Int(PAGE)],
            )?
        };
        let n = page.len();
        for chunk in page.chunks(per_insert) {
            let mut params = Vec::with_capacity(chunk.len() * columns.len());
            let mut tuples = Vec::with_capacity(chunk.len());
            for Row(values) in chunk {
                let mut values = values.iter().cloned();
                if !without_rowid && let Some(Value::Int(rowid)) = values.next() {
                    after = rowid;
                }
                let first = params.len();
                for (v, column) in values.zip(columns) {
                    params.push(fit(table, column, v)?);
                }
                let slots: Vec<String> = (first + 1..=params.len()).map(|i| format!("?{i}")).collect();
                tuples.push(format!("({})", slots.join(", ")));
            }
            target.exec(
                &format!("INSERT INTO {} ({list}) VALUES {}", quote(table), tuples.join(", ")),
                &params,
            )?;
        }
        copied += n as u64;
        if without_rowid || n < PAGE as usize {
            return Ok(copied);
        }
    }
}

/// SQLite's AUTOINCREMENT counter of `table` (0 when it has none).
fn autoincrement(source: &dyn Conn, table: &str) -> Result<i64> {
    let has_sequence =
        !strings(source, "SELECT name FROM sqlite_master WHERE name = 'sqlite_sequence'")?.is_empty();
    if !has_sequence {
        return Ok(0);
    }
    let rows =
        source.rows("SELECT seq FROM sqlite_sequence WHERE name = ?1", &[Value::Text(table.to_owned())])?;
    Ok(rows.first().map(|r| r.get::<_, Option<i64>>(0)).transpose()?.flatten().unwrap_or(0))
}

/// Every identity column's sequence set to give next the value after the highest copied id.
fn continue_identities(source: &dyn Conn, target: &dyn Conn) -> Result<()> {
    let identities = target.rows(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND is_identity = 'YES' ORDER BY 1",
        &[],
    )?;
    for row in identities {
        let (table, column): (String, String) = (row.get(0)?, row.get(1)?);
        let highest: Option<i64> = target
            .rows(&format!("SELECT MAX({}) FROM {}", quote(&column), quote(&table)), &[])?
            .first()
            .map(|r| r.get(0))
            .transpose()?
            .flatten();
        let next = highest.unwrap_or(0).max(autoincrement(source, &table)?) + 1;
        target.exec(
            "SELECT setval(pg_get_serial_sequence(?1, ?2), CAST(?3 AS BIGINT), false)",
            &[Value::Text(quote(&table)), Value::Text(column), Value::Int(next)],
        )?;
    }
    Ok(())
}
