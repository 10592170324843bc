package canon

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrControl is returned for input that holds a control character (C0, DEL
// or C1, NUL included): such bytes are never part of a real endpoint, and
// stored or echoed they break logs and terminals.
var ErrControl = errors.New("canon: control characters are not allowed")

// ErrInvalidUTF8 is returned for input that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("canon: not valid UTF-8")

// Fold is a set of optional foldings of an endpoint, applied after the
// always-on steps (control characters refused, Unicode NFC). The zero value
// folds nothing more.
type Fold uint8

// The foldings, applied in this order whatever the order they are given in.
const (
	// FoldSpace trims white space at both ends: " /orders" is "/orders",
	// and again once FoldQuery has cut: "/orders ?x" is "/orders".
	FoldSpace Fold = 1 << iota
	// FoldQuery drops everything from the first '?' or '#'.
	FoldQuery
	// FoldPercent decodes percent-escapes of unreserved characters (RFC 3986
	// section 2.3: letters, digits, "-._~"), which mean the same decoded, and
	// upper-cases the hex digits of the others: "/%6frders" is "/orders",
	// "%2f" is "%2F".
	FoldPercent
	// FoldSlashes collapses runs of '/' into one: "//orders" is "/orders".
	FoldSlashes
	// FoldDots removes the dot segments of a path that starts with '/'
	// (RFC 3986 section 5.2.4): "/a/./b" is "/a/b", "/a/b/../c" is "/a/c";
	// a ".." above the root is dropped. After FoldPercent, "%2E" is a dot
	// too.
	FoldDots
	// FoldTrailingSlash drops a final '/' unless it is the whole path:
	// "/orders/" is "/orders".
	FoldTrailingSlash
	// FoldCase lower-cases (Unicode): "/Orders" is "/orders". Only for
	// routes whose backend ignores case.
	FoldCase

	// FoldAll is every folding.
	FoldAll = FoldSpace | FoldQuery | FoldPercent | FoldSlashes | FoldDots | FoldTrailingSlash | FoldCase
)

// foldNames are the configuration names of the foldings, in order.
var foldNames = []struct {
	name string
	f    Fold
}{
	{"space", FoldSpace}, {"query", FoldQuery}, {"percent", FoldPercent},
	{"slashes", FoldSlashes}, {"dots", FoldDots}, {"trailing_slash", FoldTrailingSlash}, {"case", FoldCase},
}

// ParseFold reads a list of folding names ("space", "query", "percent",
// "slashes", "dots", "trailing_slash", "case", or "all").
func ParseFold(names []string) (Fold, error) {
	var f Fold
next:
	for _, n := range names {
		if n == "all" {
			f |= FoldAll
			continue
		}
		for _, fn := range foldNames {
			if fn.name == n {
				f |= fn.f
				continue next
			}
		}
		return 0, fmt.Errorf("canon: unknown folding %q (want space, query, percent, slashes, dots, trailing_slash, case or all)", n)
	}
	return f, nil
}

// String lists f's names, comma-separated.
func (f Fold) String() string {
	var names []string
	for _, fn := range foldNames {
		if f&fn.f != 0 {
			names = append(names, fn.name)
		}
	}
	return strings.Join(names, ",")
}

// Endpoint returns the canonical form of an endpoint: refused (ErrControl,
// ErrInvalidUTF8) when it holds a control character or invalid UTF-8, else
// in Unicode NFC (so that "café" typed precomposed or decomposed is one
// endpoint), then folded as f says. Folding is idempotent: a folded
// endpoint folds to itself. The caller checks the length of the result.
func Endpoint(s string, f Fold) (string, error) {
	if !utf8.ValidString(s) {
		return "", ErrInvalidUTF8
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", ErrControl
	}
	s = norm.NFC.String(s)
	if f&FoldSpace != 0 {
		s = strings.TrimSpace(s)
	}
	if f&FoldQuery != 0 {
		if i := strings.IndexAny(s, "?#"); i >= 0 {
			s = s[:i]
			if f&FoldSpace != 0 {
				s = strings.TrimSpace(s)
			}
		}
	}
	if f&FoldPercent != 0 {
		s = foldPercent(s)
	}
	if f&FoldSlashes != 0 {
		for strings.Contains(s, "//") {
			s = strings.ReplaceAll(s, "//", "/")
		}
	}
	if f&FoldDots != 0 && strings.HasPrefix(s, "/") {
		s = removeDots(s)
	}
	if f&FoldTrailingSlash != 0 && len(s) > 1 && strings.HasSuffix(s, "/") {
		s = strings.TrimRight(s, "/")
		if s == "" {
			s = "/"
		}
	}
	if f&FoldCase != 0 {
		s = norm.NFC.String(strings.ToLower(s)) // lower-casing can leave NFC
	}
	return s, nil
}

// removeDots removes the "." and ".." segments of path p, which starts
// with '/' (RFC 3986 section 5.2.4): a ".." removes the segment before it,
// none above the root; a path ending in a dot segment keeps its final '/'.
func removeDots(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
			continue
		}
		if last {
			out = append(out, "") // "/a/b/.." is "/a/"
		}
	}
	return "/" + strings.Join(out, "/")
}

// foldPercent decodes escapes of unreserved characters and upper-cases the
// hex digits of the other escapes; a '%' not followed by two hex digits is
// left alone.
func foldPercent(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			b.WriteByte(s[i])
			continue
		}
		c := unhex(s[i+1])<<4 | unhex(s[i+2])
		if isUnreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(s[i+1 : i+3]))
		}
		i += 2
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
