package offenders_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

func TestHasherIsKeyed(t *testing.T) {
	const secret = "deployment-secret-0123456789"
	a, err := offenders.NewHasher(secret)
	require.NoError(t, err)
	b, err := offenders.NewHasher(secret)
	require.NoError(t, err)
	other, err := offenders.NewHasher(secret + "x")
	require.NoError(t, err)
	random1, err := offenders.NewHasher("")
	require.NoError(t, err)
	random2, err := offenders.NewHasher("")
	require.NoError(t, err)

	key := "203.0.113.7"
	unkeyed := sha256.Sum256([]byte(key))
	assert.Regexp(t, `^[0-9a-f]{16}$`, a.Sum(key))
	assert.Equal(t, a.Sum(key), b.Sum(key), "one secret, one name: instances of a deployment agree")
	assert.NotEqual(t, a.Sum(key), other.Sum(key))
	assert.NotEqual(t, a.Sum(key), a.Sum("203.0.113.8"))
	assert.NotEqual(t, hex.EncodeToString(unkeyed[:8]), a.Sum(key), "not the unkeyed digest anyone can recompute")
	assert.NotEqual(t, random1.Sum(key), random2.Sum(key), "no secret: a random one per process")

	_, err = offenders.NewHasher("short")
	require.ErrorIs(t, err, offenders.ErrShortSecret)
}
