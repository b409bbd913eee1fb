//! What the SQL adapters' errors mean to the port: sqlx's errors become [`StoreError`]s here, sorted
//! into the failures of the store's surroundings (the caller may retry once they are fixed) and the
//! rest. The port itself knows no database library.

use sqlx::error::DatabaseError;

use super::StoreError;

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        match unavailable(&e) {
            Some(why) => StoreError::Unavailable { why, detail: e.to_string() },
            None => StoreError::Database(e.to_string()),
        }
    }
}

fn unavailable(e: &sqlx::Error) -> Option<&'static str> {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => Some("the database does not answer"),
        sqlx::Error::Io(_) => Some("the connection to the database failed"),
        sqlx::Error::Database(e) => {
            if let Some(e) = e.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                return e.code().and_then(|c| c.parse::<i32>().ok()).and_then(super::sqlite::unavailable);
            }
            // PostgreSQL's classes: 53 insufficient resources (disk full, out of memory, too many
            // connections), 57P operator intervention (shutting down), 08 connection, 58 system I/O.
            let code = e.code().unwrap_or_default();
            match code.get(..2) {
                Some("53") if code == "53100" => Some("the database's disk is full"),
                Some("53") => Some("the database is out of resources"),
                Some("57") | Some("08") => Some("the database does not answer"),
                Some("58") => Some("the database cannot read or write (I/O error)"),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor};

    use super::StoreError;
    use crate::error::Error;

    /// A full disk, as SQLite reports it (a page limit makes it one without filling a real disk): a
    /// 503 the caller may retry, not a 500; a fault in the data stays `internal`.
    #[tokio::test]
    async fn a_full_disk_is_storage_unavailable_and_a_constraint_is_not() {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        conn.execute("PRAGMA max_page_count = 3; CREATE TABLE t (v BLOB PRIMARY KEY)").await.unwrap();
        let full = sqlx::query("INSERT INTO t VALUES (zeroblob(100000))").execute(&mut conn).await.unwrap_err();
        match Error::from(StoreError::from(full)) {
            Error::StorageUnavailable(message) => {
                assert_eq!(message, "the store is failing: the data directory's disk is full; retry")
            }
            other => panic!("{other:?}"),
        }
        sqlx::query("INSERT INTO t VALUES (x'01')").execute(&mut conn).await.unwrap();
        let duplicate = sqlx::query("INSERT INTO t VALUES (x'01')").execute(&mut conn).await.unwrap_err();
        assert_eq!(Error::from(StoreError::from(duplicate)).code(), "internal");
        assert_eq!(Error::from(StoreError::from(sqlx::Error::PoolTimedOut)).code(), "storage_unavailable");
    }
}
