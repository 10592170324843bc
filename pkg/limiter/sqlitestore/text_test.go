package sqlitestore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tollgate/tollgate/pkg/limiter"
)

func TestTimeTexts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add(45*time.Second + 7)
	assert.Equal(t, "2026-01-01T00:00:00Z", windowStartText(limiter.WindowStart(at, time.Minute)))
	assert.Equal(t, "2026-01-01T00:00:45.000000007Z", eventTimeText(at))
	assert.Equal(t, "2026-01-01T00:00:45.000000007Z", eventTimeText(at.In(time.FixedZone("X", -7200))))
	// Text order is time order, which SQL comparisons rely on.
	times := []time.Time{t0.Add(-1), t0, t0.Add(1), t0.Add(time.Millisecond), t0.Add(time.Second), t0.Add(10 * time.Second)}
	for i := 1; i < len(times); i++ {
		assert.Less(t, eventTimeText(times[i-1]), eventTimeText(times[i]))
		assert.LessOrEqual(t, windowStartText(times[i-1]), windowStartText(times[i]))
	}
	e, err := event(eventTimeText(at), 3)
	assert.NoError(t, err)
	assert.Equal(t, limiter.Event{At: at.UnixNano(), Cost: 3}, e, "created_at reads back as written")
}
