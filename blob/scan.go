package blob

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Listed is an object a Scan found: its key, size and ETag.
type Listed struct {
	Key string
	Info
}

// Scanner lists objects with their size and ETag from a point on, as the
// documents' scan of DOCUMENTS_PREFIX does with its durable cursor. The
// S3 store implements it.
type Scanner interface {
	// Scan calls fn with the objects under prefix whose keys sort after
	// after ("" for all), a page of at most MaxDeleteKeys at a time, in
	// key order, until there are no more or fn returns an error (which
	// Scan returns). A missing bucket matches ErrNotFound.
	Scan(ctx context.Context, bucket, prefix, after string, fn func(page []Listed) error) error
}

var _ Scanner = (*S3)(nil)

// Scan implements Scanner.
func (s *S3) Scan(ctx context.Context, bucket, prefix, after string, fn func(page []Listed) error) error {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(MaxDeleteKeys)}
	if after != "" {
		in.StartAfter = aws.String(after)
	}
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return wrapErr("listing", bucket, prefix, err)
		}
		out := make([]Listed, 0, len(page.Contents))
		for _, o := range page.Contents {
			out = append(out, Listed{Key: aws.ToString(o.Key), Info: Info{Size: aws.ToInt64(o.Size), ETag: strings.Trim(aws.ToString(o.ETag), `"`)}})
		}
		if len(out) == 0 {
			continue
		}
		if err := fn(out); err != nil {
			return err
		}
	}
	return nil
}
