package httpapi

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/gin-gonic/gin"
)

// The bodies of the decision routes (/ping, /rate/check, /v1/check) write
// their own JSON, since they are written on every request: appendJSON
// appends byte for byte what encoding/json writes for them, without
// reflection.

// jsonContentType is the Content-Type of JSON answers, as Gin's c.JSON
// writes it; shared, never modified.
var jsonContentType = []string{"application/json; charset=utf-8"}

// answerBufs holds the buffers of jsonOK's answers.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// jsonOK answers 200 with the JSON that appendJSON appends, in a pooled
// buffer that serve puts back once the bytes are written.
func jsonOK(appendJSON func(b []byte) []byte) answer {
	bp := answerBufs.Get().(*[]byte)
	return answer{raw: appendJSON((*bp)[:0]), pooled: bp}
}

// writeJSON writes body with status as c.JSON would write its encoding.
func writeJSON(c *gin.Context, status int, body []byte) {
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Writer.WriteHeader(status)
	_, _ = c.Writer.Write(body) // a failed write is the client's disconnection
}

func (p pingBody) appendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"key":`...), p.Key)
	b = strconv.AppendInt(append(b, `,"count":`...), p.Count, 10)
	b = strconv.AppendInt(append(b, `,"limit":`...), p.Limit, 10)
	b = strconv.AppendInt(append(b, `,"remaining":`...), p.Remaining, 10)
	b = appendJSONFloat(append(b, `,"reset_after":`...), p.ResetAfter)
	return append(b, '}')
}

func (r checkBody) appendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"result":`...), r.Result)
	if r.UserID != 0 {
		b = strconv.AppendInt(append(b, `,"user_id":`...), r.UserID, 10)
	}
	if r.Key != "" {
		b = appendJSONString(append(b, `,"key":`...), r.Key)
	}
	b = appendJSONString(append(b, `,"endpoint":`...), r.Endpoint)
	b = strconv.AppendInt(append(b, `,"count":`...), r.Count, 10)
	b = strconv.AppendInt(append(b, `,"limit":`...), r.Limit, 10)
	b = strconv.AppendInt(append(b, `,"remaining":`...), r.Remaining, 10)
	b = appendJSONFloat(append(b, `,"reset_after":`...), r.ResetAfter)
	return append(b, '}')
}

func (v v1Body) appendJSON(b []byte) []byte {
	b = strconv.AppendBool(append(b, `{"allowed":`...), v.Allowed)
	b = strconv.AppendInt(append(b, `,"limit":`...), v.Limit, 10)
	b = strconv.AppendInt(append(b, `,"remaining":`...), v.Remaining, 10)
	b = strconv.AppendInt(append(b, `,"count":`...), v.Count, 10)
	b = appendJSONFloat(append(b, `,"reset_after":`...), v.ResetAfter)
	b = appendJSONFloat(append(b, `,"retry_after":`...), v.RetryAfter)
	b = appendJSONString(append(b, `,"policy":`...), v.Policy)
	b = appendJSONString(append(b, `,"key":`...), v.Key)
	if v.ShadowDenied {
		b = append(b, `,"shadow_denied":true`...)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it: as is when it is
// printable ASCII that encoding/json leaves alone (no quote, backslash or
// HTML character), else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes it: the shortest
// decimal when 1e-6 <= |f| < 1e21 or f is 0, else through encoding/json
// (exponents, and the error for NaN and infinities, which then write null:
// httplimit.Seconds never returns them).
func appendJSONFloat(b []byte, f float64) []byte {
	if a := max(f, -f); a == 0 || a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	q, err := json.Marshal(f)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, q...)
}
