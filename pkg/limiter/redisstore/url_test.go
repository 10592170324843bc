package redisstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestURLWithAHashIsRefused: a '#' ends a URL's authority, so in
// redis://:12#s3cret@host the password "12#s3cret" became port 12 of
// localhost and a fragment holding the secret. Every scheme refuses it,
// says how to write it (%23), and never quotes the secret.
func TestURLWithAHashIsRefused(t *testing.T) {
	for _, raw := range []string{
		"redis://:12#s3cret@db.example:6379/0",
		"rediss://user:12#s3cret@db.example:6379",
		"redis+cluster://:12#s3cret@a:7000,b:7001/",
		"redis+sentinel://:12#s3cret@a:26379/mymaster",
	} {
		_, err := ParseURL(raw)
		require.ErrorIs(t, err, ErrInvalidConfig, raw)
		assert.Contains(t, err.Error(), "%23", raw)
		assert.NotContains(t, err.Error(), "s3cret", raw)
	}
	tg, err := ParseURL("redis://:12%23s3cret@db.example:6379/0")
	require.NoError(t, err)
	assert.Equal(t, []string{"db.example:6379"}, tg.Addrs)
	assert.Equal(t, "12#s3cret", tg.password)
}
