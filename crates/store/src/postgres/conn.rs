//! One PostgreSQL connection behind the synchronous [`Conn`]: tokio-postgres underneath, its
//! futures run on the store's own runtime and waited for on a plain channel, so a caller may
//! be any thread (a tokio worker, the blocking pool, the writer thread) without a runtime being
//! entered twice.
//!
//! The shared SQL is rewritten once per statement and the prepared statement kept: `?N` becomes
//! `$N` (outside quotes) and `json_each(` becomes `json_array_elements_text(` (a JSON array's
//! elements as text, in a column named `value` as SQLite's). Parameters are bound as whatever
//! type the server inferred for them, from the [`Value`] given; columns are read back as values
//! whatever their type, except `numeric` (cast sums to `BIGINT`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Statement};

use super::Target;
use crate::db::{Conn, Dialect, Row, Value};
use crate::{Result, StoreError};

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> std::result::Result<IsNull, BoxError> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                _ => i.to_string().to_sql(&Type::TEXT, out),
            },
            Value::Real(r) => match *ty {
                Type::FLOAT4 => (*r as f32).to_sql(ty, out),
                _ => r.to_sql(&Type::FLOAT8, out),
            },
            Value::Text(s) => match *ty {
                Type::JSON => {
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                Type::JSONB => {
                    out.extend_from_slice(&[1]);
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                _ => s.as_str().to_sql(&Type::TEXT, out),
            },
            Value::Invalid(why) => Err(why.clone().into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, BoxError> {
        Ok(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::JSON => Value::Text(std::str::from_utf8(raw)?.to_owned()),
            Type::JSONB => Value::Text(std::str::from_utf8(raw.get(1..).unwrap_or_default())?.to_owned()),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                Value::Text(String::from_sql(ty, raw)?)
            }
            ref other => return Err(format!("column of type {other} (cast it to BIGINT or TEXT)").into()),
        })
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Self, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// The shared SQL in PostgreSQL's spelling.
pub(super) fn rewrite(sql: &str) -> String {
    let sql = sql.replace("json_each(", "json_array_elements_text(");
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => quoted = !quoted,
            '?' if !quoted => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// Runs `fut` on `rt` and waits for it here (`Closed` once the runtime is gone).
pub(super) fn wait<T: Send + 'static>(
    rt: &Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| StoreError::Closed)
}

/// Opens a connection whose I/O runs on `rt`, with commits durable before they return.
pub(super) fn connect(rt: &Handle, target: &Target) -> Result<Arc<Client>> {
    let Target { config, tls } = target.clone();
    let client = wait(rt, async move {
        let (client, connection) = config.connect(tls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "PostgreSQL connection ended");
            }
        });
        Ok::<_, tokio_postgres::Error>(Arc::new(client))
    })?
    .map_err(tls_failure)?;
    let setup = Arc::clone(&client);
    // A replica paused (SIGSTOP) or stalled inside a transaction holds its row locks, the lease
    // row's among them, and every other replica's election would wait on it: PostgreSQL ends a
    // session idle in a transaction for 5 s, rolling it back and releasing them.
    wait(rt, async move {
        setup
            .batch_execute(
                "SET synchronous_commit = on; SET client_min_messages = warning; \
                 SET idle_in_transaction_session_timeout = 5000",
            )
            .await
    })??;
    Ok(client)
}

/// A failed TLS negotiation in words (tokio-postgres says only "error performing TLS handshake"
/// and leaves the reason to its source); any other error as it is.
fn tls_failure(e: tokio_postgres::Error) -> StoreError {
    let tls = e.to_string().starts_with("error performing TLS handshake");
    let cause = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
    match () {
        () if tls && cause.contains("does not support TLS") => StoreError::Unavailable(
            "the database server does not offer TLS, and the URL's sslmode (require, verify-ca or \
             verify-full) asks for it"
                .into(),
        ),
        () if tls => StoreError::Unavailable(format!(
            "the TLS handshake with the database failed: {cause} (is sslrootcert the CA that \
             signed the server's certificate, and does the certificate name the host?)"
        )),
        () => e.into(),
    }
}

/// A connection and its statement cache. Outside a transaction it connects again when the
/// server went away; inside one it fails instead (the server rolled the transaction back, and
/// what follows must not run on its own).
#[derive(Debug)]
pub(crate) struct PgConn {
    rt: Handle,
    target: Target,
    client: RefCell<Arc<Client>>,
    cache: RefCell<HashMap<String, Statement>>,
    in_transaction: Cell<bool>,
}

impl PgConn {
    pub(super) fn open(rt: &Handle, target: &Target) -> Result<Self> {
        let client = connect(rt, target)?;
        Ok(Self {
            rt: rt.clone(),
            target: target.clone(),
            client: RefCell::new(client),
            cache: RefCell::default(),
            in_transaction: Cell::new(false),
        })
    }

    /// The client, connected again first if the last one was closed (a restarted server, a
    /// terminated backend) and no transaction was open on it.
    fn client(&self) -> Result<Arc<Client>> {
        if self.client.borrow().is_closed() {
            if self.in_transaction.get() {
                return Err(StoreError::Unavailable(
                    "the database connection was lost mid-transaction".into(),
                ));
            }
            let fresh = connect(&self.rt, &self.target)?;
            self.cache.borrow_mut().clear();
            *self.client.borrow_mut() = fresh;
        }
        Ok(Arc::clone(&self.client.borrow()))
    }

    fn statement(&self, client: &Arc<Client>, sql: &str) -> Result<Statement> {
        if let Some(s) = self.cache.borrow().get(sql) {
            return Ok(s.clone());
        }
        let text = rewrite(sql);
        let c = Arc::clone(client);
        let stmt = wait(&self.rt, async move { c.prepare(&text).await })??;
        self.cache.borrow_mut().insert(sql.to_owned(), stmt.clone());
        Ok(stmt)
    }
}

fn refs(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl Conn for PgConn {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let client = self.client()?;
        let stmt = self.statement(&client, sql)?;
        let params = params.to_vec();
        let rows = wait(&self.rt, async move { client.query(&stmt, &refs(&params)).await })??;
        rows.iter()
            .map(|r| (0..r.len()).map(|i| r.try_get::<_, Value>(i)).collect::<std::result::Result<_, _>>())
            .map(|r| r.map(Row).map_err(StoreError::from))
            .collect()
    }

    fn exec(&self, sql: &str, params: &[Value]) -> Result<u64> {
        let client = self.client()?;
        let stmt = self.statement(&client, sql)?;
        let params = params.to_vec();
        Ok(wait(&self.rt, async move { client.execute(&stmt, &refs(&params)).await })??)
    }

    fn batch(&self, sql: &str) -> Result<()> {
        match sql.split_whitespace().next() {
            Some("BEGIN") => self.in_transaction.set(false),
            Some("COMMIT" | "ROLLBACK") if !sql.contains(" TO ") => {
                let ended = self.in_transaction.replace(false);
                if ended && self.client.borrow().is_closed() {
                    return Err(StoreError::Unavailable(
                        "the database connection was lost mid-transaction".into(),
                    ));
                }
            }
            _ => {}
        }
        let client = self.client()?;
        let begins = sql.starts_with("BEGIN");
        let sql = sql.to_owned();
        wait(&self.rt, async move { client.batch_execute(&sql).await })??;
        if begins {
            self.in_transaction.set(true);
        }
        Ok(())
    }
}
