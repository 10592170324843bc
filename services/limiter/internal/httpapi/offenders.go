package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

// DefaultOffendersWindow is the interval of GET /admin/offenders unless
// Options says otherwise.
const DefaultOffendersWindow = time.Minute

type (
	offenderEntry struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Count  uint64 `json:"count"` // refusals, an over-estimate by at most Error
		Error  uint64 `json:"error"`
	}
	offendersBody struct {
		WindowSeconds float64         `json:"window_seconds"`
		Since         string          `json:"since"`
		Capacity      int             `json:"capacity"`
		Refusals      uint64          `json:"refusals"`
		UnlistedMax   uint64          `json:"unlisted_max"`
		RawKeys       bool            `json:"raw_keys"`
		Offenders     []offenderEntry `json:"offenders"`
	}
)

// Offenders counts refusals by (policy, key) for GET /admin/offenders; the
// HTTP routes and the Envoy API record into the same one. It is safe for
// concurrent use.
type Offenders struct {
	tracker *offenders.Tracker
	raw     bool // keys listed as sent, not as the access log's hash
}

// NewOffenders returns an empty Offenders whose report covers the current
// and previous window (0 means DefaultOffendersWindow); raw lists keys as
// sent instead of hashed.
func NewOffenders(window time.Duration, raw bool) (*Offenders, error) {
	if window == 0 {
		window = DefaultOffendersWindow
	}
	t, err := offenders.NewTracker(window, offenders.DefaultCapacity)
	if err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	return &Offenders{tracker: t, raw: raw}, nil
}

// Record counts one refusal of subject by policy at now, under the key form
// the report shows. A nil *Offenders records nothing.
func (o *Offenders) Record(now time.Time, policy, subject string) {
	if o == nil {
		return
	}
	key := subject
	if !o.raw {
		key = hashClient(subject)
	}
	o.tracker.Record(now, offenders.Item{Policy: policy, Key: key})
}

// handleOffenders answers GET /admin/offenders[?limit=N]: the (policy, key)
// pairs refused most in the current and previous interval, at most N (default
// the sketch's capacity), each with its count and the count's possible
// over-estimate (the true count is in [count-error, count]); unlisted_max
// bounds the refusals of any pair not listed. Admin only, like /rate/reset.
func (h *handler) handleOffenders(c *gin.Context) {
	if !h.isAdmin(c) {
		abortProblem(c, http.StatusForbidden, "a valid X-Admin-Key is required")
		return
	}
	limit := offenders.DefaultCapacity
	if v, given := c.GetQuery("limit"); given {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			abortProblem(c, http.StatusUnprocessableEntity, "query parameter limit must be a positive integer")
			return
		}
		limit = n
	}
	r := h.offenders.tracker.Report(h.clock.Now())
	entries := r.Entries[:min(limit, len(r.Entries))]
	list := make([]offenderEntry, 0, len(entries))
	for _, e := range entries {
		list = append(list, offenderEntry{Policy: e.Policy, Key: e.Key, Count: e.Count, Error: e.Error})
	}
	c.JSON(http.StatusOK, offendersBody{
		WindowSeconds: r.Window.Seconds(),
		Since:         r.Since.UTC().Format(time.RFC3339),
		Capacity:      r.Capacity,
		Refusals:      r.Recorded,
		UnlistedMax:   r.Unlisted,
		RawKeys:       h.offenders.raw,
		Offenders:     list,
	})
}
