package blob

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// NewS3WithOptions is NewS3 with extra SDK options, for tests that must not
// wait for the SDK's retries (fault injection).
func NewS3WithOptions(cfg S3Config, optFns ...func(*s3.Options)) (*S3, error) {
	return newS3(cfg, optFns...)
}

// CopySource exposes copySource to the tests.
var CopySource = copySource

// PresignAt is Presign with the signing time given.
func PresignAt(s *S3, o Object, ttl time.Duration, now time.Time) (Presigned, error) {
	return s.presignAt(o, ttl, now)
}

// PresignCompactAt is PresignCompact with the signing time given.
func PresignCompactAt(s *S3, base Object, objs []Object, ttl time.Duration, now time.Time) (Presigned, string, error) {
	return s.presignCompactAt(base, objs, ttl, now)
}
