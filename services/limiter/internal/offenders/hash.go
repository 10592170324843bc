package offenders

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// MinSecretLen is the shortest secret NewHasher accepts.
const MinSecretLen = 16

// ErrShortSecret is returned by NewHasher for a secret under MinSecretLen
// bytes.
var ErrShortSecret = errors.New("offenders: the hash secret must be at least 16 bytes")

// Hasher names client keys in logs and reports without revealing them: a
// truncated HMAC-SHA256 under a secret. An unkeyed digest of an IPv4
// address or a numeric user id is reversed by trying every candidate in
// minutes; without the secret nobody can. It is safe for concurrent use.
type Hasher struct {
	secret []byte
}

// NewHasher returns a Hasher keyed with secret, or with 32 random bytes when
// secret is empty: names are then stable only within one process. Give the
// same secret to every instance of a deployment so that their logs agree.
func NewHasher(secret string) (*Hasher, error) {
	if secret == "" {
		return &Hasher{secret: []byte(rand.Text())}, nil
	}
	if len(secret) < MinSecretLen {
		return nil, ErrShortSecret
	}
	return &Hasher{secret: []byte(secret)}, nil
}

// Sum returns key's name: 16 hex digits (64 bits) of HMAC-SHA256.
func (h *Hasher) Sum(key string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:8])
}
