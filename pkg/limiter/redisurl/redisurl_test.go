package redisurl_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter/redisurl"
)

// Parse reads the kinds and their parts, and refuses what the store would,
// every error wrapping ErrInvalid and none quoting a password.
func TestParse(t *testing.T) {
	u, err := redisurl.Parse("rediss+sentinel://user:pa%23ss@a:26379,b:26380/mymaster/2")
	require.NoError(t, err)
	assert.Equal(t, redisurl.URL{Kind: redisurl.Sentinel, TLS: true, Addrs: []string{"a:26379", "b:26380"},
		Master: "mymaster", DB: 2, Username: "user", Password: "pa#ss"}, u)

	u, err = redisurl.Parse("redis+cluster://a:7000,b:7001")
	require.NoError(t, err)
	assert.Equal(t, redisurl.URL{Kind: redisurl.Cluster, Addrs: []string{"a:7000", "b:7001"}}, u)

	// A single server's address, database and query options are go-redis's.
	u, err = redisurl.Parse("rediss://:secret@db.example/3?dial_timeout=3s")
	require.NoError(t, err)
	assert.Equal(t, redisurl.URL{Kind: redisurl.Single, TLS: true}, u)

	for _, raw := range []string{
		"http://u:secret@h",
		"db.example:6379",
		"redis://:12#secret@h:6379",
		"redis+cluster://:secret@a:7000/1",
		"redis+cluster://:secret@a:0",
		"redis+sentinel://:secret@a:26379",
		"redis+sentinel://:secret@a:26379/m/x",
		"redis+sentinel://:secret@a:26379/m?db=1",
	} {
		_, err := redisurl.Parse(raw)
		require.ErrorIs(t, err, redisurl.ErrInvalid, raw)
		assert.NotContains(t, err.Error(), "secret", raw)
	}
	_, err = redisurl.Parse("redis://:12#secret@h:6379")
	assert.ErrorIs(t, err, redisurl.ErrHash)
}
