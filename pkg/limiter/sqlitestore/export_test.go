package sqlitestore

// QueueLen returns how many requests wait for the writer, so that tests can
// line requests up behind a held write lock and know they form one batch.
func QueueLen(s *Store) int { return len(s.queue) }

// WindowStartText and EventTimeText are the texts the store writes, so that
// tests can read its tables.
var (
	WindowStartText = windowStartText
	EventTimeText   = eventTimeText
)
