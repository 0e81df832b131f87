package blob

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The compact form of presigned requests. The URLs of one
// Presigner.PresignAll share everything but their path, X-Amz-SignedHeaders
// (which follows from the method) and X-Amz-Signature. So a set of them
// travels as one of its URLs in full, the base (a machine's INPUT_URL), and
// one line per other request (its OUTPUT_URLS):
//
//	METHOD BUCKET KEY SIGNATURE
//
// separated by single spaces, BUCKET and KEY URI-escaped as in the URL's
// path (so neither holds a space), SIGNATURE the 32 bytes of the
// X-Amz-Signature in unpadded base64url (43 characters, not 64 in hex).
// The request's URL is the base's with the path /BUCKET/KEY, the method's
// X-Amz-SignedHeaders and the signature in hex; it expires when the base
// does. Lines are separated by "\n". An unsigned base URL (no query: tests
// and benchmarks) has lines without a signature.

// The query parameters that differ between URLs signed together; the
// signer writes them last, in this order.
const (
	signedHeadersParam = "&X-Amz-SignedHeaders="
	signatureParam     = "&X-Amz-Signature="
)

// sharedURL is what every URL signed with a base shares.
type sharedURL struct {
	prefix string // scheme://host and the endpoint's path, before "/bucket/key"
	query  string // "?" and the query before X-Amz-SignedHeaders; "" if unsigned
	// expires is the base's expiry, read from its query (X-Amz-Date plus
	// X-Amz-Expires) when it has one.
	expires time.Time
}

// sharedOf splits base's URL around its object's path. Errors never quote
// the URL: it carries a signature.
func sharedOf(base Presigned) (sharedURL, error) {
	if base.Bucket == "" || base.Key == "" {
		return sharedURL{}, errors.New("the base URL's bucket and key are required")
	}
	path, query, signed := strings.Cut(base.URL, "?")
	var buf [256]byte
	objPath := append(appendEscaped(append(buf[:0], '/'), base.Bucket, true), '/')
	objPath = appendEscaped(objPath, base.Key, false)
	prefix := ""
	if n := len(path) - len(objPath); n >= 0 && path[n:] == string(objPath) {
		prefix = path[:n]
	}
	if !strings.Contains(prefix, "://") {
		return sharedURL{}, fmt.Errorf("the URL of %s is not a path-style URL of that object", addr(base.Bucket, base.Key))
	}
	s := sharedURL{prefix: prefix, expires: base.Expires}
	if !signed {
		return s, nil
	}
	i := strings.Index(query, signedHeadersParam)
	if i < 0 {
		return sharedURL{}, fmt.Errorf("the URL of %s has no X-Amz-SignedHeaders", addr(base.Bucket, base.Key))
	}
	s.query = base.URL[len(path) : len(path)+1+i]
	if t, ok := expiry(query[:i]); ok {
		s.expires = t
	}
	return s, nil
}

// expiry is when the signature of a presigned query expires.
func expiry(query string) (time.Time, bool) {
	var date, expires string
	for kv := range strings.SplitSeq(query, "&") {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "X-Amz-Date":
			date = v
		case "X-Amz-Expires":
			expires = v
		}
	}
	t, err := time.Parse("20060102T150405Z", date)
	if err != nil {
		return time.Time{}, false
	}
	n, err := strconv.Atoi(expires)
	if err != nil {
		return time.Time{}, false
	}
	return t.Add(time.Duration(n) * time.Second), true
}

// signature is the signature of u's URL if that URL is the one s and the
// line (u's method, escaped bucket and key) rebuild: "" for an unsigned one.
func (s sharedURL) signature(u Presigned, bucket, key []byte) (string, bool) {
	rest, ok := strings.CutPrefix(u.URL, s.prefix)
	n := 2 + len(bucket) + len(key)
	if !ok || len(rest) < n || rest[0] != '/' || rest[1+len(bucket)] != '/' ||
		rest[1:1+len(bucket)] != string(bucket) || rest[2+len(bucket):n] != string(key) {
		return "", false
	}
	rest = rest[n:]
	if s.query == "" {
		return "", rest == ""
	}
	for _, part := range [...]string{s.query, signedHeadersParam, signedHeaders(u.Method), signatureParam} {
		if rest, ok = strings.CutPrefix(rest, part); !ok {
			return "", false
		}
	}
	return rest, rest != ""
}

// AppendCompact appends the lines of urls, presigned together with base
// (one Presigner.PresignAll), in the compact form above. ParseCompact,
// given base, rebuilds them exactly. It fails on a request it could not
// rebuild: a URL of another form, headers or expiry other than its method's
// and the base's.
func AppendCompact(b []byte, base Presigned, urls []Presigned) ([]byte, error) {
	s, err := sharedOf(base)
	if err != nil {
		return b, err
	}
	for i, u := range urls {
		if i > 0 {
			b = append(b, '\n')
		}
		if !u.Method.Valid() || u.Bucket == "" || u.Key == "" {
			return b, fmt.Errorf("compacting %s: a method, bucket and key are required", addr(u.Bucket, u.Key))
		}
		b = append(b, u.Method...)
		b = append(b, ' ')
		bucket := len(b)
		b = appendEscaped(b, u.Bucket, true)
		b = append(b, ' ')
		key := len(b)
		b = appendEscaped(b, u.Key, false)
		sig, ok := s.signature(u, b[bucket:key-1], b[key:])
		var raw [sha256.Size]byte
		if !ok || sig != "" && !decodeLowerHex(raw[:], sig) || !u.Expires.Equal(s.expires) || !signsHeader(u.Object, u.Header) {
			return b, fmt.Errorf("compacting %s: not presigned together with %s", addr(u.Bucket, u.Key), addr(base.Bucket, base.Key))
		}
		if sig != "" {
			b = append(b, ' ')
			b = base64.RawURLEncoding.AppendEncode(b, raw[:])
		}
	}
	return b, nil
}

// signsHeader reports whether h is the header a request on o signs
// (SignedHeader).
func signsHeader(o Object, h map[string]string) bool {
	return maps.Equal(h, SignedHeader(o))
}

// ParseCompact rebuilds the requests whose lines AppendCompact wrote, given
// the same base (whose Expires may be zero: a signed base URL tells its
// expiry).
func ParseCompact(base Presigned, lines string) ([]Presigned, error) {
	s, err := sharedOf(base)
	if err != nil {
		return nil, err
	}
	out := make([]Presigned, 0, strings.Count(lines, "\n")+1)
	for n, line := 1, ""; lines != ""; n++ {
		line, lines, _ = strings.Cut(lines, "\n")
		method, rest, _ := strings.Cut(line, " ")
		bucketPath, rest, _ := strings.Cut(rest, " ")
		keyPath, sig, signed := strings.Cut(rest, " ")
		p := Presigned{Object: Object{Method: Method(method)}, Expires: s.expires}
		if !p.Method.Valid() {
			return nil, fmt.Errorf("line %d: not METHOD BUCKET KEY SIGNATURE, METHOD one of GET, PUT and PUT_IF_ABSENT", n)
		}
		if p.Bucket, err = unescapePath(bucketPath, true); err == nil {
			p.Key, err = unescapePath(keyPath, false)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		var raw [sha256.Size]byte
		if signed != (s.query != "") || signed && (base64.RawURLEncoding.EncodedLen(len(raw)) != len(sig) ||
			decodeSignature(raw[:], sig) != nil) {
			return nil, fmt.Errorf("line %d (%s): not METHOD BUCKET KEY SIGNATURE, the signature in base64url", n, addr(p.Bucket, p.Key))
		}
		u := make([]byte, 0, len(s.prefix)+len(line)+len(s.query)+80)
		u = append(u, s.prefix...)
		u = append(u, '/')
		u = append(u, bucketPath...)
		u = append(u, '/')
		u = append(u, keyPath...)
		if signed {
			u = append(u, s.query...)
			u = append(u, signedHeadersParam...)
			u = append(u, signedHeaders(p.Method)...)
			u = append(u, signatureParam...)
			u = hex.AppendEncode(u, raw[:])
		}
		p.URL = string(u)
		p.Header = SignedHeader(p.Object)
		out = append(out, p)
	}
	return out, nil
}

// unescapePath reverses appendEscaped, refusing anything appendEscaped
// would not have written (so that the URL is the one signed). The error
// does not quote s: a malformed line may hold anything.
func unescapePath(s string, slash bool) (string, error) {
	v, err := url.PathUnescape(s)
	if err != nil || v == "" || string(appendEscaped(make([]byte, 0, len(s)), v, slash)) != s {
		return "", errors.New("a bucket or key not escaped as in a URL path")
	}
	return v, nil
}

// decodeSignature decodes a line's signature into raw, which it fills
// exactly, refusing any but the one encoding AppendCompact writes.
func decodeSignature(raw []byte, sig string) error {
	n, err := base64.RawURLEncoding.Strict().Decode(raw, []byte(sig))
	if err == nil && n != len(raw) {
		err = errors.New("short signature")
	}
	return err
}

// decodeLowerHex decodes s, lower-case hex as a signature is written, into
// dst, which it must fill exactly.
func decodeLowerHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, lo := fromHex[s[2*i]], fromHex[s[2*i+1]]
		if hi|lo > 0xf {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// fromHex is the value of each lower-case hex digit; 0xff for other bytes.
var fromHex = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

func addr(bucket, key string) string { return "s3://" + bucket + "/" + key }
