package srcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
)

// Defaults of TailConfig.
const (
	DefaultTailPoll        = 250 * time.Millisecond
	DefaultCheckpointEvery = time.Second
)

// maxTailMarks bounds the marks a Tail keeps for Released. Only an engine
// that never calls Released lets them pile up (one per rotation or
// truncation); past the bound the oldest are dropped.
const maxTailMarks = 4096

// TailConfig configures NewTail.
type TailConfig struct {
	// Path names the followed file. It must exist when the tail opens.
	Path string `yaml:"path"`
	// Checkpoint, if set, is the file where the position of released
	// bytes is kept (see Tail.Released), and where Open resumes.
	Checkpoint string `yaml:"checkpoint"`
	// Poll is how often a tail waiting at the end of its file looks at
	// the file even without a change notification. Without inotify (not
	// Linux, or PollOnly) it is the only way to see growth. Zero means
	// DefaultTailPoll.
	Poll time.Duration `yaml:"poll"`
	// PollOnly disables inotify, for file systems whose remote writers it
	// does not see (NFS, FUSE).
	PollOnly bool `yaml:"poll_only"`
	// FromStart makes a tail with no usable checkpoint read the file from
	// offset 0; otherwise it starts at the end, like tail -F.
	FromStart bool `yaml:"from_start"`
	// CheckpointEvery is the least time between two checkpoint saves.
	// Zero means DefaultCheckpointEvery.
	CheckpointEvery time.Duration `yaml:"checkpoint_every"`
	// Logger receives rotations and truncations at Info; the first of a
	// run of failed checkpoint saves at Warn (the retries that fail too at
	// Debug), and the save that ends the run at Info. Nil discards.
	Logger Logger `yaml:"-"`
}

func (cfg TailConfig) validate() error {
	switch {
	case cfg.Path == "":
		return errors.New("Path is empty")
	case cfg.Poll < 0:
		return fmt.Errorf("Poll: %v is negative", cfg.Poll)
	case cfg.CheckpointEvery < 0:
		return fmt.Errorf("CheckpointEvery: %v is negative", cfg.CheckpointEvery)
	}
	return nil
}

// Tail follows a file the way tail -F does, as a Read-based source: it
// offers no descriptor, so the engine drives it with the goroutine runner.
//
// At the end of the file Read waits, on inotify (Linux) or by polling,
// instead of returning io.EOF; a read deadline (Tail is a Deadliner) or
// Close ends the wait. While it waits it watches the path:
//
//   - Rotation by rename: when a different file (inode) appears at the
//     path, Read finishes the old file to its end, then continues with the
//     new one from offset 0. Bytes written to the old file after that
//     are not read, and a file rotated away again before the tail reached
//     it is skipped: the tail follows the path, as tail -F does.
//   - Truncation, copytruncate included: when the file becomes shorter than
//     the offset read so far, Read starts again at offset 0 of the same
//     file, logs it, and counts it in Truncations. A file truncated and then
//     regrown past that offset between two looks is not detected (no
//     tailer can tell it from growth).
//   - Deletion with no replacement: Read keeps waiting, on the deleted file
//     (a writer may still hold it) and for a file to appear at the path,
//     which it then follows from offset 0.
//
// Errors: Open fails with an error wrapping fs.ErrNotExist, naming the
// path, if the file does not exist, fs.ErrPermission if it cannot be
// read, and a *CheckpointError if the checkpoint exists but cannot be
// read or is not a checkpoint; Read fails only if a replacement file
// cannot be opened for lack of permission, or on an I/O error.
//
// Checkpoints: Position is where the bytes Read returned end. Released
// maps a count of released bytes back to a file position and saves it to
// the checkpoint file (fsynced, at most every CheckpointEvery, and on
// Close), so after a restart Open resumes after the last released byte:
// delivery is at least once. Open resumes from the checkpoint if it names
// the file now at the path; a checkpoint naming another inode means the
// file was rotated meanwhile, so Open starts at offset 0.
//
// A framed session that ends inside a record (a drain while the writer is
// in the middle of a line) delivers that record's start in a chunk
// flagged Truncated. Tail is a ChunkObserver so that it can see such a
// chunk: its bytes are never checkpointed, and a restart reads the record
// again, whole, once the writer has finished it. The whole records before
// it in the same chunk are delivered again then too. (A Tail opened again
// in the same process resumes after the truncated bytes.)
//
// A save that fails (a full disk, a read-only file system) does not stop
// Read: the file keeps the position saved before, which is behind the
// released bytes, never ahead of them. The failure is logged, returned by
// Flush and Close, and held by CheckpointErr until a save succeeds. While
// the file is open, a failed save is tried again every CheckpointEvery
// even if nothing more is released; after Close, by the next Released or
// Flush.
//
// A Tail may be opened again after Close, and resumes where it stopped. It
// is not safe for concurrent use, except that Close and SetReadDeadline may
// be called while Read blocks, and Position, Released, Delivered, Flush,
// CheckpointErr, Truncations and Rotations at any time.
type Tail struct {
	cfg TailConfig
	log Logger
	ck  *Checkpoint // nil without TailConfig.Checkpoint

	truncations atomic.Uint64
	rotations   atomic.Uint64

	mu       sync.Mutex
	f        *os.File // the file of the current session; nil when closed
	w        waiter   // nil when closed
	started  bool     // a session has been opened: ino and off are real
	dev, ino uint64   // device and inode of f
	file     string   // the identity of the stretch of f being read (see Position.File)
	off      int64    // offset in f of the next byte Read returns
	// stretches are the stretches begun from the released position's on,
	// oldest first, each with the offset it began at: what the checkpoint
	// keeps, so that a restarted tail gives each the identity it had.
	stretches []Position
	begun     bool   // a stretch began since the last save
	total     int64  // bytes Read has returned, over all sessions
	marks     []mark // total → file position, oldest first
	released  int64  // the highest count Released has seen
	// delivered counts the bytes of every Delivered call, as Released
	// counts them; cut is the range of those counts that the last chunk
	// flagged Truncated held.
	delivered int64
	cut       [2]int64
	deadline  time.Time

	saveMu    sync.Mutex // serialises taking the pending position and saving it
	ckMu      sync.Mutex // guards the fields below
	pending   Position   // newest released position
	dirty     bool       // pending not saved yet
	lastSave  time.Time
	timer     *time.Timer   // a scheduled save; nil if none
	timerDone chan struct{} // closed when the scheduled save has run
	saveErr   error         // the last save's error; nil once one succeeds
	failures  int           // saves failed since the last that succeeded
}

// mark says that stream byte at (counting every byte Read returned) is
// file byte pos. A mark starts each stretch of contiguous file bytes: a
// session, a rotation, a truncation.
type mark struct {
	at  int64
	pos Position
}

// NewTail checks cfg and returns a tail that has not opened the file yet.
func NewTail(cfg TailConfig) (*Tail, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("srcs: tail: %w", err)
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultTailPoll
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = DefaultCheckpointEvery
	}
	t := &Tail{cfg: cfg, log: cfg.Logger}
	if t.log == nil {
		t.log = contract.Discard{}
	}
	if cfg.Checkpoint != "" {
		ck, err := NewCheckpoint(cfg.Checkpoint, cfg.Path)
		if err != nil {
			return nil, fmt.Errorf("srcs: tail %s: %w", cfg.Path, err)
		}
		t.ck = ck
	}
	return t, nil
}

// Name returns the path.
func (t *Tail) Name() string { return t.cfg.Path }

// Open opens the file and chooses where to start: where the previous
// session of this Tail stopped, else the checkpoint, else offset 0 with
// FromStart or the end without. A start offset past the end of the file
// (it was truncated meanwhile) becomes 0 and counts as a truncation.
func (t *Tail) Open(context.Context) error {
	t.mu.Lock()
	err := t.openLocked()
	t.mu.Unlock()
	if err != nil {
		return err
	}
	return t.saveBegun()
}

// openLocked is Open with mu held, but for the save of a stretch begun.
func (t *Tail) openLocked() error {
	if t.f != nil {
		return fmt.Errorf("srcs: open %s: already open", t.cfg.Path)
	}
	f, fi, err := openRegular(t.cfg.Path)
	if err != nil {
		return err
	}
	dev, ino := devIno(fi)
	size := fi.Size()
	var st Position // the stretch, if resumed
	var off int64
	var why string
	if !t.started && t.ck != nil {
		var rf *os.File
		rf, st, off, why, err = t.resume(dev, ino)
		if err != nil {
			f.Close()
			return err
		}
		if rf != nil { // the checkpoint's file, rotated away
			f.Close()
			f = rf
			if fi, err = f.Stat(); err != nil {
				f.Close()
				return fmt.Errorf("srcs: %w", err)
			}
			dev, ino = devIno(fi)
			size = fi.Size()
		}
	}
	if st.File == "" && why == "" {
		if off, why, err = t.start(ino, size); err != nil {
			f.Close()
			return err
		}
	}
	if off > size {
		t.truncations.Add(1)
		t.log.Info("srcs: tail: file shorter than the resume offset; reading from the start",
			"path", t.cfg.Path, "offset", off, "size", size)
		off, st = 0, Position{}
	}
	var w waiter
	if !t.cfg.PollOnly {
		w, err = newInotifyWaiter(t.cfg.Path)
		if err != nil {
			lvl := contract.LevelInfo // out of watches or descriptors: worth knowing
			if errors.Is(err, errors.ErrUnsupported) {
				lvl = contract.LevelDebug
			}
			contract.Log(t.log, lvl, "srcs: tail: inotify unavailable; polling",
				"path", t.cfg.Path, "poll", t.cfg.Poll, "err", err)
		}
	}
	if w == nil {
		w = newPollWaiter()
	}
	t.log.Debug("srcs: tail: open", "path", t.cfg.Path, "inode", ino, "offset", off, "from", why)
	same := t.started && t.ino == ino && t.dev == dev
	t.f, t.w, t.started, t.dev, t.ino, t.off = f, w, true, dev, ino, off
	switch {
	case st.File != "":
		t.file = st.File
	case !same:
		t.beginLocked(off)
	}
	t.markLocked()
	return nil
}

// resume finds where the checkpoint says to go on: the stretch its
// position is in, at its offset, in the file that holds it, at the path
// or rotated away to another name in the same directory; else the next
// stretch it knows of that is still there; else nothing (st.File empty).
// A stretch whose inode a later one took (the file was truncated) is
// gone. rf is the file to read when it is not the one at the path.
func (t *Tail) resume(dev, ino uint64) (rf *os.File, st Position, off int64, why string, err error) {
	pos, files, err := t.ck.loadFiles()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, Position{}, 0, "", nil
	case err != nil:
		return nil, Position{}, 0, "", err // a *CheckpointError naming both files
	}
	if pos.File == "" && len(files) == 0 {
		// An older checkpoint: its position, in the file at the path, in a
		// stretch of a new identity.
		if pos.Inode == ino {
			st = Position{Dev: dev, Inode: ino, File: newStretchID(), Offset: pos.Offset}
			t.stretches = []Position{st}
			return nil, st, pos.Offset, "checkpoint", nil
		}
		t.log.Info("srcs: tail: checkpoint names another file; it was rotated, reading from the start",
			"path", t.cfg.Path, "checkpoint_inode", pos.Inode, "inode", ino)
		return nil, Position{}, 0, "checkpoint of a rotated file", nil
	}
	k, off := 0, int64(0)
	if pos.File == "" {
		off = files[0].Offset // nothing released yet: where the first stretch began
	} else {
		for k < len(files) && files[k].File != pos.File {
			k++
		}
		if k == len(files) {
			files = append([]Position{pos}, files...)
			k = 0
		}
		off = pos.Offset
	}
	t.stretches = files[k:]
	for i := k; i < len(files); i++ {
		s := files[i]
		if i > k {
			off = s.Offset
		}
		taken := false
		for _, later := range files[i+1:] {
			taken = taken || later.Dev == s.Dev && later.Inode == s.Inode
		}
		if taken {
			continue
		}
		if s.Dev == dev && s.Inode == ino {
			return nil, s, off, "checkpoint", nil
		}
		if f := t.findRotated(s.Dev, s.Inode); f != nil {
			t.log.Info("srcs: tail: the checkpoint's file was rotated away; finishing it first",
				"path", t.cfg.Path, "file", f.Name(), "offset", off)
			return f, s, off, "checkpoint, rotated file", nil
		}
	}
	t.log.Info("srcs: tail: the checkpoint's files are gone; reading the file at the path from the start",
		"path", t.cfg.Path, "inode", ino)
	return nil, Position{}, 0, "checkpoint of files gone", nil
}

// findRotated opens the regular file of device dev and inode ino in the
// path's directory, or returns nil.
func (t *Tail) findRotated(dev, ino uint64) *os.File {
	dir := filepath.Dir(t.cfg.Path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		name := filepath.Join(dir, e.Name())
		fi, err := os.Stat(name)
		if err != nil {
			continue
		}
		if d, i := devIno(fi); d != dev || i != ino {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return nil
		}
		if fi2, err := f.Stat(); err == nil {
			if d, i := devIno(fi2); d == dev && i == ino {
				return f
			}
		}
		f.Close()
		return nil
	}
	return nil
}

// newStretchID returns a new stretch identity: 64 random bits in hex.
func newStretchID() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// beginLocked starts a stretch of the current file at off, after the
// stretch t.file: the one the checkpoint knew for this file among those
// begun after it, or a new one. Called with mu held.
func (t *Tail) beginLocked(off int64) {
	cur := -1
	for i, s := range t.stretches {
		if t.file != "" && s.File == t.file {
			cur = i
		}
	}
	for _, s := range t.stretches[cur+1:] {
		if s.Dev == t.dev && s.Inode == t.ino && s.Offset == off {
			t.file = s.File
			return
		}
	}
	t.file = newStretchID()
	t.stretches = append(t.stretches, Position{Dev: t.dev, Inode: t.ino, File: t.file, Offset: off})
	t.begun = true
}

// saveBegun saves the checkpoint at once if a stretch began since the
// last save, so that a restart gives it the identity it has now.
func (t *Tail) saveBegun() error {
	t.mu.Lock()
	begun := t.begun
	t.begun = false
	t.mu.Unlock()
	if !begun || t.ck == nil {
		return nil
	}
	t.ckMu.Lock()
	t.dirty = true
	t.ckMu.Unlock()
	if err := t.save(); err != nil {
		t.log.Warn("srcs: tail: saving the checkpoint of a new stretch failed; what a restart reads again of it may be stored twice",
			"path", t.cfg.Path, "err", err)
	}
	return nil
}

// start returns the offset to start reading the file (ino, size) at, and
// where it came from.
func (t *Tail) start(ino uint64, size int64) (int64, string, error) {
	switch {
	case t.started && t.ino == ino:
		return t.off, "previous session", nil
	case t.started:
		return 0, "rotated since the previous session", nil
	}
	if t.ck != nil {
		pos, err := t.ck.Load()
		switch {
		case err == nil && pos.Inode == ino:
			return pos.Offset, "checkpoint", nil
		case err == nil:
			t.log.Info("srcs: tail: checkpoint names another file; it was rotated, reading from the start",
				"path", t.cfg.Path, "checkpoint_inode", pos.Inode, "inode", ino)
			return 0, "checkpoint of a rotated file", nil
		case !errors.Is(err, fs.ErrNotExist):
			return 0, "", err // a *CheckpointError naming both files
		}
	}
	if t.cfg.FromStart {
		return 0, "start", nil
	}
	return size, "end", nil
}

// openRegular opens path for reading if it is a regular file. Errors are
// *fs.PathError values naming it.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	// Check the type before opening as well as after: opening a FIFO
	// would block until a writer appears.
	fi, err := os.Stat(path)
	if err == nil {
		err = checkRegular(path, fi)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("srcs: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("srcs: %w", err)
	}
	if fi, err = f.Stat(); err == nil {
		err = checkRegular(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("srcs: %w", err)
	}
	return f, fi, nil
}

func checkRegular(path string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	cause := error(syscall.EISDIR)
	if !fi.IsDir() {
		cause = fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	return &fs.PathError{Op: "open", Path: path, Err: cause}
}

// inodeOf returns a file's inode number.
func inodeOf(fi fs.FileInfo) uint64 {
	_, ino := devIno(fi)
	return ino
}

// devIno returns a file's device and inode numbers.
func devIno(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}

// markLocked records that the next stream byte is file byte (ino, off).
func (t *Tail) markLocked() {
	m := mark{at: t.total, pos: Position{Dev: t.dev, Inode: t.ino, File: t.file, Offset: t.off}}
	if n := len(t.marks); n > 0 && t.marks[n-1].at == m.at {
		t.marks[n-1] = m // no byte came from the previous stretch
		return
	}
	if len(t.marks) >= maxTailMarks {
		t.marks = append(t.marks[:0], t.marks[1:]...)
	}
	t.marks = append(t.marks, m)
}

func (t *Tail) closedErr(op string) error {
	return fmt.Errorf("srcs: %s %s: %w", op, t.cfg.Path, os.ErrClosed)
}

// Read returns the next bytes of the file, waiting at its end for more
// (see Tail). It returns an error wrapping os.ErrDeadlineExceeded once the
// read deadline has passed, and one wrapping os.ErrClosed after Close.
func (t *Tail) Read(p []byte) (int, error) {
	for {
		t.mu.Lock()
		f, off, dl := t.f, t.off, t.deadline
		t.mu.Unlock()
		if f == nil {
			return 0, t.closedErr("read")
		}
		// As with net.Conn, a passed deadline fails Read even when data
		// is ready: that is how a runner interrupts it.
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, fmt.Errorf("srcs: read %s: %w", t.cfg.Path, os.ErrDeadlineExceeded)
		}
		if len(p) == 0 {
			return 0, nil
		}
		n, err := t.readAt(f, p, off)
		if n > 0 || err != nil {
			return n, err
		}
		next, err := t.atEnd(f, off)
		if err != nil {
			return 0, err
		}
		switch next {
		case endRotated:
			// The old file may have grown between our read and the
			// rename: finish it before switching.
			if n, err := t.readAt(f, p, off); n > 0 || err != nil {
				return n, err
			}
			if err := t.switchFile(f); err != nil {
				return 0, err
			}
		case endWait:
			if err := t.wait(); err != nil {
				return 0, err
			}
		}
	}
}

// What Read does at the end of its file.
const (
	endWait    = iota // nothing changed: wait for a change
	endRetry          // truncated: read again from the new offset
	endRotated        // another file is at the path: switch to it
)

// readAt reads at off and accounts for what it read. At the end of the
// file it returns 0 and no error.
func (t *Tail) readAt(f *os.File, p []byte, off int64) (int, error) {
	n, err := f.ReadAt(p, off)
	if n > 0 {
		t.mu.Lock()
		if t.f == f { // else a concurrent Close ended the session
			t.off += int64(n)
			t.total += int64(n)
		}
		t.mu.Unlock()
		return n, nil
	}
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return 0, nil
	case errors.Is(err, os.ErrClosed):
		return 0, t.closedErr("read")
	}
	return 0, fmt.Errorf("srcs: read %s: %w", t.cfg.Path, err)
}

// atEnd looks at the file and the path once Read has reached the end of
// f at off, and says what to do next. It handles a truncation itself.
func (t *Tail) atEnd(f *os.File, off int64) (int, error) {
	fi, err := f.Stat()
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			return 0, t.closedErr("read")
		}
		return 0, fmt.Errorf("srcs: read %s: %w", t.cfg.Path, err)
	}
	if fi.Size() < off {
		t.mu.Lock()
		if t.f == f {
			t.off = 0
			t.beginLocked(0) // what the inode holds now is another text

			t.markLocked()
		}
		t.mu.Unlock()
		if err := t.saveBegun(); err != nil {
			return 0, err
		}
		t.truncations.Add(1)
		t.log.Info("srcs: tail: file truncated; reading from the start",
			"path", t.cfg.Path, "offset", off, "size", fi.Size())
		return endRetry, nil
	}
	st, err := os.Stat(t.cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Deleted, or renamed with no replacement yet: keep waiting.
		return endWait, nil
	case err != nil:
		return 0, fmt.Errorf("srcs: read: %w", err)
	case inodeOf(st) != inodeOf(fi):
		return endRotated, nil
	}
	return endWait, nil
}

// switchFile replaces f, fully read, with the file now at the path.
func (t *Tail) switchFile(f *os.File) error {
	nf, fi, err := openRegular(t.cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // gone again before we could open it; keep waiting
	case err != nil:
		return err
	}
	t.mu.Lock()
	if t.f != f {
		t.mu.Unlock()
		nf.Close()
		return t.closedErr("read")
	}
	old := t.ino
	t.f, t.off = nf, 0
	t.dev, t.ino = devIno(fi)
	t.beginLocked(0)
	t.markLocked()
	t.w.follow(t.cfg.Path)
	t.mu.Unlock()
	f.Close()
	if err := t.saveBegun(); err != nil {
		return err
	}
	t.rotations.Add(1)
	t.log.Info("srcs: tail: file rotated; following the new one",
		"path", t.cfg.Path, "old_inode", old, "inode", inodeOf(fi))
	return nil
}

// wait blocks until the file or the path may have changed, Poll passes,
// the read deadline passes, or Close.
func (t *Tail) wait() error {
	t.mu.Lock()
	w := t.w
	if w == nil {
		t.mu.Unlock()
		return t.closedErr("read")
	}
	until := time.Now().Add(t.cfg.Poll)
	if !t.deadline.IsZero() && t.deadline.Before(until) {
		until = t.deadline
	}
	// Under mu, so that SetReadDeadline's interrupt comes after it and
	// is not overwritten.
	w.arm(until)
	t.mu.Unlock()
	if err := w.wait(until); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return t.closedErr("read")
		}
		return fmt.Errorf("srcs: read %s: wait: %w", t.cfg.Path, err)
	}
	return nil
}

// SetReadDeadline sets the deadline of a pending or future Read; a Read
// blocked at the end of the file returns at once if t has passed.
func (t *Tail) SetReadDeadline(dl time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return t.closedErr("set deadline")
	}
	t.deadline = dl
	t.w.interrupt()
	return nil
}

// Position returns where the bytes Read has returned end: the inode of the
// file they came from and the offset after the last of them.
func (t *Tail) Position() Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Position{Dev: t.dev, Inode: t.ino, File: t.file, Offset: t.off}
}

// PositionAt returns the file position of the stream byte n (counting
// every byte Read returned, as Released does): the stretch it was read
// from and its offset there, which a restarted tail with the same
// checkpoint gives it again. ok is false for a byte not read yet, or
// released and forgotten.
func (t *Tail) PositionAt(n int64) (Position, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n >= t.total || len(t.marks) == 0 || n < t.marks[0].at {
		return Position{}, false
	}
	i := len(t.marks) - 1
	for i > 0 && t.marks[i].at > n {
		i--
	}
	m := t.marks[i]
	p := m.pos
	p.Offset += n - m.at
	return p, true
}

// Truncations counts the times the file was found shorter than the
// offset read so far, and reading started again at 0.
func (t *Tail) Truncations() uint64 { return t.truncations.Load() }

// Rotations counts the switches to a new file at the path.
func (t *Tail) Rotations() uint64 { return t.rotations.Load() }

// Released tells the tail that the first n bytes Read ever returned (over
// all sessions) have been released by their consumer, so their position
// may be checkpointed. Counts must grow; a smaller or repeated one is
// ignored. Without a checkpoint file it only trims the marks.
//
// Released does not block on the disk: the save runs on a timer's
// goroutine, at most once per CheckpointEvery. It may be called after
// Close (chunks outlive the session); such a save still happens, shortly
// after.
func (t *Tail) Released(n int64) {
	t.mu.Lock()
	pos, ok := t.releasedLocked(n)
	t.mu.Unlock()
	if !ok || t.ck == nil {
		return
	}
	t.ckMu.Lock()
	defer t.ckMu.Unlock()
	t.pending, t.dirty = pos, true
	if t.timer == nil {
		t.armSaveLocked(t.cfg.CheckpointEvery - time.Since(t.lastSave))
	}
}

// releasedLocked maps a released byte count to the file position of the
// next byte, and drops the marks before it.
func (t *Tail) releasedLocked(n int64) (Position, bool) {
	n = min(n, t.total)
	if n > t.cut[0] && n <= t.cut[1] {
		n = t.cut[0] // a record the writer had not finished (see Delivered)
	}
	if n <= t.released || len(t.marks) == 0 || n < t.marks[0].at {
		// Nothing new, or bytes whose mark was dropped (maxTailMarks).
		return Position{}, false
	}
	t.released = n
	i := 0
	for i+1 < len(t.marks) && t.marks[i+1].at <= n {
		i++
	}
	if i > 0 {
		t.marks = append(t.marks[:0], t.marks[i:]...)
	}
	m := t.marks[0]
	p := m.pos
	p.Offset += n - m.at
	// The stretches before the released one are behind the checkpoint.
	for k, s := range t.stretches {
		if s.File == p.File {
			t.stretches = t.stretches[k:]
			break
		}
	}
	return p, true
}

// Delivered notes where each chunk ends in the counts Released takes, and
// the range of one flagged Truncated: Released keeps the checkpoint at its
// start (see Tail).
func (t *Tail) Delivered(data []byte, flags Flags) {
	t.mu.Lock()
	defer t.mu.Unlock()
	from := t.delivered
	t.delivered += int64(len(data))
	if flags&Truncated != 0 {
		t.cut = [2]int64{from, t.delivered}
	}
}

// Skipped counts bytes of a line too long for the framer, which the engine
// dropped: the file's offsets go on past them.
func (t *Tail) Skipped(n int64) {
	t.mu.Lock()
	t.delivered += n
	t.mu.Unlock()
}

// armSaveLocked schedules a save after delay (at once if not positive).
func (t *Tail) armSaveLocked(delay time.Duration) {
	done := make(chan struct{})
	t.timerDone = done
	t.timer = time.AfterFunc(max(delay, 0), func() {
		err := t.save()
		open := t.isOpen()
		t.ckMu.Lock()
		defer t.ckMu.Unlock()
		t.timer, t.timerDone = nil, nil
		close(done)
		t.againLocked(err, open)
	})
}

// againLocked schedules the save after one that returned err, if one is
// due: positions were released during it, or it failed while the file is
// open (a full disk frees up without more data arriving). A closed Tail
// retries only when Released or Flush is called, so that no timer
// outlives it.
func (t *Tail) againLocked(err error, open bool) {
	if t.timer == nil && t.dirty && (err == nil || open) {
		t.armSaveLocked(t.cfg.CheckpointEvery)
	}
}

func (t *Tail) isOpen() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.f != nil
}

// save writes the pending position, if any, to the checkpoint.
func (t *Tail) save() error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	t.ckMu.Lock()
	pos, dirty := t.pending, t.dirty
	t.dirty = false
	t.lastSave = time.Now()
	t.ckMu.Unlock()
	if !dirty {
		return nil
	}
	t.mu.Lock()
	files := append([]Position(nil), t.stretches...)
	t.mu.Unlock()
	err := t.ck.saveFiles(pos, files)
	t.ckMu.Lock()
	failures := t.failures
	if err != nil {
		t.dirty = true // retry; pending is this position or a newer one
		t.failures++
	} else {
		t.failures = 0
	}
	t.saveErr = err
	t.ckMu.Unlock()
	switch {
	case err != nil && failures == 0:
		t.log.Warn("srcs: tail: saving the checkpoint failed; reading goes on, and the save is retried",
			"path", t.cfg.Path, "err", err)
	case err != nil:
		t.log.Debug("srcs: tail: saving the checkpoint failed again", "path", t.cfg.Path, "failures", failures+1, "err", err)
	case failures > 0:
		t.log.Info("srcs: tail: checkpoint saved again", "path", t.cfg.Path, "failures", failures, "offset", pos.Offset)
	}
	return err
}

// CheckpointErr returns the *CheckpointError of the last checkpoint save
// if it failed, and nil once a save has succeeded (or if none failed).
func (t *Tail) CheckpointErr() error {
	t.ckMu.Lock()
	defer t.ckMu.Unlock()
	return t.saveErr
}

// Flush saves the last released position now, if it is not saved yet,
// and waits for a save already under way. It returns the save's error, a
// *CheckpointError.
func (t *Tail) Flush() error {
	if t.ck == nil {
		return nil
	}
	for {
		t.ckMu.Lock()
		tm, done := t.timer, t.timerDone
		if tm == nil || tm.Stop() {
			t.timer, t.timerDone = nil, nil
			t.ckMu.Unlock()
			break
		}
		t.ckMu.Unlock()
		<-done // the save is running; it may schedule another
	}
	err := t.save()
	open := t.isOpen()
	t.ckMu.Lock()
	t.againLocked(err, open)
	t.ckMu.Unlock()
	return err
}

// Close ends the session, unblocking a pending Read, and flushes the
// checkpoint. It is idempotent, and Open may follow.
func (t *Tail) Close() error {
	t.mu.Lock()
	f, w := t.f, t.w
	t.f, t.w = nil, nil
	t.mu.Unlock()
	var errs []error
	if w != nil {
		if err := w.close(); err != nil {
			errs = append(errs, fmt.Errorf("srcs: close %s: watch: %w", t.cfg.Path, err))
		}
	}
	if f != nil {
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("srcs: close %s: %w", t.cfg.Path, err))
		}
	}
	if err := t.Flush(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waiter is how a Tail waits at the end of its file: inotify, or a timer.
// arm and interrupt are called under Tail.mu, so an interrupt is never
// lost to a concurrent arm; wait and follow only from Read; close once.
type waiter interface {
	// arm prepares a wait that ends by until.
	arm(until time.Time)
	// wait blocks until something may have changed, until passes, or an
	// interrupt. It returns an error wrapping os.ErrClosed after close.
	wait(until time.Time) error
	// interrupt ends the current or next wait early.
	interrupt()
	// follow watches the file now at path after a rotation.
	follow(path string)
	close() error
}

// pollWaiter waits on a timer: the portable fallback.
type pollWaiter struct {
	wake  chan struct{} // holds an interrupt
	done  chan struct{} // closed by close
	timer *time.Timer   // owned by wait
}

func newPollWaiter() *pollWaiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pollWaiter{wake: make(chan struct{}, 1), done: make(chan struct{}), timer: t}
}

func (w *pollWaiter) arm(time.Time) {
	// Interrupts before arm are stale: the caller has seen their cause.
	select {
	case <-w.wake:
	default:
	}
}

func (w *pollWaiter) wait(until time.Time) error {
	w.timer.Reset(time.Until(until))
	defer w.timer.Stop()
	select {
	case <-w.timer.C:
	case <-w.wake:
	case <-w.done:
		return os.ErrClosed
	}
	return nil
}

func (w *pollWaiter) interrupt() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *pollWaiter) follow(string) {}

func (w *pollWaiter) close() error {
	close(w.done)
	return nil
}

var (
	_ Source          = (*Tail)(nil)
	_ Deadliner       = (*Tail)(nil)
	_ ReleaseObserver = (*Tail)(nil)
	_ ChunkObserver   = (*Tail)(nil)
)
