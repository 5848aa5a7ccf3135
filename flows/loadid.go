package flows

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// newLoadID returns a unique load id that sorts by creation time:
// 16 hex digits of Unix nanoseconds, then 8 random bytes.
func newLoadID() string {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic(fmt.Sprintf("flows: crypto/rand failed: %v", err))
	}
	return fmt.Sprintf("%016x%s", time.Now().UnixNano(), hex.EncodeToString(r[:]))
}
