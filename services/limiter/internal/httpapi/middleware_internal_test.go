package httpapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCodeClass(t *testing.T) {
	for status, want := range map[int]string{100: "1xx", 200: "2xx", 204: "2xx", 301: "3xx", 429: "4xx", 503: "5xx", 600: "6xx", 999: "9xx"} {
		assert.Equal(t, want, codeClass(status), "status %d", status)
	}
}
