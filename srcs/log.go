package srcs

// Logger is what sluice logs through: a listener's and a tail's
// (ListenerConfig.Logger, TailConfig.Logger) and the engine's
// (engine.WithLogger). A *slog.Logger is one; so is any type with these
// methods, which take slog's arguments (a message, then key-value pairs
// or slog.Attrs). sluice names this interface rather than *slog.Logger
// so that a program that gives it no logger links neither log/slog nor
// the encoding/json slog's default handler brings. A nil Logger logs
// nothing; a nil *slog.Logger is not a nil Logger (its methods would
// panic), so leave the field nil rather than put a nil pointer in it.
//
// A Logger must be safe for concurrent use: sources and runners log from
// their own goroutines.
type Logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}
