package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/pkg/limiter/memstore"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// adminGuard throttles failed admin attempts per client: a fixed window of
// a minute in a small memory store of its own, so that guessing the admin
// key costs a minute per few guesses instead of running at thousands a
// second.
type adminGuard struct {
	store  *memstore.Store
	policy limiter.Policy
}

// adminGuardKeys bounds the clients the guard remembers; a full store evicts
// clients that are not blocked first.
const adminGuardKeys = 100_000

func newAdminGuard(perMinute int64) (*adminGuard, error) {
	p := limiter.Policy{Name: "admin-failures", Algorithm: limiter.FixedWindow, Limit: perMinute, Window: time.Minute}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("httpapi: admin failures: %w", err)
	}
	return &adminGuard{store: memstore.New(memstore.WithMaxKeys(adminGuardKeys)), policy: p}, nil
}

// blocked returns the 429 problem when client has used up its failed
// attempts for the current minute.
func (g *adminGuard) blocked(ctx context.Context, client string, now time.Time) *problem {
	d, err := g.store.Peek(ctx, g.policy, limiter.Key{Subject: client}, now)
	if err != nil || d.Remaining > 0 {
		return nil
	}
	return &problem{
		status:     http.StatusTooManyRequests,
		detail:     "too many failed admin attempts from this client; retry later",
		retryAfter: strconv.FormatInt(httplimit.RetryAfterSeconds(d.ResetAfter), 10),
	}
}

// failed counts one failed attempt of client at now.
func (g *adminGuard) failed(ctx context.Context, client string, now time.Time) {
	_, _ = g.store.Allow(ctx, g.policy, limiter.Request{Key: limiter.Key{Subject: client}, Cost: 1, Now: now}) // the memory store fails only once closed
}

// adminClient names the client of an admin attempt: its key under the
// snapshot's client rules (the address, or behind trusted proxies the one
// they forward; IPv6 by prefix), else the connection's address as text.
func adminClient(c *gin.Context, s *snapshot.Snapshot) string {
	if k, err := s.Identity.ClientRules().Key(c.Request); err == nil {
		return k
	}
	return c.Request.RemoteAddr
}
