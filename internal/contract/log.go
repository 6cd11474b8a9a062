package contract

// Logger is what the runners and sources log through: the methods of
// srcs.Logger, which *slog.Logger has. It is an interface, and not
// *slog.Logger, so that a program that hands sluice no logger links
// neither log/slog nor the encoding/json its default handler brings.
type Logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Level is the level of a message whose level is chosen as it is logged
// (Log).
type Level int8

// The levels, as slog's.
const (
	LevelDebug Level = iota
	LevelInfo
	LevelWarn
	LevelError
)

// Log logs msg with args through l at level.
func Log(l Logger, level Level, msg string, args ...any) {
	switch level {
	case LevelDebug:
		l.Debug(msg, args...)
	case LevelInfo:
		l.Info(msg, args...)
	case LevelWarn:
		l.Warn(msg, args...)
	default:
		l.Error(msg, args...)
	}
}

// Discard is a Logger that logs nothing.
type Discard struct{}

func (Discard) Debug(string, ...any) {}
func (Discard) Info(string, ...any)  {}
func (Discard) Warn(string, ...any)  {}
func (Discard) Error(string, ...any) {}

// OrDiscard returns l, or Discard when l is nil.
func OrDiscard(l Logger) Logger {
	if l == nil {
		return Discard{}
	}
	return l
}
