package fsys

import (
	"errors"
	"io/fs"
	"os"
	"sync/atomic"
)

// Op names an operation, as Faulty reports it to its callback.
type Op string

// The operations. File.Close is none: it always closes (a process that
// dies closes its files too).
const (
	OpOpen      Op = "open"   // FS.Open, and FS.OpenFile without os.O_CREATE
	OpCreate    Op = "create" // FS.OpenFile with os.O_CREATE
	OpReadFile  Op = "readfile"
	OpWriteFile Op = "writefile"
	OpReadDir   Op = "readdir"
	OpStat      Op = "stat" // FS.Stat and File.Stat
	OpLstat     Op = "lstat"
	OpReadlink  Op = "readlink"
	OpMkdir     Op = "mkdir"
	OpMkdirAll  Op = "mkdirall"
	OpRename    Op = "rename"
	OpLink      Op = "link"
	OpSymlink   Op = "symlink"
	OpRemove    Op = "remove"
	OpRemoveAll Op = "removeall"
	OpSyncDir   Op = "syncdir"
	OpRead      Op = "read"  // File.ReadAt
	OpWrite     Op = "write" // File.Write and File.WriteAt
	OpSync      Op = "sync"  // File.Sync
	OpTruncate  Op = "truncate"
)

// Faulty is an FS for tests: before every operation it calls a callback
// with the operation and its path (for Rename, Link and Symlink the name
// the operation makes; for a File's operations the name it was opened
// with), and when that returns an error the operation fails with it,
// wrapped as the os package wraps its errors, and does nothing. An error
// made by Torn, returned for a write, makes the write put half its bytes
// first, as a crash in the middle of an append would.
//
// The callback runs on the goroutine of the operation, several at once
// when operations run in parallel, and without a lock held: it may itself
// perform operations (a test's action at a chosen moment), which call it
// again.
type Faulty struct {
	fs   FS
	fail atomic.Pointer[func(op Op, path string) error]
}

var _ FS = (*Faulty)(nil)

// NewFaulty returns a Faulty over fsys that consults fail (nil: nothing
// fails until Set).
func NewFaulty(fsys FS, fail func(op Op, path string) error) *Faulty {
	f := &Faulty{fs: fsys}
	f.Set(fail)
	return f
}

// Set replaces the callback; nil makes every operation succeed. It is safe
// while operations run, and from within the callback.
func (f *Faulty) Set(fail func(op Op, path string) error) {
	if fail == nil {
		f.fail.Store(nil)
		return
	}
	f.fail.Store(&fail)
}

// Torn returns an error that makes the write it fails write the first
// half of its bytes before it fails with err.
func Torn(err error) error { return &tornError{err} }

type tornError struct{ err error }

func (e *tornError) Error() string { return "torn write: " + e.err.Error() }
func (e *tornError) Unwrap() error { return e.err }

func (f *Faulty) check(op Op, path string) error {
	p := f.fail.Load()
	if p == nil {
		return nil
	}
	return (*p)(op, path)
}

func (f *Faulty) pathErr(op Op, path string) error {
	if err := f.check(op, path); err != nil {
		return &fs.PathError{Op: string(op), Path: path, Err: err}
	}
	return nil
}

func (f *Faulty) linkErr(op Op, oldname, newname string) error {
	if err := f.check(op, newname); err != nil {
		return &os.LinkError{Op: string(op), Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (f *Faulty) Open(name string) (File, error) {
	if err := f.pathErr(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{file: file, f: f}, nil
}

func (f *Faulty) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if err := f.pathErr(op, name); err != nil {
		return nil, err
	}
	file, err := f.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{file: file, f: f}, nil
}

func (f *Faulty) ReadFile(name string) ([]byte, error) {
	if err := f.pathErr(OpReadFile, name); err != nil {
		return nil, err
	}
	return f.fs.ReadFile(name)
}

func (f *Faulty) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if err := f.pathErr(OpWriteFile, name); err != nil {
		return err
	}
	return f.fs.WriteFile(name, data, perm)
}

func (f *Faulty) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.pathErr(OpReadDir, name); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(name)
}

func (f *Faulty) Stat(name string) (fs.FileInfo, error) {
	if err := f.pathErr(OpStat, name); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

func (f *Faulty) Lstat(name string) (fs.FileInfo, error) {
	if err := f.pathErr(OpLstat, name); err != nil {
		return nil, err
	}
	return f.fs.Lstat(name)
}

func (f *Faulty) Readlink(name string) (string, error) {
	if err := f.pathErr(OpReadlink, name); err != nil {
		return "", err
	}
	return f.fs.Readlink(name)
}

func (f *Faulty) Mkdir(name string, perm fs.FileMode) error {
	if err := f.pathErr(OpMkdir, name); err != nil {
		return err
	}
	return f.fs.Mkdir(name, perm)
}

func (f *Faulty) MkdirAll(name string, perm fs.FileMode) error {
	if err := f.pathErr(OpMkdirAll, name); err != nil {
		return err
	}
	return f.fs.MkdirAll(name, perm)
}

func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.linkErr(OpRename, oldname, newname); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

func (f *Faulty) Link(oldname, newname string) error {
	if err := f.linkErr(OpLink, oldname, newname); err != nil {
		return err
	}
	return f.fs.Link(oldname, newname)
}

func (f *Faulty) Symlink(target, name string) error {
	if err := f.linkErr(OpSymlink, target, name); err != nil {
		return err
	}
	return f.fs.Symlink(target, name)
}

func (f *Faulty) Remove(name string) error {
	if err := f.pathErr(OpRemove, name); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

func (f *Faulty) RemoveAll(name string) error {
	if err := f.pathErr(OpRemoveAll, name); err != nil {
		return err
	}
	return f.fs.RemoveAll(name)
}

func (f *Faulty) SyncDir(dir string) error {
	if err := f.pathErr(OpSyncDir, dir); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

// faultyFile is a File of a Faulty.
type faultyFile struct {
	file File
	f    *Faulty
}

func (ff *faultyFile) Name() string { return ff.file.Name() }
func (ff *faultyFile) Close() error { return ff.file.Close() }

func (ff *faultyFile) Write(p []byte) (int, error) {
	if err := ff.f.check(OpWrite, ff.file.Name()); err != nil {
		return ff.tear(err, func(b []byte) (int, error) { return ff.file.Write(b) }, p)
	}
	return ff.file.Write(p)
}

func (ff *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if err := ff.f.check(OpWrite, ff.file.Name()); err != nil {
		return ff.tear(err, func(b []byte) (int, error) { return ff.file.WriteAt(b, off) }, p)
	}
	return ff.file.WriteAt(p, off)
}

// tear fails a write with err, after writing half of p when err is Torn.
func (ff *faultyFile) tear(err error, write func([]byte) (int, error), p []byte) (int, error) {
	n := 0
	var t *tornError
	if errors.As(err, &t) {
		n, _ = write(p[:len(p)/2])
		err = t.err
	}
	return n, &fs.PathError{Op: string(OpWrite), Path: ff.file.Name(), Err: err}
}

func (ff *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := ff.f.pathErr(OpRead, ff.file.Name()); err != nil {
		return 0, err
	}
	return ff.file.ReadAt(p, off)
}

func (ff *faultyFile) Stat() (fs.FileInfo, error) {
	if err := ff.f.pathErr(OpStat, ff.file.Name()); err != nil {
		return nil, err
	}
	return ff.file.Stat()
}

func (ff *faultyFile) Sync() error {
	if err := ff.f.pathErr(OpSync, ff.file.Name()); err != nil {
		return err
	}
	return ff.file.Sync()
}

func (ff *faultyFile) Truncate(size int64) error {
	if err := ff.f.pathErr(OpTruncate, ff.file.Name()); err != nil {
		return err
	}
	return ff.file.Truncate(size)
}
