package fsys

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// Failed reports whether err is the failure of a file-system operation (a
// full disk, an I/O error, a file missing or in the way): the one part of a
// local store's error classifier that the sink and the checkpoint store
// share.
func Failed(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	var errno syscall.Errno
	return errors.As(err, &pe) || errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &errno)
}
