package sqlitestore_test

import (
	"testing"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
)

func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t testing.TB) limiter.Store { s, _ := newStore(t); return s })
}
