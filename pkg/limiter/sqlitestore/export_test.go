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

// OnYield makes f run each time the writer, between two chunks of a prune,
// is about to apply the requests queued meanwhile. Set it before the prune.
func OnYield(s *Store, f func()) { s.yielded = f }
