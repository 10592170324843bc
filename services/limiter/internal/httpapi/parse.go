package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/services/limiter/internal/canon"
	"github.com/tollgate/tollgate/services/limiter/internal/identity"
	"github.com/tollgate/tollgate/services/limiter/internal/snapshot"
)

// Bounds of client input.
const (
	// MaxBodyBytes is the largest request body accepted; larger gets 413.
	MaxBodyBytes = 64 << 10
	// MaxEndpointRunes is the longest endpoint, in characters (seed 001's 128, docs/seeds.md).
	MaxEndpointRunes = 128
)

// InputError says why a piece of client input was refused.
type InputError struct {
	What   string // "user id", "endpoint", ...
	Reason string // "is empty", ...
}

// Error returns the reason prefixed with the package name.
func (e *InputError) Error() string { return "httpapi: " + e.Detail() }

// Detail returns the reason as shown to the client in a problem's detail.
func (e *InputError) Detail() string { return e.What + " " + e.Reason }

func inputError(what, format string, args ...any) error {
	return &InputError{What: what, Reason: fmt.Sprintf(format, args...)}
}

// detail returns the client-facing text of err.
func detail(err error) string {
	if ie := (*InputError)(nil); errors.As(err, &ie) {
		return ie.Detail()
	}
	return err.Error()
}

// ParseUserID parses a user id as seed 001's ctype_digit (docs/seeds.md) + positive test
// does: only ASCII digits, greater than zero, fitting an int64. Leading zeros
// are allowed and dropped: it returns the value and its canonical decimal
// text, which is the key's subject, so "007" and "7" are one user.
func ParseUserID(s string) (int64, string, error) {
	if s == "" {
		return 0, "", inputError("user id", "is missing or empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "", inputError("user id", "must be ASCII digits only")
		}
	}
	canon := strings.TrimLeft(s, "0")
	if canon == "" {
		return 0, "", inputError("user id", "must be greater than zero")
	}
	n, err := strconv.ParseInt(canon, 10, 64)
	if err != nil {
		return 0, "", inputError("user id", "does not fit in 64 bits")
	}
	return n, canon, nil
}

// ValidateText checks a client-supplied string: not empty, valid UTF-8 with
// no U+FFFD (the character that invalid bytes and lone surrogates decode
// to), at most maxBytes bytes and, when maxRunes > 0, at most maxRunes
// characters.
func ValidateText(what, s string, maxBytes, maxRunes int) error {
	switch {
	case s == "":
		return inputError(what, "is empty")
	case len(s) > maxBytes:
		return inputError(what, "is longer than %d bytes", maxBytes)
	case !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError):
		return inputError(what, "is not valid UTF-8")
	case maxRunes > 0 && utf8.RuneCountInString(s) > maxRunes:
		return inputError(what, "is longer than %d characters", maxRunes)
	}
	return nil
}

// ValidateEndpoint checks an endpoint as seed 001 does (docs/seeds.md): a non-empty string of
// at most 128 characters.
func ValidateEndpoint(s string) error {
	return ValidateText("endpoint", s, 4*MaxEndpointRunes, MaxEndpointRunes)
}

// singleHeader returns the one value of header name; it is an error when the
// header is repeated, since two values would make the identity ambiguous.
func singleHeader(c *gin.Context, name string) (string, error) {
	vs := c.Request.Header.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", inputError(name, "is given %d times", len(vs))
}

// userIdentity reads X-User-Id and returns the id and its store key (in
// the user: namespace): 400 when it is missing, invalid, or sent by a client
// whose identity headers are not believed.
func userIdentity(c *gin.Context, s *snapshot.Snapshot) (int64, string, *problem) {
	if !s.Identity.HeadersBelieved(c.Request) {
		return 0, "", fail(http.StatusBadRequest, "X-User-Id is believed only from a trusted proxy; this client is not one")
	}
	raw, err := singleHeader(c, "X-User-Id")
	if err == nil {
		var id int64
		var canon string
		if id, canon, err = ParseUserID(raw); err == nil {
			return id, identity.User.Namespace() + canon, nil
		}
	}
	return 0, "", fail(http.StatusBadRequest, "X-User-Id must be one positive decimal integer: "+detail(err))
}

// bodyBuf is a request body and its members, reused across requests (see
// withBody): reading a body then costs no allocation.
type bodyBuf struct {
	body    []byte
	members [8]canon.Member
}

// bodyBufs holds bodyBufs.
var bodyBufs = sync.Pool{New: func() any { return &bodyBuf{body: make([]byte, 0, 1024)} }}

// maxPooledBody is the largest body buffer put back in bodyBufs: a rare
// large body does not keep its memory in the pool.
const maxPooledBody = 8 << 10

// withBody reads a non-empty body of at most MaxBodyBytes and calls use
// with it: 413 for a larger body, 400 for an empty or unreadable one. The
// bytes are reused once use returns: use copies what it keeps.
func withBody(c *gin.Context, use func(buf *bodyBuf) *problem) *problem {
	buf := bodyBufs.Get().(*bodyBuf)
	defer func() {
		if cap(buf.body) <= maxPooledBody {
			clear(buf.members[:])
			bodyBufs.Put(buf)
		}
	}()
	r := c.Request.Body
	if n := c.Request.ContentLength; n < 0 || n > MaxBodyBytes {
		// Unknown or too large: MaxBytesReader stops at the bound and has
		// the connection closed after the answer. A known length within it
		// is already where net/http stops reading.
		r = http.MaxBytesReader(c.Writer, r, MaxBodyBytes)
	}
	var err error
	if buf.body, err = appendAll(buf.body[:0], r); err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		}
		return fail(http.StatusBadRequest, "the body could not be read")
	}
	if len(bytes.TrimSpace(buf.body)) == 0 {
		return fail(http.StatusBadRequest, "the body is empty; send a JSON object")
	}
	return use(buf)
}

// appendAll appends what r holds to b, as io.ReadAll does to a new slice.
func appendAll(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// withObject reads a JSON object body of at most MaxBodyBytes and calls use
// with its members: 413 for a larger body, 400 for an empty or unparsable
// one (trailing data included) or one that is not an object. The members
// alias a reused buffer: use copies what it keeps (stringMember does).
func withObject(c *gin.Context, use func(obj canon.Members) *problem) *problem {
	return withBody(c, func(buf *bodyBuf) *problem {
		obj, err := canon.AppendObject(buf.members[:0], buf.body)
		if errors.Is(err, canon.ErrDuplicate) {
			return fail(http.StatusBadRequest, "a member of the body is named twice: "+strings.TrimPrefix(err.Error(), "canon: duplicate member ")+
				" (parsers disagree on which value wins, so Tollgate takes none)")
		}
		if err != nil {
			return fail(http.StatusBadRequest, "the body is not a JSON object")
		}
		return use(obj)
	})
}

// stringMember returns obj[name] as a validated string: 422 when it is
// missing, not a string or fails check (nil checks nothing).
func stringMember(obj canon.Members, name string, check func(string) error) (string, *problem) {
	raw, ok := obj.Get(name)
	if !ok {
		return "", fail(http.StatusUnprocessableEntity, name+" is required")
	}
	s, ok := canon.String(raw)
	if !ok {
		return "", fail(http.StatusUnprocessableEntity, name+" must be a UTF-8 string")
	}
	if check == nil {
		return s, nil
	}
	if err := check(s); err != nil {
		return "", fail(http.StatusUnprocessableEntity, detail(err))
	}
	return s, nil
}
