//! The SQLite side of [`crate::db`]: statements from rusqlite's cache, values as SQLite's own.

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql};

use crate::Result;
use crate::db::{Conn, Dialect, Row, Value};

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Value::Real(r) => ToSqlOutput::Borrowed(ValueRef::Real(*r)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Invalid(why) => return Err(rusqlite::Error::ToSqlConversionFailure(why.clone().into())),
        })
    }
}

fn value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(r) => Value::Real(r),
        ValueRef::Text(t) | ValueRef::Blob(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
    }
}

impl Conn for Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut stmt = self.prepare_cached(sql)?;
        let n = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(Row((0..n).map(|i| r.get_ref(i).map(value)).collect::<rusqlite::Result<_>>()?));
        }
        Ok(out)
    }

    fn exec(&self, sql: &str, params: &[Value]) -> Result<u64> {
        Ok(self.prepare_cached(sql)?.execute(rusqlite::params_from_iter(params))? as u64)
    }

    fn batch(&self, sql: &str) -> Result<()> {
        Ok(self.execute_batch(sql)?)
    }
}
