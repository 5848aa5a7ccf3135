package decode

import (
	"encoding/base64"
	"unsafe"
)

// arenaChunk is the size of the arrays that decoded strings and bytes share.
const arenaChunk = 64 << 10

// arena hands out copies of bytes from large chunks so that decoding a row
// does not allocate per string. Bytes once handed out are never written
// again: a new chunk is started when the current one is full, and the old
// one lives as long as any string or slice points into it.
type arena struct {
	buf []byte // the current chunk; len is what was handed out
}

// alloc returns n fresh bytes whose capacity ends at n, so that an append by
// whoever holds them cannot reach bytes handed out later.
func (a *arena) alloc(n int) []byte {
	if n > arenaChunk/8 {
		return make([]byte, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, arenaChunk)
	}
	start := len(a.buf)
	a.buf = a.buf[:start+n]
	return a.buf[start : start+n : start+n]
}

// string returns a copy of b as a string.
func (a *arena) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	dst := a.alloc(len(b))
	copy(dst, b)
	return unsafe.String(&dst[0], len(dst))
}

// bytes returns a copy of b, never nil.
func (a *arena) bytes(b []byte) []byte {
	if len(b) == 0 {
		return []byte{}
	}
	dst := a.alloc(len(b))
	copy(dst, b)
	return dst
}

// base64 decodes b: standard or URL-safe alphabet, padded or not. It returns
// a non-nil slice, and false when b is not base64.
func (a *arena) base64(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return []byte{}, true
	}
	enc := base64.StdEncoding
	for _, c := range b {
		if c == '-' || c == '_' {
			enc = base64.URLEncoding
			break
		}
	}
	if len(b)%4 != 0 {
		if enc == base64.URLEncoding {
			enc = base64.RawURLEncoding
		} else {
			enc = base64.RawStdEncoding
		}
	}
	dst := a.alloc(enc.DecodedLen(len(b)))
	n, err := enc.Decode(dst, b)
	if err != nil {
		return nil, false
	}
	return dst[:n:n], true
}
