package limiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Key bounds. A client chooses its keys; without a bound, each distinct key
// costs its whole length in every store (twice in SQLite: the counter and the
// audit row), so long keys multiply the disk and memory a client can take.
const (
	// DefaultKeyBytes is the bound NewKeyBound is usually given.
	DefaultKeyBytes = 256
	// MinKeyBytes is the smallest bound: the length of a digest.
	MinKeyBytes = len(keyDigestPrefix) + 2*sha256.Size
)

// keyDigestPrefix starts the stored form of a bounded key field.
const keyDigestPrefix = "sha256:"

// BoundKey returns k with each field longer than maxBytes replaced by
// "sha256:" and the hex SHA-256 of the field (71 bytes). A field that
// already starts with "sha256:" is replaced too, whatever its length, so
// that no client can choose a short key equal to another's digest. Two keys
// stay apart unless SHA-256 collides. maxBytes below MinKeyBytes counts as
// MinKeyBytes.
func BoundKey(k Key, maxBytes int) Key {
	maxBytes = max(maxBytes, MinKeyBytes)
	return Key{Subject: boundField(k.Subject, maxBytes), Scope: boundField(k.Scope, maxBytes)}
}

func boundField(s string, maxBytes int) string {
	if len(s) <= maxBytes && !strings.HasPrefix(s, keyDigestPrefix) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return keyDigestPrefix + hex.EncodeToString(sum[:])
}

// KeyBound is a Store that passes every call to another with its key
// bounded by BoundKey, so that the store never holds a key field longer
// than the bound, whatever its kind. Keys are validated first (empty
// subject, over MaxKeyLen): the bound does not widen what is accepted.
// It is safe for concurrent use when the store is.
type KeyBound struct {
	store    Store
	maxBytes int
}

var _ Store = (*KeyBound)(nil)

// NewKeyBound bounds the keys of store to maxBytes, in
// MinKeyBytes..MaxKeyLen.
func NewKeyBound(store Store, maxBytes int) (*KeyBound, error) {
	if maxBytes < MinKeyBytes || maxBytes > MaxKeyLen {
		return nil, fmt.Errorf("limiter: key bound %d is outside %d..%d: %w", maxBytes, MinKeyBytes, MaxKeyLen, ErrInvalidKey)
	}
	return &KeyBound{store: store, maxBytes: maxBytes}, nil
}

// Unwrap returns the store whose keys b bounds.
func (b *KeyBound) Unwrap() Store { return b.store }

// bound validates k and bounds it; an invalid k goes to the store as it is,
// to be refused there with the store's own error.
func (b *KeyBound) bound(k Key) Key {
	if k.Validate() != nil {
		return k
	}
	return BoundKey(k, b.maxBytes)
}

// Allow decides r with its key bounded.
func (b *KeyBound) Allow(ctx context.Context, p Policy, r Request) (Decision, error) {
	r.Key = b.bound(r.Key)
	return b.store.Allow(ctx, p, r)
}

// Peek reads k's state, k bounded.
func (b *KeyBound) Peek(ctx context.Context, p Policy, k Key, now time.Time) (Decision, error) {
	return b.store.Peek(ctx, p, b.bound(k), now)
}

// Reset forgets k, bounded.
func (b *KeyBound) Reset(ctx context.Context, p Policy, k Key) (int64, error) {
	return b.store.Reset(ctx, p, b.bound(k))
}

// ResetSubject forgets every key of subject, bounded.
func (b *KeyBound) ResetSubject(ctx context.Context, p Policy, subject string) (int64, error) {
	return b.store.ResetSubject(ctx, p, b.bound(Key{Subject: subject}).Subject)
}

// Prune passes through.
func (b *KeyBound) Prune(ctx context.Context, now time.Time, policies []Policy) (int64, error) {
	return b.store.Prune(ctx, now, policies)
}

// Ping passes through.
func (b *KeyBound) Ping(ctx context.Context) error { return b.store.Ping(ctx) }

// Close closes the store.
func (b *KeyBound) Close() error { return b.store.Close() }

// Capabilities are the store's: bounding keys changes none of them.
func (b *KeyBound) Capabilities() Capabilities { return CapabilitiesOf(b.store) }
