package batch

import (
	"encoding/base64"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestAppendLinkID pins a row id (docs/schema.md#child-tables): the
// 128-bit XXH3 hash of its key in unpadded URL-safe base64, as
// encoding/base64 writes it.
func TestAppendLinkID(t *testing.T) {
	if got, want := string(AppendLinkID(nil, []byte("t\x000\x000"))), "4BTeUznyMQuAl4XWGzUQ8Q"; got != want {
		t.Fatalf("id of t/0/0: %s, want %s", got, want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	key := make([]byte, 64)
	for range 10_000 {
		k := key[:rng.IntN(len(key))]
		for i := range k {
			k[i] = byte(rng.Uint32())
		}
		sum := xxh3.Hash128(k).Bytes()
		want := base64.RawURLEncoding.EncodeToString(sum[:])
		if got := AppendLinkID([]byte("x"), k); string(got) != "x"+want {
			t.Fatalf("key %q: %s, want x%s", k, got, want)
		}
	}
}
