package fsys

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FS is the file-system operations of the local destination and the local
// checkpoint store. Names are host paths, as the os package takes them, and
// errors are those of the os package (*fs.PathError, *os.LinkError).
type FS interface {
	// Open opens a file or a folder to read.
	Open(name string) (File, error)
	// OpenFile opens a file with os.OpenFile's flags.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	ReadFile(name string) ([]byte, error)
	// WriteFile writes a file as os.WriteFile does: without syncing it.
	WriteFile(name string, data []byte, perm fs.FileMode) error
	ReadDir(name string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	Rename(oldname, newname string) error
	Link(oldname, newname string) error
	Symlink(target, name string) error
	Remove(name string) error
	RemoveAll(name string) error
	// SyncDir fsyncs a folder, making the names created, renamed or
	// removed in it durable.
	SyncDir(dir string) error
}

// File is what the two packages do with an open file.
type File interface {
	io.Writer
	io.WriterAt
	io.ReaderAt
	Stat() (fs.FileInfo, error)
	Sync() error
	Truncate(size int64) error
	Close() error
	Name() string
}

// OS is the real file system.
type OS struct{}

var _ FS = OS{}

func (OS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err // not a File holding a nil *os.File
	}
	return f, nil
}

func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (OS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (OS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	return os.WriteFile(name, data, perm)
}
func (OS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (OS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (OS) Lstat(name string) (fs.FileInfo, error)       { return os.Lstat(name) }
func (OS) Readlink(name string) (string, error)         { return os.Readlink(name) }
func (OS) Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func (OS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (OS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (OS) Link(oldname, newname string) error           { return os.Link(oldname, newname) }
func (OS) Symlink(target, name string) error            { return os.Symlink(target, name) }
func (OS) Remove(name string) error                     { return os.Remove(name) }
func (OS) RemoveAll(name string) error                  { return os.RemoveAll(name) }

func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return SyncAndClose(d)
}

// SyncAndClose syncs f to disk and closes it, with the first error.
func SyncAndClose(f File) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAll makes dir and its missing parents on fsys and returns those it
// made, outermost first: the caller syncs their parents once what it puts
// in them must be durable.
func MkdirAll(fsys FS, dir string, perm fs.FileMode) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append([]string{d}, missing...)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return nil, err
	}
	return missing, nil
}
