package cdc

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestCacheModel checks the cache's slots, chains, recency and segments
// against a model (a map and a recency list) over random puts, reads and
// forgets: it holds the most recently used keys that fit, each with the
// state last put, within its bound. A weak hash makes keys share hashes,
// and tiny segments make replaced and dropped bytes compacted often;
// states handed out keep their bytes through both.
func TestCacheModel(t *testing.T) {
	defer func(n int) { cacheSegment = n }(cacheSegment)
	cacheSegment = 64
	rapid.Check(t, func(t *rapid.T) {
		bound := rapid.Int64Range(cacheItemOverhead, 6*(cacheItemOverhead+20)).Draw(t, "bound")
		c := NewCache(NewMemStore(), bound)
		c.hash = func(key string) uint64 { return uint64(len(key) % 3) }
		size := func(k, v string) int64 { return cacheItemOverhead + int64(len(k)+len(v)) }
		model := map[string]string{}
		var recent []string // most recent first
		use := func(k string) {
			recent = slices.DeleteFunc(recent, func(x string) bool { return x == k })
			recent = slices.Insert(recent, 0, k)
		}
		drop := func(k string) {
			delete(model, k)
			recent = slices.DeleteFunc(recent, func(x string) bool { return x == k })
		}
		type handed struct{ got, want string }
		var out []handed
		keys := rapid.SampledFrom([]string{"a", "bb", "ccc", "dddd", "e", "ff", "ggg", "hhhhhhhh"})
		for range rapid.IntRange(1, 80).Draw(t, "ops") {
			k := keys.Draw(t, "key")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				v := rapid.StringOfN(rapid.RuneFrom([]rune("xyz")), 0, 12, -1).Draw(t, "state")
				c.put(k, v)
				if size(k, v) > bound {
					drop(k)
					break
				}
				model[k] = v
				use(k)
				var used int64
				for _, x := range recent {
					used += size(x, model[x])
				}
				for used > bound {
					last := recent[len(recent)-1]
					used -= size(last, model[last])
					drop(last)
				}
			case 2:
				i, _ := c.find(k)
				want, ok := model[k]
				if (i >= 0) != ok {
					t.Fatalf("key %q: held %v, model %v", k, i >= 0, ok)
				}
				if ok {
					c.touch(i)
					use(k)
					out = append(out, handed{c.data(i), want})
				}
			case 3:
				c.forget(k)
				drop(k)
			}
			var used int64
			for i := c.head; i >= 0; i = c.slots[i].next {
				used += size(c.key(i), c.data(i))
			}
			if c.Len() != len(model) || c.used != used || used > bound {
				t.Fatalf("cache holds %d keys, %d bytes (counted %d, bound %d); model %d keys", c.Len(), c.used, used, bound, len(model))
			}
			var order []string
			for i := c.head; i >= 0; i = c.slots[i].next {
				order = append(order, c.key(i))
				if c.data(i) != model[c.key(i)] {
					t.Fatalf("key %q holds %q, model %q", c.key(i), c.data(i), model[c.key(i)])
				}
			}
			if fmt.Sprint(order) != fmt.Sprint(recent) {
				t.Fatalf("recency %q, model %q", order, recent)
			}
		}
		for _, h := range out {
			if h.got != h.want {
				t.Fatalf("a state handed out changed from %q to %q", h.want, h.got)
			}
		}
	})
}
