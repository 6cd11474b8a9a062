package engine

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
)

// fakeRunner stands in for a runner in selection tests: nothing is read.
type fakeRunner struct{ name string }

func (f *fakeRunner) Name() string                { return f.name }
func (f *fakeRunner) Add(*contract.Lane) error    { return errors.New("fake") }
func (f *fakeRunner) Remove(*contract.Lane)       {}
func (f *fakeRunner) SetPaused(bool)              {}
func (f *fakeRunner) Close() error                { return nil }
func (f *fakeRunner) Stats() contract.RunnerStats { return contract.RunnerStats{Runner: f.name} }

var errNoKernel = errors.Join(errors.ErrUnsupported, errors.New("probe says no"))

// fakeFactories builds runners by name; the names in broken fail their
// probe with errNoKernel.
func fakeFactories(broken ...string) map[string]factory {
	m := map[string]factory{}
	for _, name := range []string{RunnerURing, RunnerEpoll, RunnerGoroutine, RunnerThread} {
		fail := false
		for _, b := range broken {
			fail = fail || b == name
		}
		m[name] = func(contract.RunnerConfig) (contract.Runner, error) {
			if fail {
				return nil, errNoKernel
			}
			return &fakeRunner{name}, nil
		}
	}
	return m
}

func TestChooseRunner(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    string
		env     string
		broken  []string
		chosen  string
		errLike string
		logs    []string
	}{
		{name: "auto takes io_uring when the probe passes", want: RunnerAuto, chosen: RunnerURing},
		{name: "auto steps down to epoll", want: RunnerAuto, broken: []string{RunnerURing}, chosen: RunnerEpoll,
			logs: []string{"runner skipped", "runner=uring", "probe says no"}},
		{name: "auto steps down to goroutines", want: RunnerAuto, broken: []string{RunnerURing, RunnerEpoll}, chosen: RunnerGoroutine,
			logs: []string{"runner=uring", "runner=epoll"}},
		{name: "auto never picks threads", want: RunnerAuto, broken: []string{RunnerURing, RunnerEpoll, RunnerGoroutine},
			errLike: "no runner works here"},
		{name: "an explicit runner is not downgraded", want: RunnerURing, broken: []string{RunnerURing},
			errLike: "runner uring unavailable"},
		{name: "explicit thread", want: RunnerThread, chosen: RunnerThread},
		{name: "the environment overrides the config", want: RunnerURing, env: RunnerEpoll, chosen: RunnerEpoll,
			logs: []string{"overridden by environment"}},
		{name: "a bad environment value names the variable", want: RunnerAuto, env: "kqueue", errLike: EnvRunner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvRunner, tc.env)
			var logBuf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logBuf, nil))
			r, err := chooseRunner(tc.want, contract.RunnerConfig{}, fakeFactories(tc.broken...), log)
			if tc.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errLike) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.errLike)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Name() != tc.chosen {
				t.Fatalf("chose %s, want %s", r.Name(), tc.chosen)
			}
			for _, l := range tc.logs {
				if !strings.Contains(logBuf.String(), l) {
					t.Errorf("log lacks %q:\n%s", l, logBuf.String())
				}
			}
		})
	}
}

func TestExplicitRunnerErrorUnwraps(t *testing.T) {
	t.Setenv(EnvRunner, "")
	_, err := chooseRunner(RunnerURing, contract.RunnerConfig{}, fakeFactories(RunnerURing), slog.New(slog.DiscardHandler))
	var re *RunnerError
	if !errors.As(err, &re) || re.Runner != RunnerURing || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("err = %v: want a *RunnerError for uring wrapping ErrUnsupported", err)
	}
}
