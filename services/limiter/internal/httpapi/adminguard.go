package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// adminGuard throttles wrong admin keys per client: a fixed window of a
// minute in the store the service gives (Options.AdminFailureStore). Only wrong keys are counted
// and throttled: a valid key always passes, so others guessing from an
// address the operator shares (a NAT, a proxy) cannot lock the operator
// out. The throttle bounds the work and the log lines of a guessing
// client; the key's length (config.MinAdminKeyLen) is what makes guessing
// hopeless.
type adminGuard struct {
	store  Allower
	policy limiter.Policy
}

// Allower decides attempts under a policy: the Allow of a limiter.Store.
// The admin guard counts wrong admin keys in one.
type Allower interface {
	Allow(ctx context.Context, p limiter.Policy, r limiter.Request) (limiter.Decision, error)
}

func newAdminGuard(store Allower, perMinute int64) (*adminGuard, error) {
	if store == nil {
		return nil, errors.New("httpapi: options need an admin failure store for the admin routes")
	}
	p := limiter.Policy{Name: "admin-failures", Algorithm: limiter.FixedWindow, Limit: perMinute, Window: time.Minute}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("httpapi: admin failures: %w", err)
	}
	return &adminGuard{store: store, policy: p}, nil
}

// failed counts one wrong key of client at now and returns the 429
// problem when client has sent more than the policy's limit this minute.
func (g *adminGuard) failed(ctx context.Context, client string, now time.Time) *problem {
	d, err := g.store.Allow(ctx, g.policy, limiter.Request{Key: limiter.Key{Subject: client}, Cost: 1, Now: now})
	if err != nil || d.Allowed { // a store of the process's own fails only once closed
		return nil
	}
	return &problem{
		status:     http.StatusTooManyRequests,
		detail:     "too many wrong admin keys from this client; retry later",
		retryAfter: strconv.FormatInt(httplimit.RetryAfterSeconds(d.RetryAfter), 10),
	}
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
