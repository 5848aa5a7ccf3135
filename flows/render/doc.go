// Package render prints a table's logical content the way `sluice show`
// does: rows sorted by the columns the caller names (NULL first), written as
// an aligned text table, JSON lines or CSV (docs/operations.md, "Reading
// tables: `sluice show`").
//
// It owns only the formatting and the sort order of values. It does not read
// tables, decide which columns a table is sorted by, or know about
// destinations: the caller hands it a batch and the sort columns.
package render
