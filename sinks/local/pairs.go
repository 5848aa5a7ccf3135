package local

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// A pairs file is a list of (a, b) byte-string pairs: the identities of a
// CDC data file's rows in row order (key, sequence), a load's staged
// removals (key, sequence) and its staged states (key, value; b may be
// absent: a removal). Layout:
//
//	"SLP1"                                   magic
//	per pair: uvarint len(a), a, uvarint 0 (b absent) or len(b)+1, b
//	uvarint count of pairs, then the CRC-32C of everything before it (4 bytes, big-endian)
//
// The trailer makes a cut file detectable.
const pairsMagic = "SLP1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pairsWriter writes a pairs file. It is not safe for concurrent use.
// Pairs are encoded into buf, which goes to the file (and into the
// checksum) a block at a time: a pair costs a few appends, not a write and
// a checksum update per part.
type pairsWriter struct {
	f   fsys.File
	buf *[]byte
	crc uint32
	n   int64
	err error
}

// pairsBlock is how many encoded bytes a pairsWriter gathers before it
// writes them.
const pairsBlock = 256 << 10

// pairsBufs holds the buffers of pairs files: a load writes one file per
// output bucket file, and a buffer each would be most of what it
// allocates.
var pairsBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, pairsBlock+4<<10)
	return &b
}}

func createPairs(disk fsys.FS, path string) (*pairsWriter, error) {
	f, err := disk.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	buf := pairsBufs.Get().(*[]byte)
	*buf = append((*buf)[:0], pairsMagic...)
	return &pairsWriter{f: f, buf: buf}, nil
}

// spill writes the encoded bytes to the file once they fill a block, or
// always when all is set; after an error it drops them.
func (pw *pairsWriter) spill(all bool) {
	b := *pw.buf
	if !all && len(b) < pairsBlock {
		return
	}
	if pw.err == nil && len(b) > 0 {
		pw.crc = crc32.Update(pw.crc, castagnoli, b)
		_, pw.err = pw.f.Write(b)
	}
	*pw.buf = b[:0]
}

// add appends a pair whose b is present.
func (pw *pairsWriter) add(a, b string) { pw.pair(a, b, true) }

// addValue appends a pair whose b is a byte slice; nil is absent.
func (pw *pairsWriter) addValue(a string, b []byte) {
	pw.pair(a, bytesStr(b), b != nil)
}

// pair appends the pair (a, b), or (a, absent) when present is false.
func (pw *pairsWriter) pair(a, b string, present bool) {
	if pw.buf == nil {
		pw.err = os.ErrClosed
		return
	}
	buf := binary.AppendUvarint(*pw.buf, uint64(len(a)))
	buf = append(buf, a...)
	if present {
		buf = binary.AppendUvarint(buf, uint64(len(b))+1)
		buf = append(buf, b...)
	} else {
		buf = binary.AppendUvarint(buf, 0)
	}
	*pw.buf = buf
	pw.n++
	pw.spill(false)
}

// close writes the trailer, syncs and closes the file; it returns the
// number of pairs.
func (pw *pairsWriter) close() (int64, error) { return pw.closeTo(nil) }

// closeTo writes the trailer and returns the number of pairs; sy syncs
// and closes the file (nil: it is synced and closed before closeTo
// returns).
func (pw *pairsWriter) closeTo(sy *fileSyncer) (int64, error) {
	if pw.buf == nil {
		return pw.n, os.ErrClosed
	}
	*pw.buf = binary.AppendUvarint(*pw.buf, uint64(pw.n))
	pw.spill(true)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], pw.crc)
	if pw.err == nil {
		_, pw.err = pw.f.Write(sum[:])
	}
	if pw.err == nil {
		pw.err = sy.syncClose(pw.f)
	} else {
		pw.f.Close()
	}
	pw.release()
	return pw.n, pw.err
}

// discard closes the file unfinished.
func (pw *pairsWriter) discard() {
	pw.f.Close()
	pw.release()
}

// release returns the buffer to the pool, unless a very large pair grew it.
func (pw *pairsWriter) release() {
	if pw.buf != nil {
		if cap(*pw.buf) <= 4*pairsBlock {
			*pw.buf = (*pw.buf)[:0]
			pairsBufs.Put(pw.buf)
		}
		pw.buf = nil
	}
}

// pairs is a read pairs file. The strings share one allocation.
type pairs struct {
	a, b   []string
	absent []bool // nil when every b is present
}

func (p *pairs) len() int { return len(p.a) }

var errPairsCorrupt = errors.New("pairs file is corrupt")

// readPairs reads a whole pairs file and checks its trailer.
func readPairs(disk fsys.FS, path string) (*pairs, error) {
	data, err := disk.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := decodePairs(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// countPairs returns the number of pairs the body of a checked pairs
// file holds (a bound when it is corrupt, which decodePairs reports): the
// varints of the pairs are walked, skipping their bytes.
func countPairs(body []byte) int {
	off, n := len(pairsMagic), 0
	for off < len(body) {
		la, k := binary.Uvarint(body[off:])
		if k <= 0 || uint64(len(body)-off-k) < la {
			break
		}
		off += k + int(la)
		lb, k := binary.Uvarint(body[off:])
		if k <= 0 {
			break
		}
		off += k
		if lb > 0 {
			if uint64(len(body)-off) < lb-1 {
				break
			}
			off += int(lb - 1)
		}
		n++
	}
	return n
}

// decodePairs decodes a pairs file; the strings share data's bytes, which
// must not change afterwards.
func decodePairs(data []byte) (*pairs, error) {
	if len(data) < len(pairsMagic)+1+4 || !bytes.Equal(data[:len(pairsMagic)], []byte(pairsMagic)) {
		return nil, errPairsCorrupt
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[len(data)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errPairsCorrupt)
	}
	// One string for all the bytes; pairs are substrings of it. data is
	// the caller's, never written again: the string shares its bytes.
	all := bytesStr(body)
	off := len(pairsMagic)
	next := func() (uint64, bool) {
		x, n := binary.Uvarint(body[off:])
		if n <= 0 {
			return 0, false
		}
		off += n
		return x, true
	}
	n := countPairs(body)
	p := &pairs{a: make([]string, 0, n), b: make([]string, 0, n)}
	for {
		// The count ends the pairs: it is the last varint of the body.
		start := off
		if x, n := binary.Uvarint(body[off:]); n > 0 && off+n == len(body) {
			if x != uint64(len(p.a)) {
				return nil, fmt.Errorf("%w: %d pairs, trailer says %d", errPairsCorrupt, len(p.a), x)
			}
			return p, nil
		}
		off = start
		la, ok := next()
		if !ok || uint64(len(body)-off) < la {
			return nil, errPairsCorrupt
		}
		a := all[off : off+int(la)]
		off += int(la)
		lb, ok := next()
		if !ok || uint64(len(body)-off) < lb-min(lb, 1) {
			return nil, errPairsCorrupt
		}
		b := ""
		if lb == 0 {
			if p.absent == nil {
				p.absent = make([]bool, len(p.a), cap(p.a)+1)
			}
		} else {
			b = all[off : off+int(lb-1)]
			off += int(lb - 1)
		}
		p.a = append(p.a, a)
		p.b = append(p.b, b)
		if p.absent != nil {
			p.absent = append(p.absent, lb == 0)
		}
	}
}
