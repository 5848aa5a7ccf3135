// Package fsys is the file-system seam of the local destination
// (sinks/local) and of the local checkpoint store (checkpoint/local): every
// file-system operation of theirs goes through an FS, so that a test can
// fail a chosen fsync, rename, link or write (Faulty) and see what a crash
// or a failing disk at that moment leaves behind.
//
// It owns the FS and File interfaces (only the operations the two packages
// use), OS (the real file system), the helpers both build on an FS
// (SyncAndClose, MkdirAll, and SyncDir as OS implements it), and Faulty,
// which asks a callback before every operation whether it fails.
//
// Two kinds of file access bypass it on purpose. The flocks
// (github.com/gofrs/flock) open their own lock files: a lock is not state a
// crash can lose, since the kernel releases it with the process. bbolt
// (go.etcd.io/bbolt) opens, writes and fsyncs the CDC targets' state.db
// files and checkpoint.db itself: its transactions are atomic, and the
// destination's protocol is idempotent around them (a state file's
// "through" says which loads it holds; sinks/local/doc.go), so a crash test
// fails the operations before and after a transaction, not inside one.
package fsys
