//! One way to run SQL on either database: the seam under the store's SQL.
//!
//! Every module that reads or writes rows (`sqlite::jobs`, `sqlite::nodes`, …) takes a
//! `&dyn Conn` and speaks a shared dialect: `?N` placeholders, `RETURNING`, `ON CONFLICT`
//! upserts, `CAST(x AS BIGINT)`, `json_each(?N)` over a JSON array of values and quoted
//! `"user"`. SQLite runs it as written; the PostgreSQL connection rewrites the placeholders to
//! `$N` and `json_each` to `json_array_elements_text` (see [`crate::postgres`]). Where the
//! dialects do not agree (a label filter over a JSON object), the caller asks
//! [`Conn::dialect`] and picks its SQL. So the rules (what a placement checks, how a lost node
//! requeues its jobs) are written once and hold on both backends.
//!
//! Values cross the seam as [`Value`]: an integer, a real, text or null, the four kinds SQLite
//! has. Each backend binds them as the column's type and reads any column back into one;
//! [`Row::get`] converts to the Rust type the caller asks for, refusing what does not fit.

use crate::{Result, StoreError};

/// Which SQL a connection speaks, for the few statements written twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The embedded store.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// A value bound to or read from a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (booleans are 0 and 1).
    Int(i64),
    /// A double.
    Real(f64),
    /// Text (JSON documents are text).
    Text(String),
    /// A value that cannot be stored (an unsigned integer past `i64::MAX`): binding it fails.
    Invalid(String),
}

/// A Rust value that binds as a [`Value`].
pub trait ToValue {
    /// The value to bind.
    fn to_value(&self) -> Value;
}

macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                i64::try_from(*self).map_or_else(|_| Value::Invalid(format!("{self} is out of range")), Value::Int)
            }
        }
    )*};
}
int_to_value!(i64, i32, u32, u64, u16, u8, usize);

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

/// Statement parameters, as rusqlite's `params!` writes them: `params![a, b.c, None::<i64>]`.
macro_rules! params {
    ($($x:expr),* $(,)?) => { &[$($crate::db::ToValue::to_value(&$x)),*][..] };
}
pub(crate) use params;

/// A Rust type a column converts to.
pub trait FromValue: Sized {
    /// Converts, or says why not.
    fn from_value(v: Value) -> std::result::Result<Self, String>;
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: Value) -> std::result::Result<Self, String> {
                match v {
                    Value::Int(i) => <$t>::try_from(i).map_err(|_| format!("{i} does not fit {}", stringify!($t))),
                    other => Err(format!("{other:?} is not an integer")),
                }
            }
        }
    )*};
}
int_from_value!(i64, i32, u32, u64, u16, u8);

impl FromValue for bool {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        i64::from_value(v).map(|i| i != 0)
    }
}
impl FromValue for f64 {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Real(r) => Ok(r),
            Value::Int(i) => Ok(i as f64),
            other => Err(format!("{other:?} is not a number")),
        }
    }
}
impl FromValue for String {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s),
            other => Err(format!("{other:?} is not text")),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A column index (rusqlite's `get::<_, T>(i)` shape, so the row mappers read the same).
pub trait ColumnIndex {
    /// The index.
    fn index(self) -> usize;
}
impl ColumnIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Value>);

impl Row {
    /// Column `i` as a `T`.
    pub fn get<I: ColumnIndex, T: FromValue>(&self, i: I) -> Result<T> {
        let i = i.index();
        let v = self.0.get(i).cloned().ok_or_else(|| StoreError::Corrupt(format!("no column {i}")))?;
        T::from_value(v).map_err(|why| StoreError::Corrupt(format!("column {i}: {why}")))
    }
}

/// A database connection, as the store's SQL sees it.
pub trait Conn {
    /// Which SQL it speaks.
    fn dialect(&self) -> Dialect;
    /// Runs a statement and returns its rows.
    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>>;
    /// Runs a statement and returns how many rows it changed.
    fn exec(&self, sql: &str, params: &[Value]) -> Result<u64>;
    /// Runs statements without parameters (transaction control, schema).
    fn batch(&self, sql: &str) -> Result<()>;
}

/// A statement to run, rusqlite-shaped (`c.prepare_cached(sql)?.query_row(params, f)`): each
/// backend keeps its own cache of prepared statements, keyed by the SQL.
#[derive(Debug)]
pub struct Stmt<'c, 's> {
    conn: &'c dyn Conn,
    sql: &'s str,
}

impl std::fmt::Debug for dyn Conn + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conn({:?})", self.dialect())
    }
}

impl dyn Conn + '_ {
    /// The statement `sql`.
    pub fn prepare_cached<'s>(&self, sql: &'s str) -> Result<Stmt<'_, 's>> {
        Ok(Stmt { conn: self, sql })
    }
}

impl Stmt<'_, '_> {
    /// The first row, mapped.
    pub fn query_row<T>(&mut self, params: &[Value], f: impl FnOnce(&Row) -> Result<T>) -> Result<T> {
        let rows = self.conn.rows(self.sql, params)?;
        let first = rows.first().ok_or(StoreError::NoRow)?;
        f(first)
    }

    /// Every row, mapped.
    pub fn query_map<T>(
        &mut self,
        params: &[Value],
        f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let rows = self.conn.rows(self.sql, params)?;
        Ok(rows.iter().map(f).collect::<Vec<_>>().into_iter())
    }

    /// Runs it; how many rows it changed.
    pub fn execute(&mut self, params: &[Value]) -> Result<usize> {
        Ok(self.conn.exec(self.sql, params)? as usize)
    }
}

/// `.optional()` on a [`Stmt::query_row`] result: no row is `None`.
pub trait OptionalExtension<T> {
    /// `Ok(None)` for no row.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(StoreError::NoRow) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
