package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

func TestClockOffsetFromEnv(t *testing.T) {
	opt, err := ClockOffsetFromEnv(func(string) string { return "" })
	require.NoError(t, err)
	a := &App{}
	opt(a)
	assert.Equal(t, time.Duration(0), a.clockOffset, "unset: no offset")

	opt, err = ClockOffsetFromEnv(func(k string) string { return map[string]string{ClockOffsetEnv: "-90s"}[k] })
	require.NoError(t, err)
	opt(a)
	assert.Equal(t, -90*time.Second, a.clockOffset)

	_, err = ClockOffsetFromEnv(func(string) string { return "yesterday" })
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, `config: LIMITER_TEST_CLOCK_OFFSET: "yesterday" is not a duration such as -90s or 2h`, err.Error())
}

// TestClockOffsetShiftsTheAppsClock: the offset moves the window /status
// reports, and the app warns about it at start.
func TestClockOffsetShiftsTheAppsClock(t *testing.T) {
	for _, tt := range []struct {
		offset time.Duration
		want   string
		warns  int
	}{
		{0, "2026-01-01T00:00:00Z", 0},
		{-3 * time.Hour, "2025-12-31T21:00:00Z", 1},
	} {
		t.Run(tt.offset.String(), func(t *testing.T) {
			var logs bytes.Buffer
			a, err := New(context.Background(), load(t, "--store=memory"),
				WithClockOffset(tt.offset), WithClock(limitertest.NewClock(t0)), // either order
				WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close() })

			r := httptest.NewRequest(http.MethodGet, "/status?key=skew", nil)
			w := httptest.NewRecorder()
			a.Handler().ServeHTTP(w, r)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			var body struct {
				WindowStart string `json:"window_start"`
			}
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.Equal(t, tt.want, body.WindowStart)
			assert.Equal(t, tt.warns, bytes.Count(logs.Bytes(), []byte("TEST ONLY: LIMITER_TEST_CLOCK_OFFSET")))
		})
	}
}
