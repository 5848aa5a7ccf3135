package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// stageStates writes a load's staged states: value nil is a removal.
func stageStates(t *testing.T, path string, keys []string, vals [][]byte) {
	t.Helper()
	pw, err := createPairs(fsys.OS{}, path)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		pw.addValue(k, vals[i])
	}
	if _, err := pw.close(); err != nil {
		t.Fatal(err)
	}
}

// openTestState opens a fresh state file with the buckets createState
// makes.
func openTestState(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucket(stateChunks); err != nil {
			return err
		}
		_, err := tx.CreateBucket(stateMeta)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// checkStates compares a state file with the model: every key's state read
// (with keys that have none), the key list paged through in key order, and
// the chunks' shape.
func checkStates(t *testing.T, db *bolt.DB, model map[string]string, absent []string, page int) {
	t.Helper()
	want := slices.Sorted(maps.Keys(model))
	err := db.View(func(tx *bolt.Tx) error {
		got := map[string][]byte{}
		if err := statesIn(tx, append(slices.Clone(want), absent...), got); err != nil {
			return err
		}
		if len(got) != len(model) {
			return fmt.Errorf("%d states read, want %d", len(got), len(model))
		}
		for k, v := range model {
			if string(got[k]) != v {
				return fmt.Errorf("state of %q: %q, want %q", k, got[k], v)
			}
		}
		cb := tx.Bucket(stateChunks)
		if cb == nil {
			return fmt.Errorf("no chunks bucket")
		}
		var listed []string
		after := ""
		for {
			keys, err := chunkKeys(cb, after, page)
			if err != nil {
				return err
			}
			listed = append(listed, keys...)
			if len(keys) < page {
				break
			}
			after = keys[len(keys)-1]
		}
		if !slices.Equal(listed, want) {
			return fmt.Errorf("keys listed %d, want %d (%v...)", len(listed), len(want), listed[:min(5, len(listed))])
		}
		// Each chunk is stored under its first key, in order, never empty.
		prev := ""
		return cb.ForEach(func(k, v []byte) error {
			states, err := decodeChunk(v, nil)
			if err != nil {
				return err
			}
			if len(states) == 0 || states[0].k != string(k) {
				return fmt.Errorf("chunk %q: %d states, first %q", k, len(states), states[0].k)
			}
			for _, e := range states {
				if e.k <= prev {
					return fmt.Errorf("chunk %q: key %q after %q", k, e.k, prev)
				}
				prev = e.k
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChunkedStates applies random loads of states and removals to a
// state file with small chunks and checks it against a map after each.
// Seeds 2 and up apply a load in transactions of a few chunks each, and
// stop some of them after a random transaction (a crash) to apply them
// again.
func TestChunkedStates(t *testing.T) {
	defer func(n, tx int) { chunkTarget, stateTxChunks = n, tx }(chunkTarget, stateTxChunks)
	chunkTarget = 200
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			stateTxChunks = 512
			if seed >= 2 {
				stateTxChunks = int(seed)
			}
			db := openTestState(t)
			model := map[string]string{}
			var table string
			parts, crashes := 0, 0
			for load := int64(1); load <= 30; load++ {
				// Loads of a few keys or of most of them, unordered, a key
				// repeated (its last entry wins), and removals of keys that
				// have a state or none.
				n := 1 + rng.IntN(3)
				if rng.IntN(3) == 0 {
					n = 50 + rng.IntN(400)
				}
				keys, vals := make([]string, n), make([][]byte, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("k%04d", rng.IntN(500))
					if rng.IntN(4) > 0 {
						vals[i] = []byte(strings.Repeat(fmt.Sprint(load, "."), 1+rng.IntN(12)))
					}
				}
				if rng.IntN(4) == 0 {
					keys = append(keys, "")
					vals = append(vals, []byte(fmt.Sprint("table ", load)))
				}
				staged := filepath.Join(t.TempDir(), "st")
				stageStates(t, staged, keys, vals)
				done := false // applied whole by the stopped try
				if seed >= 2 && rng.IntN(3) == 0 {
					// Stopped after a transaction: "through" stays below the
					// load, and the load applies again below.
					after := rng.IntN(3)
					crash := errors.New("crash")
					_, err := applyStates(fsys.OS{}, db, load, staged, func() error {
						if after--; after < 0 {
							return crash
						}
						return nil
					})
					if errors.Is(err, crash) {
						crashes++
						if err := db.View(func(tx *bolt.Tx) error {
							if readThrough(tx) >= load {
								return fmt.Errorf("through %d after a stopped load %d", readThrough(tx), load)
							}
							return nil
						}); err != nil {
							t.Fatal(err)
						}
					} else if err != nil {
						t.Fatal(err)
					} else {
						done = true
					}
				}
				applied, err := applyStates(fsys.OS{}, db, load, staged, func() error { parts++; return nil })
				if err != nil || applied == done {
					t.Fatalf("load %d: applied %v, %v", load, applied, err)
				}
				for i, k := range keys {
					switch {
					case k == "":
						table = string(vals[i])
					case vals[i] == nil:
						delete(model, k)
					default:
						model[k] = string(vals[i])
					}
				}
				checkStates(t, db, model, []string{"a", "k0000x", "zz"}, 1+rng.IntN(40))
				// Applied again, nothing changes.
				if applied, err := applyStates(fsys.OS{}, db, load, staged, nil); err != nil || applied {
					t.Fatalf("load %d again: applied %v, %v", load, applied, err)
				}
			}
			if seed >= 2 && (parts == 0 || crashes == 0) {
				t.Fatalf("%d loads applied in parts, %d stopped: the test misses its point", parts, crashes)
			}
			err := db.View(func(tx *bolt.Tx) error {
				got := map[string][]byte{}
				if err := statesIn(tx, []string{""}, got); err != nil {
					return err
				}
				if string(got[""]) != table {
					return fmt.Errorf("table state %q, want %q", got[""], table)
				}
				if n := tx.Bucket(stateChunks).Stats().KeyN; len(model) > 0 && n > 2*len(model)*20/chunkTarget+2 {
					return fmt.Errorf("%d chunks for %d states: small chunks are not joined", n, len(model))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestChunkedStatesMigrate checks that a state file made before chunks (one
// state per key in bucket "keys") is read as it is and moved into chunks
// by the first load applied to it.
func TestChunkedStatesMigrate(t *testing.T) {
	defer func(n int) { chunkTarget = n }(chunkTarget)
	chunkTarget = 100
	db, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	model := map[string]string{}
	err = db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket(stateKeys)
		if err != nil {
			return err
		}
		meta, err := tx.CreateBucket(stateMeta)
		if err != nil {
			return err
		}
		for i := range 100 {
			k, v := fmt.Sprintf("k%03d", i), fmt.Sprintf("old %d", i)
			model[k] = v
			if err := kb.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		var through [8]byte
		binary.BigEndian.PutUint64(through[:], 7)
		return meta.Put(stateThrough, through[:])
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		got := map[string][]byte{}
		if err := statesIn(tx, []string{"k005", "k050", "zz"}, got); err != nil {
			return err
		}
		if len(got) != 2 || string(got["k050"]) != "old 50" {
			return fmt.Errorf("before the move: %q", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	staged := filepath.Join(t.TempDir(), "st")
	stageStates(t, staged, []string{"k010", "k000", "new", "k099"}, [][]byte{[]byte("new 10"), nil, []byte("n"), nil})
	if applied, err := applyStates(fsys.OS{}, db, 8, staged, nil); err != nil || !applied {
		t.Fatalf("applied %v, %v", applied, err)
	}
	model["k010"], model["new"] = "new 10", "n"
	delete(model, "k000")
	delete(model, "k099")
	checkStates(t, db, model, []string{"k000", "k099"}, 9)
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(stateKeys) != nil {
			return fmt.Errorf("bucket keys is still there")
		}
		if readThrough(tx) != 8 {
			return fmt.Errorf("through %d, want 8", readThrough(tx))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
