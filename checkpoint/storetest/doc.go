// Package storetest is the conformance suite every checkpoint.Store passes:
// values and revisions round-trip, a Put is durable when it returns (a Store
// opened afterwards reads it), a write based on a stale revision is refused
// (of two writers with the same revision exactly one wins), Delete and List
// select by prefix, concurrent writers never lose an update that succeeded,
// and a crash between a load's commit and the checkpoint write replays
// harmlessly.
//
// A Store's tests call Run with a Factory that makes a fresh, empty
// destination per subtest and returns a function opening a Store on it;
// opening again must give a new Store on the same data, as another process
// or a restarted one would see it. The suite closes every Store it opens.
//
// It must not depend on any Store implementation: it speaks only the
// checkpoint package.
package storetest
