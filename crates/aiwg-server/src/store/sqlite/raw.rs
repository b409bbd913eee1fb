//! The writer's SQLite connection, called on the writer's own thread.
//!
//! sqlx runs every SQLite connection on a thread of its own. For the writer that meant each batch
//! script crossed to that thread and its results crossed back, every bound string was copied to make
//! the crossing (`into_static`), and a script of a shape not seen lately (most batches: their row
//! counts differ) was parsed again. Under the ingestion benchmark sqlx's two threads were two fifths of
//! serve's CPU, of which SQLite's own work (the VM, the B-trees, the WAL) was about a fifth.
//!
//! So the writer owns its connection and calls SQLite here. A statement is prepared once and kept for
//! the connection's life; a batch is a list of statements, each bound in place (SQLite reads the
//! writer's own strings, no copy) and stepped, and the many rows of a batch are one single-row
//! statement stepped once per row. Everything else (migrations, reads, the background checkpoints) is
//! still sqlx's, on other connections.
//!
//! Every `unsafe` block calls SQLite's C API on the handle [`Connection::open`] opened, which only
//! `Drop` closes, and on statements prepared on it, which are finalized before it closes. The
//! connection is opened without SQLite's mutex (as sqlx opens its own), which is sound because a
//! `Connection` is never shared: `&mut self` on every call keeps it to one thread at a time.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;

use crate::store::script::{Builder, Value};
use crate::store::Synchronous;

/// Statements kept prepared. A batch has a dozen shapes at most (an event row, a touch, an executor's
/// latest event, each kind of patch, each upsert, the transaction's ends); past this many the cache
/// starts over, so that patches of many kinds cannot hold unbounded memory.
const STATEMENTS: usize = 64;

/// An error SQLite reported: its extended result code and message.
#[derive(Debug, thiserror::Error)]
#[error("{message} (SQLite code {code})")]
pub(super) struct Error {
    code: c_int,
    message: String,
}

impl Error {
    /// The error `code` left on `db`.
    fn from_db(db: NonNull<ffi::sqlite3>, code: c_int) -> Error {
        // SAFETY: `db` is open; the message is copied before any other call can replace it.
        let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db.as_ptr())) }.to_string_lossy().into_owned();
        Error { code, message }
    }

    fn other(message: &str) -> Error {
        Error { code: ffi::SQLITE_MISUSE, message: message.to_owned() }
    }
}

/// The writer's errors as the port's: SQLite's code says whether the store's surroundings failed (a
/// full disk) or what was asked did.
impl From<Error> for crate::store::StoreError {
    fn from(e: Error) -> Self {
        match super::unavailable(e.code) {
            Some(why) => crate::store::StoreError::Unavailable { why, detail: e.to_string() },
            None => crate::store::StoreError::Database(e.to_string()),
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, Error>;

/// Statements to run in order: their texts (a run of statements with the same text, the rows of a
/// batch, keeps it once) and their parameters, borrowed from the units where they can be.
#[derive(Default)]
pub(super) struct Batch<'a> {
    /// The statement being written.
    sql: String,
    texts: Vec<String>,
    /// Each statement: its text in `texts`, and where its parameters end in `values`.
    statements: Vec<(usize, usize)>,
    values: Vec<Value<'a>>,
}

impl<'a> Builder<'a> for Batch<'a> {
    /// One row a statement: the same statement for every row, prepared once for all batches.
    const ROWS: usize = 1;

    fn push(&mut self, sql: &str) {
        self.sql.push_str(sql);
    }

    fn bind(&mut self, value: Value<'a>) {
        self.sql.push('?');
        self.values.push(value);
    }

    fn end(&mut self) {
        if self.texts.last() != Some(&self.sql) {
            self.texts.push(std::mem::take(&mut self.sql));
        }
        self.sql.clear();
        self.statements.push((self.texts.len() - 1, self.values.len()));
    }
}

impl<'a> Batch<'a> {
    /// A batch of the one statement `sql`, with `values` for its parameters (written `?` in `sql`).
    pub(super) fn of(sql: &str, values: impl IntoIterator<Item = Value<'a>>) -> Batch<'a> {
        let mut batch = Batch::default();
        batch.statement(sql, values);
        batch
    }

    /// Adds the statement `sql`, with `values` for its parameters.
    pub(super) fn statement(&mut self, sql: &str, values: impl IntoIterator<Item = Value<'a>>) -> &mut Self {
        self.sql.push_str(sql);
        self.values.extend(values);
        self.end();
        self
    }
}

/// A connection of the writer's: the database handle and its prepared statements.
pub(super) struct Connection {
    db: NonNull<ffi::sqlite3>,
    statements: HashMap<String, NonNull<ffi::sqlite3_stmt>>,
}

// SAFETY: see the module's opening: the handle is used from one thread at a time, and moved between
// threads only whole (the writer takes it to its thread once).
unsafe impl Send for Connection {}

impl Connection {
    /// Opens the existing database at `path` (migrated beforehand) as serve's writer: WAL, the given
    /// durability, foreign keys enforced, checkpoints left to serve (see `checkpoint`).
    pub(super) fn open(path: &Path, synchronous: Synchronous) -> Result<Connection> {
        let name = path.to_str().ok_or_else(|| Error::other("the database's path is not UTF-8"))?;
        let name = CString::new(name).map_err(|_| Error::other("the database's path holds a NUL byte"))?;
        let mut db = ptr::null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_NOMUTEX | ffi::SQLITE_OPEN_PRIVATECACHE;
        // SAFETY: `name` is a NUL-terminated string; SQLite writes the handle into `db`.
        let code = unsafe { ffi::sqlite3_open_v2(name.as_ptr(), &mut db, flags, ptr::null()) };
        // Even a failed open returns a handle (for its message) unless memory ran out.
        let db = NonNull::new(db).ok_or_else(|| Error::other("SQLite could not allocate a connection"))?;
        let conn = Connection { db, statements: HashMap::new() };
        if code != ffi::SQLITE_OK {
            return Err(Error::from_db(db, code));
        }
        // SAFETY: the handle is open.
        unsafe {
            ffi::sqlite3_extended_result_codes(db.as_ptr(), 1);
            ffi::sqlite3_busy_timeout(db.as_ptr(), 5_000);
        }
        let synchronous = match synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        // Statement journals (a statement that must undo itself inside the batch's transaction) stay
        // in memory; checkpoints run beside the writer, never inside its commits (see `checkpoint`).
        conn.execute(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 0;"
        ))?;
        Ok(conn)
    }

    /// Runs `sql`, statements without parameters, each prepared for this call only (pragmas, the
    /// ends of a transaction after a failure).
    pub(super) fn execute(&self, sql: &str) -> Result<()> {
        let sql = CString::new(sql).map_err(|_| Error::other("a statement holds a NUL byte"))?;
        // SAFETY: the handle is open and `sql` NUL-terminated; no callback, no error string asked for.
        let code = unsafe { ffi::sqlite3_exec(self.db.as_ptr(), sql.as_ptr(), None, ptr::null_mut(), ptr::null_mut()) };
        self.check(code)
    }

    /// The first column of the first row `sql` returns, as an integer (NULL reads as 0).
    pub(super) fn query_i64(&mut self, sql: &str) -> Result<i64> {
        let stmt = self.prepared(sql)?;
        // SAFETY: `stmt` is prepared on this open handle and has no parameters to bind.
        let (code, value) = unsafe {
            let code = ffi::sqlite3_step(stmt.as_ptr());
            let value = if code == ffi::SQLITE_ROW { ffi::sqlite3_column_int64(stmt.as_ptr(), 0) } else { 0 };
            ffi::sqlite3_reset(stmt.as_ptr());
            (code, value)
        };
        match code {
            ffi::SQLITE_ROW => Ok(value),
            ffi::SQLITE_DONE => Err(Error::other("the query returned no row")),
            code => Err(Error::from_db(self.db, code)),
        }
    }

    /// Runs the batch's statements in order, each to its end (rows a statement returns are skipped);
    /// the rows they changed. The first failure ends the batch and is returned, whatever the
    /// statements before it did: in a transaction, the caller rolls it back.
    pub(super) fn run(&mut self, batch: &Batch<'_>) -> Result<u64> {
        let mut changed = 0;
        let mut first_value = 0;
        let mut current: Option<(usize, NonNull<ffi::sqlite3_stmt>)> = None;
        for &(text, values_end) in &batch.statements {
            let stmt = match current {
                Some((t, stmt)) if t == text => stmt,
                _ => {
                    let stmt = self.prepared(&batch.texts[text])?;
                    current = Some((text, stmt));
                    stmt
                }
            };
            let values = &batch.values[first_value..values_end];
            first_value = values_end;
            let outcome = self.step(stmt, values);
            // SAFETY: `stmt` is prepared on this open handle. Cleared, it keeps no pointer into
            // `values`, which the caller may free as soon as this returns.
            unsafe {
                ffi::sqlite3_reset(stmt.as_ptr());
                ffi::sqlite3_clear_bindings(stmt.as_ptr());
            }
            changed += outcome?;
        }
        Ok(changed)
    }

    /// Whether a transaction is open (one that a failure left open must be rolled back).
    pub(super) fn in_transaction(&self) -> bool {
        // SAFETY: the handle is open.
        unsafe { ffi::sqlite3_get_autocommit(self.db.as_ptr()) == 0 }
    }

    /// Ends the transaction a failed batch left open, if it did: a failure before `BEGIN` took effect,
    /// or one that SQLite rolled back itself (a full disk, an I/O error), leaves none. Said at debug:
    /// the failure itself is what the caller reports.
    pub(super) fn roll_back_after(&self, what: &str) {
        if self.in_transaction() {
            if let Err(e) = self.execute("ROLLBACK") {
                tracing::debug!(error = %e, "rollback after {what}");
            }
        }
    }

    /// Binds `values` to `stmt`'s parameters and steps it to its end; the rows it changed.
    fn step(&self, stmt: NonNull<ffi::sqlite3_stmt>, values: &[Value<'_>]) -> Result<u64> {
        let s = stmt.as_ptr();
        // SAFETY: `s` is prepared on this open handle. Texts and blobs are bound SQLITE_STATIC: they
        // live in `values`, which outlives every step below, and `run` clears the bindings after.
        unsafe {
            if ffi::sqlite3_bind_parameter_count(s) as usize != values.len() {
                return Err(Error::other("a statement's parameters and values differ in number"));
            }
            for (i, value) in values.iter().enumerate() {
                let i = i as c_int + 1;
                let code = match value {
                    Value::Text(None) | Value::Int(None) => ffi::sqlite3_bind_null(s, i),
                    Value::Text(Some(text)) => ffi::sqlite3_bind_text64(
                        s,
                        i,
                        text.as_ptr() as *const c_char,
                        text.len() as u64,
                        ffi::SQLITE_STATIC(),
                        ffi::SQLITE_UTF8 as u8,
                    ),
                    Value::Int(Some(v)) => ffi::sqlite3_bind_int64(s, i, *v),
                    Value::Bool(v) => ffi::sqlite3_bind_int64(s, i, i64::from(*v)),
                    Value::Blob(bytes) => {
                        ffi::sqlite3_bind_blob64(s, i, bytes.as_ptr().cast(), bytes.len() as u64, ffi::SQLITE_STATIC())
                    }
                };
                self.check(code)?;
            }
            // The total, not `sqlite3_changes64`: that one keeps the last data statement's count
            // through the statements that change nothing (`BEGIN`, `COMMIT`, a pragma).
            let before = ffi::sqlite3_total_changes64(self.db.as_ptr());
            loop {
                match ffi::sqlite3_step(s) {
                    ffi::SQLITE_ROW => continue,
                    ffi::SQLITE_DONE => return Ok((ffi::sqlite3_total_changes64(self.db.as_ptr()) - before) as u64),
                    code => return Err(Error::from_db(self.db, code)),
                }
            }
        }
    }

    /// The statement `sql` (one statement), prepared on first use and kept.
    fn prepared(&mut self, sql: &str) -> Result<NonNull<ffi::sqlite3_stmt>> {
        if let Some(stmt) = self.statements.get(sql) {
            return Ok(*stmt);
        }
        if self.statements.len() >= STATEMENTS {
            self.finalize_all();
        }
        let mut stmt = ptr::null_mut();
        let mut tail = ptr::null();
        // SAFETY: the handle is open; `sql` is read for exactly its length; SQLite writes the statement
        // and where the first statement ended.
        let code = unsafe {
            ffi::sqlite3_prepare_v3(
                self.db.as_ptr(),
                sql.as_ptr() as *const c_char,
                sql.len() as c_int,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut stmt,
                &mut tail,
            )
        };
        self.check(code)?;
        let stmt = NonNull::new(stmt).ok_or_else(|| Error::other("a statement to prepare was empty"))?;
        // What follows the first statement would be silently skipped: each text is one statement.
        let used = tail as usize - sql.as_ptr() as usize;
        if !sql[used..].trim().is_empty() {
            // SAFETY: just prepared on this handle, not kept.
            unsafe { ffi::sqlite3_finalize(stmt.as_ptr()) };
            return Err(Error::other("a prepared text holds more than one statement"));
        }
        self.statements.insert(sql.to_owned(), stmt);
        Ok(stmt)
    }

    fn finalize_all(&mut self) {
        for (_, stmt) in self.statements.drain() {
            // SAFETY: each was prepared on this open handle and is dropped from the cache here.
            unsafe { ffi::sqlite3_finalize(stmt.as_ptr()) };
        }
    }

    fn check(&self, code: c_int) -> Result<()> {
        if code == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(Error::from_db(self.db, code))
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.finalize_all();
        // SAFETY: every statement of this handle is finalized; nothing uses the handle after this.
        let code = unsafe { ffi::sqlite3_close(self.db.as_ptr()) };
        if code != ffi::SQLITE_OK {
            tracing::warn!(code, "closing the writer's SQLite connection failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh database with one table, and the writer's connection to it.
    fn open() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let name = CString::new(path.to_str().unwrap()).unwrap();
        let mut db = ptr::null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE;
        // SAFETY: a test's own handle, closed right after creating the file.
        unsafe {
            assert_eq!(ffi::sqlite3_open_v2(name.as_ptr(), &mut db, flags, ptr::null()), ffi::SQLITE_OK);
            ffi::sqlite3_close(db);
        }
        let mut conn = Connection::open(&path, Synchronous::Normal).unwrap();
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, note TEXT, flag INTEGER, b BLOB)")
            .unwrap();
        assert_eq!(conn.query_i64("SELECT count(*) FROM t").unwrap(), 0);
        (dir, conn)
    }

    fn row<'a>(id: i64, name: &'a str, note: Option<String>) -> [Value<'a>; 5] {
        [Value::from(id), Value::from(name), Value::from(note), Value::from(true), Value::from(&b"\0\x01"[..])]
    }

    #[test]
    fn a_batch_binds_every_kind_of_value_and_counts_its_changes() {
        let (_dir, mut conn) = open();
        let names: Vec<String> = (0..3).map(|i| format!("n{i}")).collect();
        let mut batch = Batch::of("BEGIN IMMEDIATE", []);
        for (i, name) in names.iter().enumerate() {
            batch
                .statement("INSERT INTO t (id, name, note, flag, b) VALUES (?, ?, ?, ?, ?)", row(i as i64, name, None));
        }
        batch.statement("UPDATE t SET note = ? WHERE id >= ?", [Value::from("seen".to_string()), Value::from(1)]);
        batch.statement("COMMIT", []);
        // The three inserts share one text, kept once.
        assert_eq!(batch.texts.len(), 4);
        assert_eq!(conn.run(&batch).unwrap(), 3 + 2);
        assert!(!conn.in_transaction());
        let checks = [
            ("SELECT count(*) FROM t WHERE note IS NULL", 1),
            ("SELECT count(*) FROM t WHERE note = 'seen'", 2),
            ("SELECT sum(flag) FROM t", 3),
            ("SELECT count(*) FROM t WHERE b = x'0001' AND name = 'n' || id", 3),
        ];
        for (sql, want) in checks {
            assert_eq!(conn.query_i64(sql).unwrap(), want, "{sql}");
        }
        // The same statements again come from the cache, and still see new values.
        let again = Batch::of("INSERT INTO t (id, name, note, flag, b) VALUES (?, ?, ?, ?, ?)", row(9, "n9", None));
        let cached = conn.statements.len();
        assert_eq!(conn.run(&again).unwrap(), 1);
        assert_eq!(conn.statements.len(), cached);
        assert_eq!(conn.query_i64("SELECT count(*) FROM t WHERE name = 'n9'").unwrap(), 1);
    }

    #[test]
    fn a_failing_statement_ends_the_batch_with_sqlites_code_and_leaves_the_transaction_to_the_caller() {
        let (_dir, mut conn) = open();
        let mut batch = Batch::of("BEGIN IMMEDIATE", []);
        batch.statement("INSERT INTO t (id, name) VALUES (?, ?)", [Value::from(1), Value::from("a")]);
        batch.statement("INSERT INTO t (id, name) VALUES (?, ?)", [Value::from(1), Value::from("b")]);
        batch.statement("COMMIT", []);
        let e = conn.run(&batch).unwrap_err();
        assert_eq!(e.code, ffi::SQLITE_CONSTRAINT_PRIMARYKEY);
        assert!(e.message.contains("UNIQUE constraint failed: t.id"), "{e}");
        assert!(matches!(crate::store::StoreError::from(e), crate::store::StoreError::Database(_)));
        assert!(conn.in_transaction());
        conn.execute("ROLLBACK").unwrap();
        assert_eq!(conn.query_i64("SELECT count(*) FROM t").unwrap(), 0);
        let null = Batch::of("INSERT INTO t (id, name) VALUES (?, ?)", [Value::from(2), Value::Text(None)]);
        assert_eq!(conn.run(&null).unwrap_err().code, ffi::SQLITE_CONSTRAINT_NOTNULL);
    }

    #[test]
    fn texts_that_are_not_exactly_one_statement_with_its_values_are_refused() {
        let (_dir, mut conn) = open();
        let two = Batch::of("DELETE FROM t; DROP TABLE t", []);
        assert!(conn.run(&two).unwrap_err().message.contains("more than one statement"));
        let short = Batch::of("DELETE FROM t WHERE id = ? OR id = ?", [Value::from(1)]);
        assert!(conn.run(&short).unwrap_err().message.contains("differ in number"));
        let wrong = Batch::of("DELETE FROM nowhere", []);
        let e = conn.run(&wrong).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (ffi::SQLITE_ERROR, "no such table: nowhere"));
        // Nothing above ran: the table is there, and takes rows.
        let one = Batch::of("INSERT INTO t (id, name) VALUES (?, ?)", [Value::from(1), Value::from("a")]);
        assert_eq!(conn.run(&one).unwrap(), 1);
    }

    #[test]
    fn a_full_cache_starts_over_and_keeps_working() {
        let (_dir, mut conn) = open();
        for i in 0..(STATEMENTS as i64 + 5) {
            // A different text each time.
            let sql = format!("INSERT INTO t (id, name) VALUES (?, 'n{i}')");
            assert_eq!(conn.run(&Batch::of(&sql, [Value::from(i)])).unwrap(), 1);
            assert!(conn.statements.len() <= STATEMENTS);
        }
        assert_eq!(conn.query_i64("SELECT count(*) FROM t").unwrap(), STATEMENTS as i64 + 5);
    }
}
