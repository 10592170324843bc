package sqlitestore

import "time"

// The texts of times in the database. Both sort as the times they print, so
// that SQL compares them as text (window_start < ?, created_at >= ?).
const (
	// windowLayout is seed 000's window_start (docs/seeds.md): ISO 8601,
	// UTC, whole seconds ("2026-01-01T00:00:00Z").
	windowLayout = "2006-01-02T15:04:05Z"
	// eventLayout is created_at's, with a fixed nine-digit fraction
	// ("2026-01-01T00:00:45.000000000Z"), read back by event.
	eventLayout = "2006-01-02T15:04:05.000000000Z"
)

// windowStartText is the text of a window start.
func windowStartText(t time.Time) string { return t.UTC().Format(windowLayout) }

// eventTimeText is the text of an event's time (created_at, called_at).
func eventTimeText(t time.Time) string { return t.UTC().Format(eventLayout) }
