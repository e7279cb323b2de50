package natsserver

import (
	"context"
	"fmt"
	"log/slog"
)

// LevelTrace is the slog level nats-server trace output (Tracef) is logged
// at. It is below slog.LevelDebug; the server only produces trace output
// when the Logger's handler is enabled for this level.
const LevelTrace = slog.LevelDebug - 4

// serverLogger implements server.Logger. It forwards to an optional slog
// logger and reports fatal messages on a channel so Start can fail fast.
// It never exits the process.
type serverLogger struct {
	log   *slog.Logger // nil: discard
	fatal chan string  // capacity 1; first fatal message wins
}

func newServerLogger(l *slog.Logger, serverName string) *serverLogger {
	sl := &serverLogger{fatal: make(chan string, 1)}
	if l != nil {
		sl.log = l.With(slog.String("component", "nats-server"), slog.String("server_name", serverName))
	}
	return sl
}

func (l *serverLogger) enabled(level slog.Level) bool {
	return l.log != nil && l.log.Enabled(context.Background(), level)
}

func (l *serverLogger) debugEnabled() bool { return l.enabled(slog.LevelDebug) }
func (l *serverLogger) traceEnabled() bool { return l.enabled(LevelTrace) }

func (l *serverLogger) logf(level slog.Level, format string, v []any, attrs ...slog.Attr) {
	if !l.enabled(level) {
		return
	}
	l.log.LogAttrs(context.Background(), level, fmt.Sprintf(format, v...), attrs...)
}

func (l *serverLogger) Noticef(format string, v ...any) { l.logf(slog.LevelInfo, format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.logf(LevelTrace, format, v) }

// Fatalf logs at Error level with fatal=true and records the message for
// Start. Unlike nats-server's own loggers it does not exit.
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	select {
	case l.fatal <- msg:
	default:
	}
	if l.enabled(slog.LevelError) {
		l.log.LogAttrs(context.Background(), slog.LevelError, msg, slog.Bool("fatal", true))
	}
}
