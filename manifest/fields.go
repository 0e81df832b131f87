package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The documents are read in two steps: first each object one level deep into
// raw values, then field by field. Decoding straight into the structs would
// stop at the first type error and could not tell a missing field from a zero
// one; reading raw values lets every problem be reported, with the field's
// name and the offending value.

// object is a JSON object decoded one level deep. Its values alias the
// document being read instead of copying it (see rawRef).
type object map[string]rawRef

// rawRef is a JSON value that aliases the bytes it was decoded from, where
// json.RawMessage would copy them. Reading a document level by level with
// RawMessage copies it once per level, and every level is alive until the
// next is read: a 100,000-file manifest was held four or five times over.
// This is safe only because every rawRef is cut, by json.Unmarshal or the
// scanner (scan.go), out of a slice that is never modified and outlives
// the parse, or the Document that keeps rawRefs (the document handed to
// decodeOne, or a rawRef of it); never decode one with a json.Decoder,
// whose buffer is reused. Nothing parsed out of a rawRef keeps it: strings
// and numbers are decoded into values of their own.
type rawRef []byte

// UnmarshalJSON keeps data itself (see rawRef for why that is safe here).
func (r *rawRef) UnmarshalJSON(data []byte) error {
	*r = data
	return nil
}

// decodeOne reads data as exactly one JSON value; trailing data is an error
// because a body holding two documents is a client bug we should not guess
// about. what ("body", "manifest") starts the error message.
func decodeOne(data []byte, what string) (json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &malformedError{what: what, err: errors.New("it is empty")}
	}
	// The common case costs no copy: a valid document is returned as is.
	// The decoder below, which copies, is only there to explain the error.
	if json.Valid(data) {
		return bytes.TrimSpace(data), nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, &malformedError{what: what, err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &malformedError{what: what, err: errors.New("unexpected data after the first JSON value")}
	}
	return raw, nil
}

// asObject returns raw as an object, or false when it is another kind of
// JSON value (including null).
func asObject(raw json.RawMessage) (object, bool) {
	var obj object
	if !decodeObject(raw, &obj) {
		return nil, false
	}
	return obj, true
}

// decodeObject is asObject into *obj, emptied first (made when nil), so
// that a reader of many objects in turn reuses one map.
func decodeObject(raw json.RawMessage, obj *object) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	if *obj == nil {
		*obj = object{}
	} else {
		clear(*obj)
	}
	if scanObject(raw, *obj) {
		return true
	}
	clear(*obj)
	return json.Unmarshal(raw, obj) == nil
}

// lookup returns a field's value; null counts as missing, because producers
// in JavaScript write null and undefined interchangeably.
func lookup(obj object, name string) (json.RawMessage, bool) {
	raw := bytes.TrimSpace(obj[name])
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// maxShown bounds how much of an offending value goes into a message.
const maxShown = 60

// show renders a value for a message: strings quoted Go-style, anything else
// as compact JSON, both cut to maxShown characters.
func show(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return quote(s)
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		raw = buf.Bytes()
	}
	return truncate(string(raw))
}

// quote is strconv.Quote of s cut to maxShown characters.
func quote(s string) string {
	return strconv.Quote(truncate(s))
}

func truncate(s string) string {
	if utf8.RuneCountInString(s) <= maxShown {
		return s
	}
	return string([]rune(s)[:maxShown]) + "..."
}

// The readers below report a problem as "<at><name> ..." and return false
// when the field is unusable, so callers can skip checks that depend on it
// instead of piling follow-on errors onto one mistake. at locates the object
// ("", `file staging/x.pdf: `, "custom_prompts.").

// str reads a required string field.
func (p *problems) str(at string, obj object, name string) (string, bool) {
	raw, ok := lookup(obj, name)
	if !ok {
		p.addf("%s%s is required", at, name)
		return "", false
	}
	s, ok := unquote(raw)
	if !ok {
		p.addf("%s%s must be a string, got %s", at, name, show(raw))
		return "", false
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD silently, and a
	// control character (NUL above all) fails the database's COPY later.
	if !utf8.Valid(raw) {
		p.addf("%s%s is not valid UTF-8", at, name)
		return "", false
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		p.addf("%s%s must not contain control characters (%U at byte %d)", at, name, []rune(s[i:])[0], i)
		return "", false
	}
	return s, true
}

// unquote decodes raw as a JSON string, as json.Unmarshal does; false
// when it is another kind of value. A string without escapes, valid
// UTF-8, is its bytes, found without json.Unmarshal's checks (see
// scanObject).
func unquote(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if body := raw[1 : len(raw)-1]; raw[len(raw)-1] == '"' && bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// key checks an object key (or, with prefix, a key prefix, which ends in
// "/"): segments separated by "/", none empty, "." or "..", no leading "/",
// so that a key cannot climb out of the prefix it starts with.
func (p *problems) key(at, name, key string, prefix bool) bool {
	body := key
	if prefix {
		if !strings.HasSuffix(key, "/") {
			p.addf("%s%s %s must end with \"/\"", at, name, quote(key))
			return false
		}
		body = strings.TrimSuffix(key, "/")
	}
	for seg := range strings.SplitSeq(body, "/") {
		if seg == "" || seg == "." || seg == ".." {
			p.addf("%s%s %s has an empty, \".\" or \"..\" path segment", at, name, quote(key))
			return false
		}
	}
	return true
}

// text reads a required string field that must not be empty.
func (p *problems) text(at string, obj object, name string) (string, bool) {
	s, ok := p.str(at, obj, name)
	if ok && s == "" {
		p.addf("%s%s is required", at, name)
		return "", false
	}
	return s, ok
}

// optStr reads an optional string field; missing and null read as "".
func (p *problems) optStr(at string, obj object, name string) string {
	raw, ok := lookup(obj, name)
	if !ok {
		return ""
	}
	s, ok := unquote(raw)
	if !ok {
		p.addf("%s%s must be a string, got %s", at, name, show(raw))
		return ""
	}
	return s
}

// count reads a required non-negative integer. Only integer syntax is
// accepted: 3.0 and 1e3 are numbers a JavaScript producer never writes for a
// count, so they point at a bug upstream.
func (p *problems) count(at string, obj object, name string) (int64, bool) {
	raw, ok := lookup(obj, name)
	if !ok {
		p.addf("%s%s is required", at, name)
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	switch {
	case err == nil && n >= 0:
		return n, true
	case errors.Is(err, strconv.ErrRange) && raw[0] != '-':
		p.addf("%s%s is too large, got %s", at, name, show(raw))
	default:
		p.addf("%s%s must be a non-negative integer, got %s", at, name, show(raw))
	}
	return 0, false
}

// timestamp reads a required RFC 3339 timestamp, the ISO 8601 profile that
// JavaScript's Date.toISOString writes ("2025-10-29T19:15:30.123Z").
func (p *problems) timestamp(at string, obj object, name string) (time.Time, bool) {
	raw, ok := lookup(obj, name)
	if !ok {
		p.addf("%s%s is required", at, name)
		return time.Time{}, false
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, true
		}
	}
	// Epoch numbers are the likely mistake here, so the message says which
	// form is wanted rather than just "must be a string".
	p.addf("%s%s must be an ISO 8601 timestamp, got %s", at, name, show(raw))
	return time.Time{}, false
}

// obj reads a required JSON object field.
func (p *problems) obj(at string, o object, name string) (object, bool) {
	raw, ok := lookup(o, name)
	if !ok {
		p.addf("%s%s is required", at, name)
		return nil, false
	}
	v, ok := asObject(raw)
	if !ok {
		p.addf("%s%s must be a JSON object, got %s", at, name, show(raw))
		return nil, false
	}
	return v, true
}

// array reads a required JSON array field.
func (p *problems) array(at string, o object, name string) ([]json.RawMessage, bool) {
	raw, ok := lookup(o, name)
	if !ok {
		p.addf("%s%s is required", at, name)
		return nil, false
	}
	refs, ok := splitArray(raw)
	if !ok {
		p.addf("%s%s must be an array, got %s", at, name, show(raw))
		return nil, false
	}
	v := make([]json.RawMessage, len(refs))
	for i, r := range refs {
		v[i] = json.RawMessage(r)
	}
	return v, true
}

// splitArray returns raw's elements, aliasing it, or false when raw is not
// a JSON array.
func splitArray(raw json.RawMessage) ([]rawRef, bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	if refs, ok := scanArray(raw); ok {
		return refs, true
	}
	var refs []rawRef
	return refs, json.Unmarshal(raw, &refs) == nil
}

// optBool reads an optional boolean; missing and null read as def.
func (p *problems) optBool(at string, o object, name string, def bool) bool {
	raw, ok := lookup(o, name)
	if !ok {
		return def
	}
	switch string(raw) {
	case "true":
		return true
	case "false":
		return false
	}
	p.addf("%s%s must be a boolean, got %s", at, name, show(raw))
	return def
}
