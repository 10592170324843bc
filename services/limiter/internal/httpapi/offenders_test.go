package httpapi_test

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/decide"
	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

type offendersAnswer struct {
	WindowSeconds float64 `json:"window_seconds"`
	Since         string  `json:"since"`
	Capacity      int     `json:"capacity"`
	Refusals      uint64  `json:"refusals"`
	UnlistedMax   uint64  `json:"unlisted_max"`
	RawKeys       bool    `json:"raw_keys"`
	Offenders     []struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Count  uint64 `json:"count"`
		Error  uint64 `json:"error"`
	} `json:"offenders"`
}

// offenders reads GET /admin/offenders with the admin key.
func (s *server) offenders(query string) offendersAnswer {
	s.t.Helper()
	w := s.do(req{method: http.MethodGet, target: "/admin/offenders" + query, header: map[string]string{"X-Admin-Key": adminKey}})
	require.Equal(s.t, http.StatusOK, w.Code, w.Body.String())
	var a offendersAnswer
	require.NoError(s.t, json.Unmarshal(w.Body.Bytes(), &a))
	return a
}

func TestOffendersIsAdminOnlyAndFailsClosed(t *testing.T) {
	s := newServer(t, openMemory(t))
	for _, h := range []map[string]string{nil, {"X-Admin-Key": ""}, {"X-Admin-Key": "wrong"}, {"X-Admin-Key": adminKey + " "}} {
		assertProblem(t, s.do(req{method: http.MethodGet, target: "/admin/offenders", header: h}), http.StatusForbidden, "forbidden")
	}
	noKey := newServer(t, openMemory(t), func(o *options) { o.AdminKey = "" })
	for _, h := range []map[string]string{nil, {"X-Admin-Key": ""}, {"X-Admin-Key": adminKey}} {
		assertProblem(t, noKey.do(req{method: http.MethodGet, target: "/admin/offenders", header: h}), http.StatusForbidden, "forbidden")
	}
	for _, q := range []string{"?limit=0", "?limit=-1", "?limit=x", "?limit="} {
		assertProblem(t, s.do(req{method: http.MethodGet, target: "/admin/offenders" + q, header: map[string]string{"X-Admin-Key": adminKey}}),
			http.StatusUnprocessableEntity, "validation-failed")
	}
}

// TestOffendersUnderASkewedWorkload sends /ping from Zipf-distributed
// clients against a limit of 1: every repeat is refused. The true top
// offenders are listed under their log hash with counts within the reported
// error, the list is bounded by the sketch's capacity, and no unlisted client
// was refused more than unlisted_max times.
func TestOffendersUnderASkewedWorkload(t *testing.T) {
	s := newServer(t, openMemory(t), func(o *options) { o.Policies[0] = withLimit(pingPolicy, 1) })
	z := rand.NewZipf(rand.New(rand.NewPCG(42, 42)), 1.1, 1, 4999)
	refused := map[string]uint64{} // hash -> true refusals
	var total uint64
	for range 8000 {
		key := "client-" + strconv.FormatUint(z.Uint64(), 10)
		if w := s.ping(key); w.Code == http.StatusTooManyRequests {
			refused[s.refusals.Hash("key:"+key)]++
			total++
		}
	}
	require.Greater(t, len(refused), offenders.DefaultCapacity, "more refused clients than the sketch monitors")

	a := s.offenders("")
	assert.Equal(t, total, a.Refusals, "every refusal is counted")
	assert.Equal(t, offenders.DefaultCapacity, a.Capacity)
	assert.Len(t, a.Offenders, offenders.DefaultCapacity, "at most the capacity by default")
	assert.False(t, a.RawKeys)
	listed := map[string]bool{}
	for i, o := range a.Offenders {
		listed[o.Key] = true
		assert.Equal(t, "ping", o.Policy)
		assert.LessOrEqual(t, o.Count-o.Error, refused[o.Key], "lower bound of %s", o.Key)
		assert.GreaterOrEqual(t, o.Count, refused[o.Key], "upper bound of %s", o.Key)
		if i > 0 {
			assert.LessOrEqual(t, o.Count, a.Offenders[i-1].Count, "sorted by count")
		}
	}
	for k, n := range refused {
		if !listed[k] {
			assert.LessOrEqual(t, n, a.UnlistedMax, "unlisted %s", k)
		}
	}
	keys := make([]string, 0, len(refused))
	for k := range refused {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int { return int(refused[y]) - int(refused[x]) })
	for _, k := range keys[:5] {
		assert.True(t, listed[k], "true top offender %s (%d refusals) is listed", k, refused[k])
	}
	assert.Len(t, s.offenders("?limit=3").Offenders, 3)
}

func TestOffendersRawKeysAndRotation(t *testing.T) {
	s := newServer(t, openMemory(t), func(o *options) {
		o.OffendersRawKeys = true
		o.OffendersWindow = 10 * time.Second
	})
	for range 5 {
		s.ping("raw-client") // 3 allowed, 2 refused
	}
	for range 12 {
		s.check("42", "/a") // 10 allowed, 2 refused
	}
	s.check("42", "/b") // another scope of the same user: allowed
	a := s.offenders("")
	assert.True(t, a.RawKeys)
	assert.Equal(t, 10.0, a.WindowSeconds)
	assert.Equal(t, uint64(4), a.Refusals)
	require.Len(t, a.Offenders, 2)
	// Raw keys are the store's: the source's namespace, then the key.
	for i, want := range []struct{ policy, key string }{{"check", "user:42"}, {"ping", "key:raw-client"}} {
		assert.Equal(t, want.policy, a.Offenders[i].Policy)
		assert.Equal(t, want.key, a.Offenders[i].Key)
		assert.Equal(t, uint64(2), a.Offenders[i].Count)
		assert.Equal(t, uint64(0), a.Offenders[i].Error, "exact below capacity")
	}
	assert.Equal(t, "2026-01-01T00:00:30Z", a.Since, "previous interval of 10 s before 00:00:45")

	s.clock.Advance(10 * time.Second)
	assert.Len(t, s.offenders("").Offenders, 2, "the previous interval is still reported")
	s.clock.Advance(10 * time.Second)
	a = s.offenders("")
	assert.Empty(t, a.Offenders, "older than two intervals")
	assert.Equal(t, uint64(0), a.Refusals)
}

func TestOffendersRefusesABadWindow(t *testing.T) {
	_, err := decide.NewOffenders(-time.Second, false, nil)
	require.ErrorIs(t, err, offenders.ErrWindow)
}
