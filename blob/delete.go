package blob

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// MaxDeleteKeys is the most keys one Delete takes (S3's DeleteObjects
// limit), and the most a page of List holds.
const MaxDeleteKeys = 1000

// Deleter lists and deletes objects, as retention does with a finished
// batch's staging objects (RETENTION_STAGING). The S3 store implements it;
// a worker's URL store, which holds no credentials, does not.
type Deleter interface {
	// List calls fn with the keys under prefix, a page of at most
	// MaxDeleteKeys at a time, in key order, until there are no more or
	// fn returns an error (which List returns). A missing bucket matches
	// ErrNotFound.
	List(ctx context.Context, bucket, prefix string, fn func(keys []string) error) error
	// Delete deletes up to MaxDeleteKeys keys in one request. A key that
	// does not exist is not an error; the first key the server refused
	// to delete is.
	Delete(ctx context.Context, bucket string, keys []string) error
}

var _ Deleter = (*S3)(nil)

// List implements Deleter.
func (s *S3) List(ctx context.Context, bucket, prefix string, fn func(keys []string) error) error {
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(MaxDeleteKeys),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return wrapErr("listing", bucket, prefix, err)
		}
		keys := make([]string, 0, len(page.Contents))
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		if len(keys) == 0 {
			continue
		}
		if err := fn(keys); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Deleter.
func (s *S3) Delete(ctx context.Context, bucket string, keys []string) error {
	switch {
	case len(keys) == 0:
		return nil
	case len(keys) > MaxDeleteKeys:
		return fmt.Errorf("deleting %d objects from s3://%s at once: at most %d", len(keys), bucket, MaxDeleteKeys)
	}
	objs := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: aws.String(bucket),
		Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
	})
	if err != nil {
		return wrapErrf(err, "deleting %d objects from s3://%s (first %s)", len(keys), bucket, keys[0])
	}
	for _, e := range out.Errors {
		if aws.ToString(e.Code) == "NoSuchKey" {
			continue
		}
		return wrapErr("deleting", bucket, aws.ToString(e.Key), fmt.Errorf("%s: %s", aws.ToString(e.Code), aws.ToString(e.Message)))
	}
	return nil
}
