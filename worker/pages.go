package worker

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Pages converts pages 1..n one after another and uploads each converted
// page while the next ones convert, with at most inFlight uploads at once
// (which also bounds the converted pages held in memory). The first error
// stops the work and is returned; a failed upload cancels the context the
// conversions get, so an upload's error is returned before the conversion
// error it may have caused. Conversion and upload times go to timer.
func Pages[T any](ctx context.Context, n, inFlight int, timer *Timer,
	convert func(ctx context.Context, page int) (T, error),
	upload func(ctx context.Context, page int, converted T) error,
) error {
	var (
		mu       sync.Mutex
		uploadNS time.Duration
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	var convErr error
	for page := 1; page <= n && gctx.Err() == nil; page++ {
		t := time.Now()
		converted, err := convert(gctx, page)
		timer.Conversion += time.Since(t)
		if err != nil {
			convErr = err
			break
		}
		g.Go(func() error {
			t := time.Now()
			err := upload(gctx, page, converted)
			mu.Lock()
			uploadNS += time.Since(t)
			mu.Unlock()
			return err
		})
	}
	uploadErr := g.Wait()
	timer.Upload += uploadNS
	switch {
	case uploadErr != nil:
		return uploadErr
	case convErr != nil:
		return convErr
	}
	return ctx.Err()
}
