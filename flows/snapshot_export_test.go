package flows

// SetSnapshotBuckets makes snapshots apply in buckets of about rows rows
// and, when hook is set, calls it after each bucket is staged; restore
// undoes both. Tests that call it must not run in parallel with other
// snapshot tests.
func SetSnapshotBuckets(rows int64, hook func(bucket int) error) (restore func()) {
	oldRows, oldHook := snapshotBucketRows.Load(), snapshotBucketHook.Load()
	snapshotBucketRows.Store(rows)
	if hook != nil {
		snapshotBucketHook.Store(&hook)
	} else {
		snapshotBucketHook.Store(nil)
	}
	return func() {
		snapshotBucketRows.Store(oldRows)
		snapshotBucketHook.Store(oldHook)
	}
}
