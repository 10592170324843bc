package redisstore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// hostile are subjects and scopes that would break a naive key layout: they
// close or open the hash tag, forge the ':' separator, act in a SCAN pattern,
// or look like an escape.
var hostile = []string{"a}b", "{", "}", "a{b}c", "*", "?", "[", "[a-z]", "\\", "x:y", ":", "%2A", "%", "a", "é", " "}

func TestEscape(t *testing.T) {
	cases := map[string]string{
		"abc-_.XYZ09": "abc-_.XYZ09",
		"a}b":         "a%7Db",
		"{":           "%7B",
		"*":           "%2A",
		"?":           "%3F",
		"[":           "%5B",
		"x:y":         "x%3Ay",
		"%2A":         "%252A",
		"é":           "%C3%A9",
		"":            "",
	}
	for in, want := range cases {
		assert.Equal(t, want, escape(in), "escape(%q)", in)
	}
}

// FuzzEscape checks that escaped text never holds a character the key layout
// or a SCAN pattern gives a meaning, and that two different inputs never
// escape alike.
func FuzzEscape(f *testing.F) {
	for _, a := range hostile {
		f.Add(a, "a")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escape(a), escape(b)
		assert.False(t, strings.ContainsAny(ea, "{}:*?[]\\"), "escape(%q) = %q", a, ea)
		if a != b {
			assert.NotEqual(t, ea, eb, "escape(%q) = escape(%q)", a, b)
		}
	})
}

// crc16 is the CRC-16/XMODEM that Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot returns the Redis Cluster slot of key: the hash of the text between
// the first '{' and the first '}' after it, when not empty, else of the key.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	assert.Equal(t, uint16(0x31C3), crc16("123456789"))
	assert.Equal(t, slot("user1000"), slot("{user1000}.following"))
	assert.Equal(t, uint16(12182), slot("foo"))
}

// TestKeyLayoutHostile builds the keys of every hostile (subject, scope) pair
// under a hostile policy name: each key's hash tag is exactly the escaped
// (policy, subject), so all keys of a subject share one slot, and no two
// different (subject, scope, suffix) share a key name.
func TestKeyLayoutHostile(t *testing.T) {
	const policy = "p}:{*"
	seen := map[string]limiter.Key{}
	for _, subject := range hostile {
		tag := escape(policy) + ":" + escape(subject)
		var slots []uint16
		for _, scope := range hostile {
			k := limiter.Key{Subject: subject, Scope: scope}
			for _, suffix := range suffixes {
				name := keyName(DefaultPrefix, policy, k, suffix)
				require.Equal(t, 1, strings.Count(name, "{"), name)
				require.Equal(t, 1, strings.Count(name, "}"), name)
				open, end := strings.IndexByte(name, '{'), strings.IndexByte(name, '}')
				assert.Equal(t, tag, name[open+1:end], "tag of %q", name)
				assert.True(t, strings.HasPrefix(name, subjectPrefix(DefaultPrefix, policy, subject)), name)
				slots = append(slots, slot(name))
				prev, dup := seen[name]
				assert.False(t, dup, "%+v and %+v share %q", prev, k, name)
				seen[name] = k
			}
		}
		for _, s := range slots {
			assert.Equal(t, slots[0], s, "slots of subject %q", subject)
		}
	}
	assert.Len(t, seen, len(hostile)*len(hostile)*len(suffixes))
}

func TestValidPrefix(t *testing.T) {
	for _, p := range []string{"tollgate", "app:rl", "t-1.x"} {
		assert.True(t, validPrefix(p), p)
	}
	for _, p := range []string{"", "a{", "a}", "a*", "a?", "a[", "a]", "a\\"} {
		assert.False(t, validPrefix(p), p)
	}
}

// suffixOf is suffixFor for an algorithm the test knows.
func suffixOf(t testing.TB, a limiter.Algorithm) string {
	t.Helper()
	s, err := suffixFor(a)
	require.NoError(t, err)
	return s
}

// Every algorithm has its key suffix, the two logs share one, and an
// unknown algorithm is an error rather than another algorithm's key.
func TestSuffixForEveryAlgorithm(t *testing.T) {
	seen := map[string]limiter.Algorithm{}
	for _, a := range limiter.Algorithms {
		s := suffixOf(t, a)
		if other, dup := seen[s]; dup {
			assert.ElementsMatch(t, []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingLogUnsafe}, []limiter.Algorithm{other, a},
				"only the two logs share a suffix")
		}
		seen[s] = a
	}
	assert.Len(t, seen, len(suffixes), "every suffix is some algorithm's")
	_, err := suffixFor("leaky_bucket")
	assert.ErrorIs(t, err, limiter.ErrUnknownAlgorithm)
}
