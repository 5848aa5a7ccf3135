package flows

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPropertySnapshotIDs checks the ids of snapshot rows with lists: an
// id tells the content it was made for from any other, and ids of one
// content differ by key and by version.
func TestPropertySnapshotIDs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		content := string(rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "content"))
		other := string(rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "other"))
		key, key2 := rapid.String().Draw(t, "key"), rapid.String().Draw(t, "key2")
		v, v2 := rapid.String().Draw(t, "version"), rapid.String().Draw(t, "version2")
		id := snapshotID(content, key, v)
		if len(id) != 22 {
			t.Fatalf("id %q is not 22 characters", id)
		}
		if !sameContent(id, content) {
			t.Fatalf("id %q does not tell its own content", id)
		}
		if other != content && sameContent(id, other) {
			t.Fatalf("id %q tells another content", id)
		}
		if (key != key2 || v != v2) && snapshotID(content, key2, v2) == id {
			t.Fatalf("content %x: key %q version %q and key %q version %q get one id", content, key, v, key2, v2)
		}
		if sameContent("not an id", content) {
			t.Fatal("a malformed id tells a content")
		}
	})
}
