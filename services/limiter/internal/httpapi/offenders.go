package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

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

// handleOffenders answers GET /admin/offenders[?limit=N]: the (policy, key)
// pairs refused most in the current and previous interval, at most N (default
// the sketch's capacity), each with its count and the count's possible
// over-estimate (the true count is in [count-error, count]); unlisted_max
// bounds the refusals of any pair not listed. Admin only, like /rate/reset.
func (h *handler) handleOffenders(c *gin.Context, s *snapshot.Snapshot) (answer, *problem) {
	if p := h.admin(c, s); p != nil {
		return answer{}, p
	}
	limit := offenders.DefaultCapacity
	if v, given := c.GetQuery("limit"); given {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return answer{}, fail(http.StatusUnprocessableEntity, "query parameter limit must be a positive integer")
		}
		limit = n
	}
	off := s.Decider.Offenders()
	r := off.Report(s.Decider.Now())
	entries := r.Entries[:min(limit, len(r.Entries))]
	list := make([]offenderEntry, 0, len(entries))
	for _, e := range entries {
		list = append(list, offenderEntry{Policy: e.Policy, Key: e.Key, Count: e.Count, Error: e.Error})
	}
	return ok(offendersBody{
		WindowSeconds: r.Window.Seconds(),
		Since:         r.Since.UTC().Format(time.RFC3339),
		Capacity:      r.Capacity,
		Refusals:      r.Recorded,
		UnlistedMax:   r.Unlisted,
		RawKeys:       off.RawKeys(),
		Offenders:     list,
	}), nil
}
