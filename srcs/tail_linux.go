package srcs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// What inotify reports to a Tail. The directory watch sees the path gain
// or lose a file (rotation, deletion, re-creation); the file watch sees
// growth and truncation of the file being read, even through a symlink.
const (
	tailDirEvents  = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_ONLYDIR
	tailFileEvents = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF
)

// inotifyWaiter waits for inotify events on Go's netpoller: the inotify
// descriptor is non-blocking, so os.NewFile makes it pollable, its read
// deadline bounds a wait, and closing it ends one. Events are not parsed:
// any event only means "look again". Needs Linux 2.6.27 (inotify_init1).
type inotifyWaiter struct {
	f      *os.File
	fileWD int // watch of the file being read; -1 if none
	buf    []byte
}

// newInotifyWaiter watches path and its directory.
func newInotifyWaiter(path string) (waiter, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("srcs: tail: %w", os.NewSyscallError("inotify_init1", err))
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), tailDirEvents); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("srcs: tail: watch %s: %w", filepath.Dir(path), os.NewSyscallError("inotify_add_watch", err))
	}
	wd, err := unix.InotifyAddWatch(fd, path, tailFileEvents)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("srcs: tail: watch %s: %w", path, os.NewSyscallError("inotify_add_watch", err))
	}
	// Room for several events with names (NAME_MAX is 255).
	return &inotifyWaiter{f: os.NewFile(uintptr(fd), "inotify"), fileWD: wd, buf: make([]byte, 4096)}, nil
}

func (w *inotifyWaiter) arm(until time.Time) { w.f.SetReadDeadline(until) }

func (w *inotifyWaiter) wait(time.Time) error {
	_, err := w.f.Read(w.buf)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// interrupt moves the deadline into the past, which ends a pending read
// and the next one: arm sets a new deadline before each wait.
func (w *inotifyWaiter) interrupt() { w.f.SetReadDeadline(time.Unix(1, 0)) }

// follow moves the file watch to the inode now at path. Failing that, the
// directory watch and the poll interval still see changes.
func (w *inotifyWaiter) follow(path string) {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return
	}
	// Control, not Fd: Fd would put the descriptor in blocking mode.
	rc.Control(func(fd uintptr) {
		wd, err := unix.InotifyAddWatch(int(fd), path, tailFileEvents)
		if err != nil {
			wd = -1
		}
		if w.fileWD >= 0 && w.fileWD != wd {
			// EINVAL if the old inode is gone and its watch with it.
			unix.InotifyRmWatch(int(fd), uint32(w.fileWD))
		}
		w.fileWD = wd
	})
}

func (w *inotifyWaiter) close() error { return w.f.Close() }
