//! One SQL text, two databases: the handle every store query runs on (`Db`), implemented for a
//! SQLite connection and for a PostgreSQL client or transaction.
//!
//! The store's queries are written once, in the SQL both dialects share, with PostgreSQL's
//! numbered parameters (`$1`, `$2`), which SQLite parses too (as parameters named `$1`, `$2`,
//! bound here by their number, `bind_numbered`): no statement's text is changed at run time, and
//! each is prepared once per connection and cached. What differs is written per dialect, side by
//! side, where it is: the schema (`migrations/{sqlite,postgres}`), the merge's guard (`guard`),
//! SQLite's index hints (`indexed_by`), the job search's case folding (`jobs::list`), the
//! outbox's row locks. Values cross as SQLite's five storage classes (`Value`); on PostgreSQL an
//! integer is written as whatever integer (or boolean) the column is, and read back from any of
//! them; a sum is cast to BIGINT in the query (PostgreSQL's `sum` of BIGINT is NUMERIC, which is
//! not read here).

use std::sync::Arc;
use tokio::runtime::Handle;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};

crate::closed_set::closed_set! {
    /// Which database a store is on (and a handle speaks to).
    #[ts(export)]
    pub enum Dialect {
        Sqlite = "sqlite",
        Postgres = "postgres",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The database cannot be reached (the pool found no connection in time): retry later.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error("the query returned no row")]
    NoRow,
    #[error("column {column}: expected {expected}, found {found}")]
    Type { column: String, expected: &'static str, found: &'static str },
    /// A row was read by a column name its query does not return.
    #[error("the query returns no column {0:?}")]
    NoColumn(String),
    /// A statement names a parameter other than `$N` (or SQLite's `?N`).
    #[error("the statement's parameter {0:?} is not $N")]
    Parameter(String),
    /// A statement's highest `$N` is not the number of values given.
    #[error("the statement takes {expected} values, {given} were given")]
    ParameterCount { expected: usize, given: usize },
    #[error("{0}")]
    Schema(String),
    /// refinery could not apply the schema's files (or found an applied one edited since), with
    /// the error's causes (a driver's "db error" says what went wrong only in its source).
    #[error("the schema could not be migrated: {0}")]
    Migration(String),
}

impl From<refinery::Error> for DbError {
    fn from(e: refinery::Error) -> DbError {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text = format!("{text}: {cause_text}");
            }
            source = cause.source();
        }
        DbError::Migration(text)
    }
}

impl DbError {
    /// PostgreSQL's serialization-failure and deadlock errors: the write can
    /// simply run again (it will see the other writer's commit).
    pub fn is_retryable(&self) -> bool {
        match self {
            DbError::Postgres(e) => e.code().is_some_and(|code| {
                [tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE, tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED]
                    .contains(code)
            }),
            _ => false,
        }
    }

    /// The database went away under the query (connection refused, closed, or shutting down).
    pub fn is_unavailable(&self) -> bool {
        match self {
            DbError::Unavailable(_) => true,
            DbError::Postgres(e) => {
                e.is_closed()
                    || e.code()
                        .is_some_and(|code| code.code().starts_with("08") || code.code().starts_with("57P") || code.code() == "53300")
                    || e.code().is_none()
            }
            _ => false,
        }
    }
}

pub type Result<T, E = DbError> = std::result::Result<T, E>;

/// A value as SQLite stores it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A borrowed value: what a query's parameter is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

impl ValueRef<'_> {
    fn kind(&self) -> &'static str {
        match self {
            ValueRef::Null => "null",
            ValueRef::Integer(_) => "integer",
            ValueRef::Real(_) => "real",
            ValueRef::Text(_) => "text",
            ValueRef::Blob(_) => "blob",
        }
    }
}

impl Value {
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

/// What can be a query's parameter.
pub trait ToValue {
    fn to_value(&self) -> ValueRef<'_>;
}

macro_rules! integer_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> ValueRef<'_> {
                ValueRef::Integer(*self as i64)
            }
        }
    )*};
}
integer_to_value!(i64, i32, u32, u16, u64, usize, bool);

impl ToValue for f64 {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Real(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(self)
    }
}
impl ToValue for String {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(self)
    }
}
impl ToValue for [u8] {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
}
impl ToValue for Vec<u8> {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
}
impl ToValue for Value {
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref()
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> ValueRef<'_> {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref().map_or(ValueRef::Null, ToValue::to_value)
    }
}

/// A query's parameters: `params![a, b]` is `&[&a, &b]` as `&[&dyn ToValue]`.
#[doc(hidden)]
#[macro_export]
macro_rules! __params {
    () => { &[] as &[&dyn $crate::sql::ToValue] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::sql::ToValue),+] as &[&dyn $crate::sql::ToValue] };
}
// Exported at the crate's root under a hidden name (`macro_export` puts it there), and named here:
// the engine's writes use it too (`store::sql::params`).
pub use crate::__params as params;

/// What a column can be read as.
pub trait FromValue: Sized {
    const EXPECTED: &'static str;
    fn from_value(value: ValueRef<'_>) -> Option<Self>;
}

macro_rules! integer_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            const EXPECTED: &'static str = "integer";
            fn from_value(value: ValueRef<'_>) -> Option<Self> {
                match value {
                    ValueRef::Integer(i) => <$t>::try_from(i).ok(),
                    _ => None,
                }
            }
        }
    )*};
}
integer_from_value!(i64, i32, u32, u16, u64, usize);

impl FromValue for bool {
    const EXPECTED: &'static str = "integer (boolean)";
    fn from_value(value: ValueRef<'_>) -> Option<Self> {
        match value {
            ValueRef::Integer(i) => Some(i != 0),
            _ => None,
        }
    }
}
impl FromValue for f64 {
    const EXPECTED: &'static str = "real";
    fn from_value(value: ValueRef<'_>) -> Option<Self> {
        match value {
            ValueRef::Real(f) => Some(f),
            ValueRef::Integer(i) => Some(i as f64),
            _ => None,
        }
    }
}
impl FromValue for String {
    const EXPECTED: &'static str = "text";
    fn from_value(value: ValueRef<'_>) -> Option<Self> {
        match value {
            ValueRef::Text(s) => Some(s.to_owned()),
            _ => None,
        }
    }
}
impl FromValue for Vec<u8> {
    const EXPECTED: &'static str = "blob";
    fn from_value(value: ValueRef<'_>) -> Option<Self> {
        match value {
            ValueRef::Blob(b) => Some(b.to_vec()),
            ValueRef::Text(s) => Some(s.as_bytes().to_vec()),
            _ => None,
        }
    }
}
impl FromValue for Value {
    const EXPECTED: &'static str = "any";
    fn from_value(value: ValueRef<'_>) -> Option<Self> {
        Some(match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(s) => Value::Text(s.to_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        })
    }
}
impl<T: FromValue> FromValue for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    fn from_value(value: ValueRef<'_>) -> Option<Self> {
        match value {
            ValueRef::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One row of a result, its values owned, with its query's column names (shared by its rows).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

/// A column of a row: its name (`row.get("state")`, what a struct's reader uses), or its position
/// (`row.get(0)`, for a query of one value).
pub trait ColumnIndex {
    fn position(self, columns: &[String]) -> Result<usize>;
}

impl ColumnIndex for usize {
    fn position(self, _columns: &[String]) -> Result<usize> {
        Ok(self)
    }
}

impl ColumnIndex for &str {
    fn position(self, columns: &[String]) -> Result<usize> {
        columns.iter().position(|name| name == self).ok_or_else(|| DbError::NoColumn(self.to_owned()))
    }
}

impl Row {
    pub fn get<I: ColumnIndex, T: FromValue>(&self, index: I) -> Result<T> {
        let index = index.position(&self.columns)?;
        let value = self.values.get(index).map_or(ValueRef::Null, Value::as_ref);
        T::from_value(value).ok_or_else(|| DbError::Type {
            column: self.columns.get(index).cloned().unwrap_or_else(|| index.to_string()),
            expected: T::EXPECTED,
            found: value.kind(),
        })
    }
}

/// A query's parameters: `params![a, b]`, an array of values (`[id]`), or none (`[]`).
pub trait Params {
    fn values(&self) -> Vec<ValueRef<'_>>;
}

impl Params for &[&dyn ToValue] {
    fn values(&self) -> Vec<ValueRef<'_>> {
        self.iter().map(|p| p.to_value()).collect()
    }
}

impl Params for [&dyn ToValue; 0] {
    fn values(&self) -> Vec<ValueRef<'_>> {
        Vec::new()
    }
}

macro_rules! array_params {
    ($($n:literal),*) => {$(
        impl<T: ToValue> Params for [T; $n] {
            fn values(&self) -> Vec<ValueRef<'_>> {
                self.iter().map(ToValue::to_value).collect()
            }
        }
    )*};
}
array_params!(1, 2, 3, 4, 5, 6, 7, 8);

impl Params for Vec<Value> {
    fn values(&self) -> Vec<ValueRef<'_>> {
        self.iter().map(Value::as_ref).collect()
    }
}

/// A batch bound as one parameter: the JSON array in parameter `$n` read as rows by a subquery, so
/// that one statement takes a batch of any size (the outbox's settled rows, their jobs) where it
/// took a statement per row, on both databases. Of integer ids: the condition that `column` is one
/// of them.
///
/// On PostgreSQL the ids are taken as an array (`= ANY`), not a subquery (`IN`): the planner
/// counts a hundred rows for any `jsonb_array_elements`, and a hundred lookups cost more than a
/// scan of a table of ten thousand rows, so `IN` scanned the whole outbox (and `jobs`, below) at
/// every batch of the dispatcher, 1-2 ms each while the tables are small; an array's elements are
/// looked up in the index whatever their count is thought to be (BENCHMARKS.md, session 21).
pub fn id_in_json(dialect: Dialect, column: &str, n: usize) -> String {
    match dialect {
        Dialect::Sqlite => format!("{column} IN (SELECT CAST(value AS INTEGER) FROM json_each(${n}))"),
        Dialect::Postgres => {
            format!(
                "{column} = ANY (ARRAY(SELECT CAST(value AS BIGINT) FROM jsonb_array_elements_text(CAST(CAST(${n} AS TEXT) AS JSONB))))"
            )
        }
    }
}

/// A batch as `id_in_json` and `job_key_in_json` read it: ids, or jobs' keys as pairs.
pub fn json_batch(items: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(items).map_err(|e| DbError::Schema(format!("a batch could not be written as JSON: {e}")))
}

/// As `id_in_json`, of jobs' keys (`[[provider, job_id], ...]`, `json_batch` of pairs): the
/// condition that a row of `jobs` is the job of one of them. On PostgreSQL each key is looked up
/// in the index `(provider, job_id)` and the rows found taken by their ids (see `id_in_json` for
/// why not `IN`).
pub fn job_key_in_json(dialect: Dialect, n: usize) -> String {
    match dialect {
        Dialect::Sqlite => format!(
            "(provider, job_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(${n}))"
        ),
        Dialect::Postgres => format!(
            "id = ANY (ARRAY(SELECT keyed.id FROM jsonb_array_elements(CAST(CAST(${n} AS TEXT) AS JSONB)) AS k
                             CROSS JOIN LATERAL (SELECT j.id FROM jobs j WHERE j.provider = k.value->>0 AND j.job_id = k.value->>1 LIMIT 1) AS keyed))"
        ),
    }
}

/// A connection or transaction on either database. Statements are prepared once per connection
/// and cached. Queries use the methods on `dyn Db` (`execute`, `query_row`, `prepare_cached`),
/// which read like rusqlite's.
pub trait Db {
    fn dialect(&self) -> Dialect;
    /// Runs a statement; how many rows it changed.
    fn run(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<usize>;
    /// Runs a query; every row it returned.
    fn rows(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<Vec<Row>>;
    /// As `rows`, its plan made for these parameters: on PostgreSQL the statement is prepared for
    /// this call only (a kept statement's plan is made once for every parameter after five calls;
    /// where the best plan depends on a parameter, such as a search term's trigrams, that plan is
    /// the wrong one for some). SQLite's plans are made for the statement alone, kept or not.
    fn rows_planned_now(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<Vec<Row>> {
        self.rows(sql, params)
    }
    /// Runs statements without parameters, one after the other (a schema).
    fn execute_batch(&self, sql: &str) -> Result<()>;
}

impl dyn Db + '_ {
    /// Runs a statement; how many rows it changed.
    pub fn execute(&self, sql: &str, params: impl Params) -> Result<usize> {
        self.run(sql, &params.values())
    }

    /// The first row, read by `f`; `NoRow` when there is none (`.optional()` makes that `None`).
    pub fn query_row<T>(&self, sql: &str, params: impl Params, f: impl FnOnce(&Row) -> Result<T>) -> Result<T> {
        self.rows(sql, &params.values())?.first().map(f).unwrap_or(Err(DbError::NoRow))
    }

    /// Every row of a query whose plan is made for these parameters (`Db::rows_planned_now`).
    pub fn query_planned_now(&self, sql: &str, params: impl Params) -> Result<Vec<Row>> {
        self.rows_planned_now(sql, &params.values())
    }

    /// A statement to run (its text is prepared and cached by the connection when it runs).
    pub fn prepare_cached<'d>(&'d self, sql: &str) -> Result<Statement<'d>> {
        Ok(Statement { db: self, sql: sql.to_owned() })
    }
}

/// A statement of a `Db`, as rusqlite's `CachedStatement` reads.
pub struct Statement<'d> {
    db: &'d dyn Db,
    sql: String,
}

impl Statement<'_> {
    pub fn execute(&mut self, params: impl Params) -> Result<usize> {
        self.db.run(&self.sql, &params.values())
    }

    pub fn query_row<T>(&mut self, params: impl Params, f: impl FnOnce(&Row) -> Result<T>) -> Result<T> {
        self.db.rows(&self.sql, &params.values())?.first().map(f).unwrap_or(Err(DbError::NoRow))
    }

    /// Each row read by `f` (collect them into a `Result<Vec<_>>`).
    pub fn query_map<T, F: FnMut(&Row) -> Result<T>>(&mut self, params: impl Params, mut f: F) -> Result<std::vec::IntoIter<Result<T>>> {
        let rows = self.db.rows(&self.sql, &params.values())?;
        Ok(rows.iter().map(&mut f).collect::<Vec<_>>().into_iter())
    }

    /// Every row.
    pub fn query(&mut self, params: impl Params) -> Result<Vec<Row>> {
        self.db.rows(&self.sql, &params.values())
    }
}

/// `NoRow` as `None`, as rusqlite's `OptionalExtension`.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(DbError::NoRow) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

// ----- SQLite -----

impl rusqlite::ToSql for ValueRef<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef as Sqlite};
        Ok(ToSqlOutput::Borrowed(match *self {
            ValueRef::Null => Sqlite::Null,
            ValueRef::Integer(i) => Sqlite::Integer(i),
            ValueRef::Real(f) => Sqlite::Real(f),
            ValueRef::Text(s) => Sqlite::Text(s.as_bytes()),
            ValueRef::Blob(b) => Sqlite::Blob(b),
        }))
    }
}

fn sqlite_row(row: &rusqlite::Row<'_>, columns: &Arc<[String]>) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef as Sqlite;
    let mut values = Vec::with_capacity(columns.len());
    for index in 0..columns.len() {
        values.push(match row.get_ref(index)? {
            Sqlite::Null => Value::Null,
            Sqlite::Integer(i) => Value::Integer(i),
            Sqlite::Real(f) => Value::Real(f),
            Sqlite::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            Sqlite::Blob(b) => Value::Blob(b.to_vec()),
        });
    }
    Ok(Row { columns: columns.clone(), values })
}

/// Binds `$N` (and SQLite's own `?N`) to the N-th value, by the parameter's name as SQLite
/// parsed it (`sqlite3_bind_parameter_name`): SQLite numbers named parameters in the order they
/// first appear, so binding by position would give `$2` the first value in `... $2 ... $1`.
/// A bare `?` takes the value at its position.
fn bind_numbered(statement: &mut rusqlite::Statement<'_>, numbers: &[usize], params: &[ValueRef<'_>]) -> Result<()> {
    let mut used = 0;
    for (index, &number) in numbers.iter().enumerate() {
        let value = params.get(number - 1).ok_or(DbError::ParameterCount { expected: number, given: params.len() })?;
        statement.raw_bind_parameter(index + 1, value)?;
        used = used.max(number);
    }
    if used != params.len() {
        return Err(DbError::ParameterCount { expected: used, given: params.len() });
    }
    Ok(())
}

/// What binding and reading a statement needs of its text, read from SQLite once per statement
/// text: its parameters' numbers (`bind_numbered`) and its columns' names.
struct Shape {
    sql: Box<str>,
    numbers: Box<[usize]>,
    columns: Arc<[String]>,
}

impl Shape {
    fn of(sql: &str, statement: &rusqlite::Statement<'_>) -> Result<Shape> {
        let numbers = (1..=statement.parameter_count())
            .map(|index| match statement.parameter_name(index) {
                Some(name) => name
                    .strip_prefix(['$', '?'])
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| DbError::Parameter(name.to_owned())),
                None => Ok(index),
            })
            .collect::<Result<_>>()?;
        let columns = statement.column_names().into_iter().map(str::to_owned).collect();
        Ok(Shape { sql: sql.into(), numbers, columns })
    }

    /// The same text, with as many parameters and columns as SQLite's statement has now (its
    /// columns may change again at its next step: `rows`).
    fn fits(&self, sql: &str, statement: &rusqlite::Statement<'_>) -> bool {
        &*self.sql == sql && self.numbers.len() == statement.parameter_count() && self.columns.len() == statement.column_count()
    }
}

/// Statement texts kept per thread, as SQLite's prepared statements are per connection: the
/// writer runs the same few statements for every delivery, and reading their parameters' names
/// and columns' names each time (a String per column) was a measurable part of its work. Looked
/// up by where the text is and its length, then compared whole (a text built at run time may
/// reuse an address); bounded, emptied when full.
const SHAPES_KEPT: usize = 256;

thread_local! {
    static SHAPES: std::cell::RefCell<std::collections::HashMap<(usize, usize), Arc<Shape>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn forget_shape(sql: &str) {
    SHAPES.with(|shapes| shapes.borrow_mut().remove(&(sql.as_ptr() as usize, sql.len())));
}

fn shape(sql: &str, statement: &rusqlite::Statement<'_>) -> Result<Arc<Shape>> {
    let key = (sql.as_ptr() as usize, sql.len());
    if let Some(shape) = SHAPES.with(|shapes| shapes.borrow().get(&key).filter(|shape| shape.fits(sql, statement)).cloned()) {
        return Ok(shape);
    }
    let shape = Arc::new(Shape::of(sql, statement)?);
    SHAPES.with(|shapes| {
        let mut shapes = shapes.borrow_mut();
        if shapes.len() >= SHAPES_KEPT {
            shapes.clear();
        }
        shapes.insert(key, shape.clone());
    });
    Ok(shape)
}

impl Db for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<usize> {
        let mut statement = rusqlite::Connection::prepare_cached(self, sql)?;
        let shape = shape(sql, &statement)?;
        bind_numbered(&mut statement, &shape.numbers, params)?;
        Ok(statement.raw_execute()?)
    }

    fn rows(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<Vec<Row>> {
        let mut statement = rusqlite::Connection::prepare_cached(self, sql)?;
        let shape = shape(sql, &statement)?;
        bind_numbered(&mut statement, &shape.numbers, params)?;
        let mut columns = shape.columns.clone();
        let mut rows = statement.raw_query();
        let mut read = Vec::new();
        while let Some(row) = rows.next()? {
            // SQLite compiles a kept statement again at its first step after the schema changed
            // (a `SELECT *` over a table with a new column): its columns are known from there.
            if read.is_empty() && row.as_ref().column_count() != columns.len() {
                columns = row.as_ref().column_names().into_iter().map(str::to_owned).collect();
                forget_shape(sql);
            }
            read.push(sqlite_row(row, &columns)?);
        }
        Ok(read)
    }

    fn execute_batch(&self, sql: &str) -> Result<()> {
        Ok(rusqlite::Connection::execute_batch(self, sql)?)
    }
}

// ----- PostgreSQL -----

/// A PostgreSQL client or transaction, used from a blocking thread (`Store` runs every read and
/// write on one): each call waits for its answer on the runtime of `handle`.
pub struct PgDb<'a, C> {
    pub client: &'a C,
    pub handle: Handle,
}

impl<C: deadpool_postgres::GenericClient + Sync> PgDb<'_, C> {
    fn statement(&self, sql: &str) -> Result<tokio_postgres::Statement> {
        Ok(self.handle.block_on(self.client.prepare_cached(sql))?)
    }

    fn rows_of(&self, statement: &tokio_postgres::Statement, params: &[ValueRef<'_>]) -> Result<Vec<Row>> {
        let values = pg_params(params);
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let rows = self.handle.block_on(self.client.query(statement, &refs))?;
        let columns: Arc<[String]> = statement.columns().iter().map(|c| c.name().to_owned()).collect();
        rows.iter().map(|row| pg_row_of(row, &columns)).collect()
    }
}

impl<C: deadpool_postgres::GenericClient + Sync> Db for PgDb<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn run(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<usize> {
        let statement = self.statement(sql)?;
        let values = pg_params(params);
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        Ok(self.handle.block_on(self.client.execute(&statement, &refs))? as usize)
    }

    fn rows(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<Vec<Row>> {
        let statement = self.statement(sql)?;
        self.rows_of(&statement, params)
    }

    fn rows_planned_now(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<Vec<Row>> {
        let statement = self.handle.block_on(self.client.prepare(sql))?;
        self.rows_of(&statement, params)
    }

    fn execute_batch(&self, sql: &str) -> Result<()> {
        Ok(self.handle.block_on(self.client.batch_execute(sql))?)
    }
}

fn pg_row_of(row: &tokio_postgres::Row, columns: &Arc<[String]>) -> Result<Row> {
    let values = (0..row.len()).map(|i| row.try_get::<_, PgValue>(i).map(|v| v.0)).collect::<Result<Vec<_>, _>>()?;
    Ok(Row { columns: columns.clone(), values })
}

/// A row tokio-postgres read, as the store's readers read rows (by name): its columns of the
/// types a `Value` holds (an array column, read by tokio-postgres itself, is left out).
pub(crate) fn pg_row(row: &tokio_postgres::Row) -> Result<Row> {
    let (mut columns, mut values) = (Vec::new(), Vec::new());
    for (i, column) in row.columns().iter().enumerate() {
        if <PgValue as FromSql>::accepts(column.type_()) {
            columns.push(column.name().to_owned());
            values.push(row.try_get::<_, PgValue>(i)?.0);
        }
    }
    Ok(Row { columns: columns.into(), values })
}

/// SQLite's `INDEXED BY` planner hint where the dialect has one (PostgreSQL's planner picks the
/// same partial indexes by itself and has no such clause): `FROM jobs{hint}`.
pub fn indexed_by(dialect: Dialect, index: IndexHint) -> &'static str {
    match (dialect, index) {
        (Dialect::Sqlite, IndexHint::JobsUnfinished) => " INDEXED BY jobs_unfinished",
        (Dialect::Sqlite, IndexHint::JobsFinished) => " INDEXED BY jobs_finished",
        (Dialect::Postgres, _) => "",
    }
}

/// The partial indexes a query names on SQLite (`indexed_by`).
#[derive(Debug, Clone, Copy)]
pub enum IndexHint {
    JobsUnfinished,
    JobsFinished,
}

fn pg_params<'a>(params: &[ValueRef<'a>]) -> Vec<PgParam<'a>> {
    params.iter().map(|p| PgParam(*p)).collect()
}

/// A parameter as PostgreSQL wants it: written as the type the statement expects.
#[derive(Debug)]
struct PgParam<'a>(ValueRef<'a>);

impl ToSql for PgParam<'_> {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let mismatch =
            || -> Box<dyn std::error::Error + Sync + Send> { format!("a {} value cannot be written as {ty}", self.0.kind()).into() };
        match self.0 {
            ValueRef::Null => Ok(IsNull::Yes),
            ValueRef::Integer(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => Err(mismatch()),
            },
            ValueRef::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (f as f32).to_sql(ty, out),
                _ => Err(mismatch()),
            },
            ValueRef::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => s.to_sql(ty, out),
                Type::BYTEA => s.as_bytes().to_sql(ty, out),
                _ => Err(mismatch()),
            },
            ValueRef::Blob(b) => match *ty {
                Type::BYTEA => b.to_sql(ty, out),
                _ => Err(mismatch()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A column as SQLite would have it.
struct PgValue(Value);

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgValue(match *ty {
            Type::INT8 => Value::Integer(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Integer(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Integer(i16::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Integer(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(<Vec<u8>>::from_sql(ty, raw)?),
            _ => Value::Text(String::from_sql(ty, raw)?),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgValue(Value::Null))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::INT8 | Type::INT4 | Type::INT2 | Type::BOOL | Type::FLOAT8 | Type::FLOAT4 | Type::BYTEA)
            || <String as FromSql>::accepts(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_binds_numbered_parameters_by_their_number_not_their_place() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let db: &dyn Db = &conn;
        db.execute_batch("CREATE TABLE t (a TEXT, b TEXT)").unwrap();
        // `$2` first: SQLite numbers named parameters in the order they appear, the store by name.
        db.execute("INSERT INTO t (b, a) VALUES ($2, $1)", params!["first", "second"]).unwrap();
        let row = db
            .query_row("SELECT a, b FROM t WHERE a = $1 OR a = $1", ["first"], |r| Ok((r.get::<_, String>("a")?, r.get::<_, String>("b")?)))
            .unwrap();
        assert_eq!(row, ("first".to_owned(), "second".to_owned()));
        // The same text as PostgreSQL's: one value for `$1` used twice.
        assert!(matches!(
            db.execute("INSERT INTO t (a, b) VALUES ($1, $2)", ["only one"]),
            Err(DbError::ParameterCount { expected: 2, given: 1 })
        ));
        assert!(matches!(
            db.execute("INSERT INTO t (a) VALUES ($1)", params!["x", "y"]),
            Err(DbError::ParameterCount { expected: 1, given: 2 })
        ));
        assert!(matches!(db.execute("INSERT INTO t (a) VALUES (:name)", ["x"]), Err(DbError::Parameter(ref p)) if p == ":name"));
    }

    /// What is kept of a statement's text per thread (`shape`) is read again when the text at an
    /// address changes, and when the table under a `SELECT *` has gained a column.
    #[test]
    fn a_kept_statement_shape_follows_its_text_and_its_table() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let db: &dyn Db = &conn;
        db.execute_batch("CREATE TABLE t (a TEXT); INSERT INTO t VALUES ('x')").unwrap();
        const ALL: &str = "SELECT * FROM t";
        assert_eq!(db.query_row(ALL, [], |r| r.get::<_, String>("a")).unwrap(), "x");
        db.execute_batch("ALTER TABLE t ADD COLUMN b TEXT DEFAULT 'y'").unwrap();
        assert_eq!(db.query_row(ALL, [], |r| Ok((r.get::<_, String>("a")?, r.get::<_, String>("b")?))).unwrap(), ("x".into(), "y".into()));
        // Two texts of one length, one after the other in the same buffer: the same address.
        let mut text = String::with_capacity(32);
        for (sql, column, value) in [("SELECT $1 AS one", "one", "p"), ("SELECT $1 AS two", "two", "q")] {
            text.clear();
            text.push_str(sql);
            assert_eq!(db.query_row(&text, [value], |r| r.get::<_, String>(column)).unwrap(), value);
        }
    }

    #[test]
    fn a_sqlite_connection_reads_and_writes_every_kind_of_value() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let db: &dyn Db = &conn;
        db.execute_batch("CREATE TABLE t (i INTEGER, r REAL, s TEXT, b BLOB, n TEXT)").unwrap();
        let none: Option<&str> = None;
        let changed = db.execute("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)", params![7i64, 1.5f64, "x", vec![1u8, 2], none]).unwrap();
        assert_eq!(changed, 1);
        let row = db.query_row("SELECT i, r, s, b, n FROM t", [], |r| Ok(r.clone())).unwrap();
        assert_eq!(row.get::<_, i64>(0).unwrap(), 7);
        assert_eq!(row.get::<_, f64>(1).unwrap(), 1.5);
        assert_eq!(row.get::<_, String>(2).unwrap(), "x");
        assert_eq!(row.get::<_, Vec<u8>>(3).unwrap(), vec![1, 2]);
        assert_eq!(row.get::<_, Option<String>>(4).unwrap(), None);
        assert!(matches!(row.get::<_, i64>(2), Err(DbError::Type { ref column, .. }) if column == "s"));
        // By name, as the store's readers read rows; a name the query does not return is an error.
        assert_eq!(row.get::<_, String>("s").unwrap(), "x");
        assert_eq!(row.get::<_, Option<String>>("n").unwrap(), None);
        assert!(matches!(row.get::<_, i64>("nowhere"), Err(DbError::NoColumn(ref name)) if name == "nowhere"));
        let aliased =
            db.query_row("SELECT s AS label, i FROM t", [], |r| Ok((r.get::<_, String>("label")?, r.get::<_, i64>("i")?))).unwrap();
        assert_eq!(aliased, ("x".to_owned(), 7));
        let missing = db.query_row("SELECT i FROM t WHERE i = 8", [], |r| r.get::<_, i64>(0));
        assert!(matches!(missing, Err(DbError::NoRow)));
        assert_eq!(missing.optional().unwrap(), None);
    }
}
