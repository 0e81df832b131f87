package blob

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// presigner signs S3 requests with SigV4 query-string authentication
// (AWS's "Authenticating Requests: Using Query Parameters"), for path-style
// URLs and an unsigned payload. It does only that, with few allocations,
// so that a launch, which presigns several URLs, pays a few microseconds
// for each: the SDK's general signer costs several times as much
// (BenchmarkPresign; TestPresignMatchesTheSDK checks that both sign alike).
type presigner struct {
	origin   string // scheme://host
	host     string
	basePath string // the endpoint's path, escaped, no trailing "/"
	region   string
	// credential is the escaped access key ID and "%2F", the start of
	// X-Amz-Credential; scope ends it after the day.
	credential, scope string
	secret            string
	key               atomic.Pointer[dayKey]
}

// dayKey is the signing key derived from the secret for one day (UTC), as
// the HMAC's inner and outer key blocks: sign hashes them with the message
// itself, in buffers that stay on the stack.
type dayKey struct {
	day        string // 20060102
	ipad, opad [sha256.BlockSize]byte
}

// unsignedPayload is the payload hash of a presigned request: the body is
// whatever the holder sends.
const unsignedPayload = "UNSIGNED-PAYLOAD"

func newPresigner(endpoint, region, accessKeyID, secret string) (*presigner, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	return &presigner{
		origin: u.Scheme + "://" + u.Host, host: u.Host, basePath: strings.TrimRight(u.EscapedPath(), "/"),
		region:     region,
		credential: string(appendEscaped(nil, accessKeyID, true)) + "%2F",
		scope:      string(appendEscaped(nil, "/"+region+"/s3/aws4_request", true)),
		secret:     secret,
	}, nil
}

// sign returns the URL of o's request signed at now for ttl (whole
// seconds). A write's signature covers its Content-Type (ContentTypeOf),
// a MethodPutIfAbsent's If-None-Match: * too.
func (p *presigner) sign(o Object, ttl time.Duration, now *amzDate) string {
	// Built on the stack and copied once, at its length.
	var ubuf [768]byte
	u, _ := p.appendSigned(ubuf[:0], o, ttl, now)
	return string(u)
}

// appendSigned appends the URL of o's request signed at now for ttl to u,
// and returns it with the signature.
func (p *presigner) appendSigned(u []byte, o Object, ttl time.Duration, now *amzDate) ([]byte, [sha256.Size]byte) {
	stamp := now[:]
	day := stamp[:8]
	ifAbsent := o.Method == MethodPutIfAbsent

	// The URL, whose path and query (its parameters in sorted order) are
	// also the canonical request's.
	u = append(u, p.origin...)
	pathStart := len(u)
	u = append(u, p.basePath...)
	u = append(u, '/')
	u = appendEscaped(u, o.Bucket, true)
	u = append(u, '/')
	u = appendEscaped(u, o.Key, false)
	pathEnd := len(u)
	u = append(u, "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="...)
	u = append(u, p.credential...)
	u = append(u, day...)
	u = append(u, p.scope...)
	u = append(u, "&X-Amz-Date="...)
	u = append(u, stamp...)
	u = append(u, "&X-Amz-Expires="...)
	u = strconv.AppendInt(u, int64(ttl/time.Second), 10)
	u = append(u, "&X-Amz-SignedHeaders="...)
	u = append(u, signedHeaders(o.Method)...)
	queryStart, queryEnd := pathEnd+1, len(u)

	var cbuf [1024]byte
	c := append(cbuf[:0], o.Method.HTTPMethod()...)
	c = append(c, '\n')
	c = append(c, u[pathStart:pathEnd]...)
	c = append(c, '\n')
	c = append(c, u[queryStart:queryEnd]...)
	c = append(c, '\n')
	if o.Method != MethodGet {
		c = append(c, "content-type:"...)
		c = append(c, ContentTypeOf(o.Key)...)
		c = append(c, '\n')
	}
	c = append(c, "host:"...)
	c = append(c, p.host...)
	switch {
	case ifAbsent:
		c = append(c, "\nif-none-match:*\n\ncontent-type;host;if-none-match\n"...)
	case o.Method == MethodPut:
		c = append(c, "\n\ncontent-type;host\n"...)
	default:
		c = append(c, "\n\nhost\n"...)
	}
	c = append(c, unsignedPayload...)
	canonical := sha256.Sum256(c)

	// HMAC-SHA256(key, string to sign), by its definition.
	k := p.dayKey(day)
	var inner [sha256.BlockSize + 160]byte
	m := append(inner[:0], k.ipad[:]...)
	m = append(m, "AWS4-HMAC-SHA256\n"...)
	m = append(m, stamp...)
	m = append(m, '\n')
	m = append(m, day...)
	m = append(m, '/')
	m = append(m, p.region...)
	m = append(m, "/s3/aws4_request\n"...)
	m = hex.AppendEncode(m, canonical[:])
	innerSum := sha256.Sum256(m)
	var outer [sha256.BlockSize + sha256.Size]byte
	copy(outer[:], k.opad[:])
	copy(outer[sha256.BlockSize:], innerSum[:])
	signature := sha256.Sum256(outer[:])

	u = append(u, "&X-Amz-Signature="...)
	return hex.AppendEncode(u, signature[:]), signature
}

// amzDate is a signing time as X-Amz-Date has it (20060102T150405Z).
type amzDate [16]byte

func amzDateOf(t time.Time) (d amzDate) {
	t.UTC().AppendFormat(d[:0], "20060102T150405Z")
	return d
}

// signedHeaders is the value of X-Amz-SignedHeaders for a request made with
// m, escaped: Host; Content-Type for a write; If-None-Match for
// MethodPutIfAbsent.
func signedHeaders(m Method) string {
	switch m {
	case MethodPutIfAbsent:
		return "content-type%3Bhost%3Bif-none-match"
	case MethodPut:
		return "content-type%3Bhost"
	}
	return "host"
}

// dayKey is the day's key, derived once a day.
func (p *presigner) dayKey(day []byte) *dayKey {
	if k := p.key.Load(); k != nil && k.day == string(day) {
		return k
	}
	key := hmacSHA256([]byte("AWS4"+p.secret), string(day))
	for _, s := range []string{p.region, "s3", "aws4_request"} {
		key = hmacSHA256(key, s)
	}
	k := &dayKey{day: string(day)}
	copy(k.ipad[:], key) // the key (32 bytes) is shorter than a block
	copy(k.opad[:], key)
	for i := range k.ipad {
		k.ipad[i] ^= 0x36
		k.opad[i] ^= 0x5c
	}
	p.key.Store(k)
	return k
}

func hmacSHA256(key []byte, data string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(data))
	return mac.Sum(nil)
}

// appendEscaped appends s URI-encoded as SigV4 wants it: every byte but
// the unreserved characters (A-Z a-z 0-9 - _ . ~) as %XX, and "/" too when
// slash is true (a query value, a bucket) but not in a key, whose slashes
// separate its path's segments. Runs that need no escaping, most keys
// whole, are copied at once.
func appendEscaped(b []byte, s string, slash bool) []byte {
	const hexDigits = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved[c] || c == '/' && !slash {
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		start = i + 1
	}
	return append(b, s[start:]...)
}

// unreserved marks the bytes a URI leaves unescaped.
var unreserved = func() (t [256]bool) {
	for c := range t {
		t[c] = 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~'
	}
	return t
}()
