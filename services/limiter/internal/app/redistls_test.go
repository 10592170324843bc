package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/limitertest"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// TestRedisOverMutualTLS: a Redis that asks every client for a certificate
// (tls-auth-clients yes) and whose certificate a CA made here signed
// decides with --redis-tls-ca, --redis-tls-cert and --redis-tls-key; the
// same app without the client certificate is not ready, the Redis
// refusing the handshake; the settings without a rediss URL, or a
// certificate without its key, fail the start naming them.
func TestRedisOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis CA")
	server := tlstest.Files(t, ca.Server(t, "redis"), ca)
	client := tlstest.Files(t, ca.Client(t, "tollgate"), nil)
	caFile := server.ClientCA
	srv := redistest.StartTLS(t, redistest.TLS{Cert: server.Cert, Key: server.Key, ClientCA: caFile, Password: "pw"})
	url := "--redis-url=rediss://:pw@" + srv.TLSAddr() + "/0"
	readyz := func(a *App) int {
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}

	a := newApp(t, load(t, "--store=redis", url, "--redis-timeout=5s",
		"--redis-tls-ca="+caFile, "--redis-tls-cert="+client.Cert, "--redis-tls-key="+client.Key), limitertest.NewClock(t0))
	for i := 1; i <= 3; i++ {
		code, body := ping(t, a.Handler(), "tls")
		require.Equal(t, http.StatusOK, code, body)
		assert.Equal(t, float64(i), body["count"])
	}
	assert.Equal(t, http.StatusOK, readyz(a))

	anonymous := newApp(t, load(t, "--store=redis", url, "--redis-timeout=5s", "--redis-tls-ca="+caFile), limitertest.NewClock(t0))
	code, _ := ping(t, anonymous.Handler(), "tls")
	assert.Equal(t, http.StatusServiceUnavailable, code, "Redis refuses a client without a certificate")
	assert.Equal(t, http.StatusServiceUnavailable, readyz(anonymous))

	for args, want := range map[string][]string{
		"plain URL":        {"--redis-url=redis://" + srv.Addr() + "/0", "--redis-tls-ca=" + caFile},
		"cert without key": {url, "--redis-tls-cert=" + client.Cert},
	} {
		_, err := New(context.Background(), load(t, append([]string{"--store=redis"}, want...)...))
		require.ErrorIs(t, err, config.ErrInvalid, args)
		assert.Contains(t, err.Error(), "redis-tls-", args)
	}
}
