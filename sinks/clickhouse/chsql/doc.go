// Package chsql is the SQL plumbing that both ClickHouse packages use, the
// destination (sinks/clickhouse) and its checkpoint store
// (checkpoint/clickhouse), written once: the connection interface,
// identifier validation and quoting, the server's error codes and the
// classification of errors a later attempt gets past, a database's engine
// and the drop suffix it asks for, the age of tables and views by the
// server's clock, the statement of _sluice_state (the one table both
// create), the engines and ON CLUSTER clause of a destination on a cluster
// (Cluster), and the CREATE VIEW lock with its fence.
//
// The CREATE VIEW lock is a view whose one row names its holder: CREATE VIEW
// fails when the view exists, so at most one creator holds it until it is
// dropped, and a statement that selects from the view filtered by its
// holder (INSERT ... SELECT ... FROM the lock WHERE ...) lands only while
// the view names that holder. Fence drops such a view (or any table) and
// waits until no running query names it.
//
// It must not know loads, ledgers or checkpoints: what a lock guards, when
// it counts as abandoned and who may take it over, and what the rows of
// _sluice_state mean stay with the two packages (sinks/clickhouse/chain.go
// and lease.go, checkpoint/clickhouse/lock.go). It imports nothing of
// sluice, works on ClickHouse 18.16 and later, and splices into SQL only
// names made of identifiers that ValidIdent accepts and lock holders of the
// same characters.
package chsql
