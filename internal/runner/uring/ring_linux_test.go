package uring

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSetupLadder(t *testing.T) {
	// Each fake kernel rejects, with EINVAL, any flag it does not know.
	for _, tc := range []struct {
		name   string
		known  SetupFlags
		want   SetupFlags
		tries  int
		err    error
		reject error
	}{
		{name: "6.1", known: DefaultFlags | SetupCQSize, want: DefaultFlags | SetupCQSize, tries: 1},
		{name: "6.0", known: DefaultFlags&^SetupDeferTaskrun | SetupCQSize,
			want: DefaultFlags&^SetupDeferTaskrun | SetupCQSize, tries: 2},
		{name: "5.19", known: SetupSubmitAll | SetupCoopTaskrun | SetupTaskrunFlag | SetupCQSize,
			want: SetupSubmitAll | SetupCoopTaskrun | SetupTaskrunFlag | SetupCQSize, tries: 3},
		{name: "5.18", known: SetupSubmitAll | SetupCQSize, want: SetupSubmitAll | SetupCQSize, tries: 5},
		{name: "5.10", known: SetupCQSize, want: SetupCQSize, tries: 6},
		{name: "nothing", known: 0, want: SetupCQSize, tries: 6, err: unix.EINVAL},
		{name: "blocked", known: DefaultFlags | SetupCQSize, want: DefaultFlags | SetupCQSize, tries: 1,
			err: unix.EPERM, reject: unix.EPERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []SetupFlags
			got, err := setupLadder(DefaultFlags|SetupCQSize, func(f SetupFlags) error {
				tried = append(tried, f)
				if tc.reject != nil {
					return tc.reject
				}
				if f&^tc.known != 0 {
					return unix.EINVAL
				}
				return nil
			})
			if !errors.Is(err, tc.err) || err != nil && tc.err == nil {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got != tc.want || len(tried) != tc.tries {
				t.Errorf("granted %v after %d tries %v, want %v after %d", got, len(tried), tried, tc.want, tc.tries)
			}
			// DEFER_TASKRUN never outlives SINGLE_ISSUER, nor TASKRUN_FLAG COOP_TASKRUN.
			for _, f := range tried {
				if f&SetupDeferTaskrun != 0 && f&SetupSingleIssuer == 0 ||
					f&SetupTaskrunFlag != 0 && f&SetupCoopTaskrun == 0 {
					t.Errorf("tried invalid combination %v", f)
				}
			}
		})
	}
}

func TestSetupErrors(t *testing.T) {
	for _, tc := range []struct {
		errno        unix.Errno
		notSupported bool
	}{
		{unix.EPERM, true}, {unix.EACCES, true}, {unix.ENOSYS, true},
		{unix.EINVAL, false}, {unix.ENOMEM, false},
	} {
		err := setupError(tc.errno)
		if errors.Is(err, ErrNotSupported) != tc.notSupported || !errors.Is(err, tc.errno) {
			t.Errorf("setupError(%v) = %v: Is(ErrNotSupported) = %v, want %v",
				tc.errno, err, errors.Is(err, ErrNotSupported), tc.notSupported)
		}
		if !strings.HasPrefix(err.Error(), "ring: setup: ") {
			t.Errorf("setupError(%v) = %q, want prefix %q", tc.errno, err, "ring: setup: ")
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Entries: 1 << 16}, "Entries"},
		{Config{Entries: 64, CQEntries: 1 << 20}, "CQEntries"},
		{Config{Entries: 64, CQEntries: 32}, "CQEntries"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.HasPrefix(err.Error(), "ring: ") {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestNewFlags(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		k := requireURing(t)
		r := newRing(t, Config{Entries: 16, CQEntries: 64})
		if r.Flags()&SetupCQSize == 0 || r.CQEntries() != 64 || r.SQEntries() != 16 {
			t.Errorf("flags %v, SQ %d, CQ %d; want CQSIZE, 16, 64", r.Flags(), r.SQEntries(), r.CQEntries())
		}
		if k.atLeast(6, 1) && r.Flags()&DefaultFlags != DefaultFlags {
			t.Errorf("kernel %d.%d granted %v, want all of %v", k.major, k.minor, r.Flags(), DefaultFlags)
		}
		if r.Features()&FeatNoDrop == 0 || r.Features()&FeatExtArg == 0 {
			t.Errorf("features %v lack NODROP or EXT_ARG", r.Features())
		}
		t.Logf("flags %v; features %v", r.Flags(), r.Features())
	})
}

func TestNop(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		r := newRing(t, Config{Entries: 8})
		s := sqe(t, r)
		s.PrepNop()
		s.UserData = PackUserData(3, 9)
		if n, err := r.SubmitAndWait(1); err != nil || n != 1 {
			t.Fatalf("SubmitAndWait = %d, %v", n, err)
		}
		if r.InFlight() != 1 {
			t.Errorf("InFlight before reaping = %d, want 1", r.InFlight())
		}
		c, ok := r.PeekCQE()
		if !ok {
			t.Fatal("no CQE")
		}
		if slot, gen := UnpackUserData(c.UserData); slot != 3 || gen != 9 || c.Res != 0 {
			t.Errorf("CQE %+v", *c)
		}
		r.CQAdvance(1)
		if r.InFlight() != 0 || r.CQReady() != 0 {
			t.Errorf("after reaping: InFlight %d, CQReady %d", r.InFlight(), r.CQReady())
		}
		if _, ok := r.PeekCQE(); ok {
			t.Error("PeekCQE on an empty ring returned a CQE")
		}
	})
}

// TestSubmitNowait: what completes at submission is ready when
// SubmitNowait returns, and what cannot complete yet (a poll on an empty
// pipe, a receive that would block) leaves it without waiting; the poll
// then completes in a later wait once data arrives.
func TestSubmitNowait(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		r := newRing(t, Config{Entries: 8})
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		s := sqe(t, r)
		s.PrepNop()
		s.UserData = 1
		s = sqe(t, r)
		s.PrepPollAdd(p[0], unix.POLLIN)
		s.UserData = 2
		// Only this thread may submit; a SubmitNowait that slept would hang
		// here until the poll completes, which nothing else makes happen.
		if n, err := r.SubmitNowait(); err != nil || n != 2 {
			t.Fatalf("SubmitNowait = %d, %v; want 2 submitted", n, err)
		}
		if r.CQReady() != 1 {
			t.Fatalf("%d CQEs ready after SubmitNowait, want the nop's", r.CQReady())
		}
		cqes := byUserData(t, reap(t, r, 1))
		wantRes(t, "nop", cqes[1], 0)
		if r.CQReady() != 0 {
			t.Fatalf("%d CQEs ready; the poll cannot have completed", r.CQReady())
		}
		if _, err := unix.Write(p[1], []byte{1}); err != nil {
			t.Fatal(err)
		}
		cqes = byUserData(t, reap(t, r, 1))
		if c := cqes[2]; c.Res&unix.POLLIN == 0 {
			t.Errorf("poll CQE %+v, want POLLIN", c)
		}
	})
}

func TestSQFull(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		r := newRing(t, Config{Entries: 4})
		for i := range 4 {
			s := r.GetSQE()
			if s == nil {
				t.Fatalf("GetSQE %d returned nil", i)
			}
			s.PrepNop()
			s.UserData = uint64(i)
		}
		if s := r.GetSQE(); s != nil {
			t.Fatal("GetSQE on a full SQ returned an entry")
		}
		if n, err := r.Submit(); err != nil || n != 4 {
			t.Fatalf("Submit = %d, %v", n, err)
		}
		s := r.GetSQE()
		if s == nil {
			t.Fatal("GetSQE after Submit returned nil")
		}
		s.PrepNop()
		s.UserData = 4
		// NextSQE submits by itself when the SQ is full.
		for i := 5; i < 12; i++ {
			s := sqe(t, r)
			s.PrepNop()
			s.UserData = uint64(i)
		}
		m := byUserData(t, reap(t, r, 12))
		for i := range uint64(12) {
			if c, ok := m[i]; !ok || c.Res != 0 {
				t.Errorf("NOP %d: %+v, %v", i, c, ok)
			}
		}
	})
}

func TestCQOverflow(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		r := newRing(t, Config{Entries: 4, CQEntries: 4})
		const total = 200
		for i := range total {
			s := sqe(t, r) // submits every 4 without reaping
			s.PrepNop()
			s.UserData = uint64(i)
		}
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		if !r.cqNeedsFlush() {
			t.Error("IORING_SQ_CQ_OVERFLOW not set with 200 CQEs in a 4-entry CQ")
		}
		if r.InFlight() != total {
			t.Errorf("InFlight = %d, want %d", r.InFlight(), total)
		}
		seen := make([]bool, total)
		n := r.ForEachCQE(func(c *CQE) {
			if c.UserData >= total || seen[c.UserData] || c.Res != 0 {
				t.Errorf("bad or duplicate CQE %+v", *c)
				return
			}
			seen[c.UserData] = true
		})
		if n != total || r.InFlight() != 0 || r.Overflow() != 0 {
			t.Errorf("reaped %d of %d; InFlight %d; dropped %d", n, total, r.InFlight(), r.Overflow())
		}
	})
}

func TestWrongThread(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags SetupFlags
	}{
		{"single issuer", 0}, // DefaultFlags: the kernel refuses, EEXIST becomes ErrWrongThread
		{"any issuer", SetupCoopTaskrun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runLocked(t, func(t *testing.T) {
				r := newRing(t, Config{Entries: 4, Flags: tc.flags})
				s := sqe(t, r)
				s.PrepNop()
				s.UserData = 1

				errs := make(chan [2]error)
				go func() {
					runtime.LockOSThread() // another thread: ours is locked to the test
					defer runtime.UnlockOSThread()
					_, submitErr := r.Submit()
					errs <- [2]error{submitErr, r.Close()}
				}()
				got := <-errs
				for i, err := range got {
					if !errors.Is(err, ErrWrongThread) {
						t.Errorf("call %d from another thread: %v, want ErrWrongThread", i, err)
					}
				}
				c := reap(t, r, 1)[0]
				if c.UserData != 1 || c.Res != 0 {
					t.Errorf("owner's reap: %+v", c)
				}
			})
		})
	}
}

func TestCloseIdempotent(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		requireURing(t)
		r, err := New(Config{Entries: 4})
		if err != nil {
			t.Fatal(err)
		}
		fd := r.Fd()
		for range 2 {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !isErrno(err, unix.EBADF) {
			t.Errorf("ring fd still open after Close: %v", err)
		}
		if s := r.GetSQE(); s != nil {
			t.Error("GetSQE after Close returned an entry")
		}
		if _, err := r.Submit(); !errors.Is(err, ErrClosed) {
			t.Errorf("Submit after Close: %v", err)
		}
		if _, ok := r.PeekCQE(); ok {
			t.Error("PeekCQE after Close returned a CQE")
		}
	})
}

func TestNopZeroAllocs(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		r := newRing(t, Config{Entries: 64})
		const batch = 8
		allocs := testing.AllocsPerRun(200, func() {
			for i := range batch {
				s := r.GetSQE()
				s.PrepNop()
				s.UserData = uint64(i)
			}
			if _, err := r.SubmitAndWait(batch); err != nil {
				panic(err)
			}
			for {
				c, ok := r.PeekCQE()
				if !ok {
					break
				}
				_ = c.Res
				r.CQAdvance(1)
			}
		})
		if allocs != 0 {
			t.Errorf("steady-state NOP path allocates %.1f times per batch", allocs)
		}
		if r.InFlight() != 0 {
			t.Errorf("InFlight = %d", r.InFlight())
		}
	})
}
