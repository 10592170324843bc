package identity

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// APIKeys is the operator's set of API keys, held as SHA-256 digests so
// that the file and the process never hold a key itself. The file has one
// lowercase hex digest per line (`printf %s "$KEY" | sha256sum`, the first
// field); blank lines and lines starting with # are ignored, and anything
// after the digest on its line is a comment. It is immutable: a reload
// builds a new one.
type APIKeys struct {
	digests map[[sha256.Size]byte]struct{}
}

// LoadAPIKeys reads the digest file at path.
func LoadAPIKeys(path string) (*APIKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity: api keys: %w", err)
	}
	return ParseAPIKeys(b, path)
}

// ParseAPIKeys reads a digest file's contents; name is for messages.
func ParseAPIKeys(b []byte, name string) (*APIKeys, error) {
	k := &APIKeys{digests: map[[sha256.Size]byte]struct{}{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		field := strings.Fields(line)[0]
		var d [sha256.Size]byte
		if len(field) != 2*sha256.Size {
			return nil, fmt.Errorf("identity: %s line %d: want a SHA-256 digest in hex (64 characters), got %d characters", name, n, len(field))
		}
		if _, err := hex.Decode(d[:], []byte(field)); err != nil {
			return nil, fmt.Errorf("identity: %s line %d: want a SHA-256 digest in hex: %w", name, n, err)
		}
		k.digests[d] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("identity: %s: %w", name, err)
	}
	return k, nil
}

// Len returns how many keys the set holds.
func (k *APIKeys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.digests)
}

// Lookup returns the short name of key (the first 16 hex digits of its
// digest: what logs, answers and the store show instead of the key) and
// whether it is one of the set's. A nil set holds no key.
func (k *APIKeys) Lookup(key string) (string, bool) {
	if k == nil {
		return "", false
	}
	d := sha256.Sum256([]byte(key))
	_, ok := k.digests[d]
	return hex.EncodeToString(d[:8]), ok
}
