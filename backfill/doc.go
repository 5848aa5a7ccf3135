// Package backfill reads the files of `files` and `snapshots` sources into
// columnar batches: it plans which files a source path names, types their
// Hive segments and snapshot versions, reads Parquet and JSON-lines files in
// chunks of bounded size that can be resumed, reads several files at once,
// and shows progress.
//
// It owns the rules of the spec's file sources (docs/spec.md, "Sources"):
// globs, Hive segments and their typing, {version} folders and the _SUCCESS
// marker, the Parquet type mapping, and how a file that cannot be read is
// reported. It must not write anything, commit positions, decide what a
// dead letter becomes (it reports them; the caller writes them or fails the
// flow), or know about flows, sinks or the CLI. JSON decoding is
// flows/decode's.
//
// # Planning
//
// Plan lists the files matching a path pattern relative to a base folder;
// a pattern segment holds wildcards of path.Match, ** matches any number of
// folders. Wildcards skip names starting with "." or "_" (hidden files,
// _SUCCESS, _temporary), as Hadoop-style writers expect. A File has a Name
// (the path as the source spells it, relative to the base with forward
// slashes: what _file_path holds, dead letters name and the ledger keys
// positions by) and a Path to open. Hive segments (`year=2024`) are read
// from the folders below the pattern's literal root (its leading segments
// without wildcards or "="), percent-unescaped; an empty value or
// __HIVE_DEFAULT_PARTITION__ is NULL. HiveTypes types them: by the source's
// declared columns, else int64 when every value is an integer, date when
// every value is YYYY-MM-DD, else string.
//
// PlanSnapshots lists the versions of a `snapshots` source: {version} is one
// whole folder segment; versions are typed by snapshot_version_type, else
// int64, date, timestamp (RFC 3339) or string (bytewise), sorted ascending;
// a version is Ready only once its folder holds _SUCCESS. Equal typed
// versions spelled differently ("7", "07") are an error.
//
// # Reading
//
// Open returns a Reader of one file that fills batches of the wanted schema:
// source columns, Hive columns (filled from the path, winning over a field
// of the same name in the file) and _file_path. Each Next returns a Chunk of
// at most ReadOptions.MaxRows rows:
//
//   - Parquet is read column by column, a page at a time, through the row
//     groups' column chunks (parquet-go's pages, not its row API): values
//     are converted once per page (once per dictionary entry for
//     dictionary-encoded pages) and copied into the vectors, so memory is
//     one page per column plus the chunk. A chunk may span row groups and a
//     large row group is split.
//   - JSON lines are streamed through a buffered reader; each line is
//     decoded by flows/decode with Topic = the file's Name and Offset = the
//     line number. Lines that do not decode, and lines longer than
//     MaxLineBytes, are dead letters; blank lines are skipped. A chunk is
//     also bounded by MaxBytes of lines.
//
// Positions count rows, not chunks. Chunk.Next is the number of rows of the
// file (lines for JSONL) consumed through the chunk; a caller stores it with
// the load that commits the chunk (batch.Position.RowGroup, with
// Position.Done when Chunk.Done) and resumes with ReadOptions.Start = Next.
// Counting rows rather than chunk indexes keeps a resumed read exact when
// the chunk size changed between runs. Parquet resumes in the row group
// holding the row, passing over the rows before it page by page (pages are
// read but their values not converted); JSONL by skipping lines (a scan of
// the file's prefix without decoding).
//
// Parquet types map to sluice types as follows: BOOLEAN bool; INT32,
// INT(8|16|32, signed or not) and INT64 int64; INT(64, unsigned)
// decimal(20,0); FLOAT and DOUBLE float64; DATE date; TIMESTAMP(MILLIS,
// MICROS, NANOS) and legacy INT96 timestamp (µs; nanoseconds floored; a
// timestamp not adjusted to UTC is read as UTC wall time); DECIMAL over
// INT32, INT64, BYTE_ARRAY or FIXED_LEN_BYTE_ARRAY decimal(P,S), exactly;
// BYTE_ARRAY with STRING, ENUM or JSON string; plain BYTE_ARRAY, BSON and
// FIXED_LEN_BYTE_ARRAY bytes; UUID string. Other types (nested, repeated,
// TIME, FLOAT16, INTERVAL) have none. A file's column loads into a wanted
// column of its own type or one that holds it exactly: a decimal of no
// fewer integer and fractional digits, int64 into decimal(P,S) with
// P-S >= 19, date into timestamp, bytes and string into each other.
// Columns are matched by name, exactly.
//
// What stops a file and what does not: a file that is not Parquet or is
// truncated, a damaged page, a wanted non-nullable column the file lacks, a
// column whose type does not convert, or a Hive value that does not parse
// is a *FileError naming the file (and column): the run stops without
// committing it. A nullable column the file lacks is NULL. A row with a
// NULL in a non-nullable column (missing_field) or a value that does not
// fit its column (type_mismatch: a decimal wider than the column, a
// timestamp out of range) becomes a dead letter whose payload is the row as
// JSON and whose position is its row number counted from 1; the other rows
// load. Schema problems are found by Open, before any chunk; a damaged page
// surfaces at the chunk holding it. A panic inside parquet-go while reading
// a damaged file is turned into a *FileError.
//
// # Parallelism and progress
//
// ReadFiles reads several files at once (errgroup, bounded) and delivers
// chunks on the caller's goroutine, in order within each file. Progress
// counts files, rows and bytes against the plan with an ETA; Bar draws it
// with github.com/schollz/progressbar/v3 on a terminal and logs an Info line
// every few seconds otherwise.
package backfill
