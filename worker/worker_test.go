package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/worker"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func baseEnv() map[string]string {
	return map[string]string{
		"TASK_ID":        "tiff_1",
		"BATCH_ID":       "01BATCH",
		"CALLBACK_URL":   "http://orchestrator/callback/01BATCH/tiff_1",
		"CALLBACK_TOKEN": "secret",
		"INPUT_R2_KEY":   "staging/01BATCH/photo.tif",
		"INPUT_URL":      "http://s3.test/arke-staging/staging/01BATCH/photo.tif?X-Amz-Signature=sig",
		"R2_BUCKET":      "arke-staging",
	}
}

func TestParseEnv(t *testing.T) {
	t.Parallel()

	t.Run("TIFFDefaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := worker.ParseEnv(worker.KindTIFF, env(baseEnv()))
		require.NoError(t, err)
		require.Equal(t, worker.Callback{TaskID: "tiff_1", BatchID: "01BATCH", URL: "http://orchestrator/callback/01BATCH/tiff_1", Token: "secret",
			Backoff: worker.DefaultBackoff}, cfg.Callback)
		require.Equal(t, 15*time.Minute, cfg.Callback.Backoff.Window)
		require.Equal(t, "staging/01BATCH/photo.tif", cfg.Input.Key)
		require.Equal(t, "arke-staging", cfg.Bucket)
		require.Equal(t, 90, cfg.JPEGQuality)
		require.Equal(t, "http://s3.test/arke-staging/staging/01BATCH/photo.tif?X-Amz-Signature=sig", cfg.InputURL)
		require.Empty(t, cfg.OutputURLs)
		require.Empty(t, cfg.Variants, "variants are the image worker's")
	})

	t.Run("ImageDefaults", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		e["ARCHIVE_BUCKET"] = "arke-archive"
		e["CDN_PUBLIC_URL"] = "https://cdn.example/"
		e["INPUT_CID"] = "bafy"
		cfg, err := worker.ParseEnv(worker.KindImage, env(e))
		require.NoError(t, err)
		require.Equal(t, "arke-cdn", cfg.CDNBucket)
		require.Equal(t, "https://cdn.example", cfg.CDNPublicURL, "trailing slash trimmed")
		require.Equal(t, worker.DefaultVariants, cfg.Variants)
		require.Equal(t, "bafy", cfg.Input.CID)
	})

	t.Run("VariantSizes", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		e["ARCHIVE_BUCKET"], e["CDN_PUBLIC_URL"], e["VARIANT_SIZES"] = "a", "http://cdn", " 100, 400,1200"
		cfg, err := worker.ParseEnv(worker.KindImage, env(e))
		require.NoError(t, err)
		require.Equal(t, []worker.Variant{{"thumbnail", 100}, {"medium", 400}, {"large", 1200}}, cfg.Variants)

		for _, bad := range []string{"100,400", "100,x,1200", "400,100,1200", "0,1,2"} {
			e["VARIANT_SIZES"] = bad
			_, err := worker.ParseEnv(worker.KindImage, env(e))
			require.ErrorContains(t, err, "VARIANT_SIZES", bad)
		}
	})

	t.Run("OutputURLs", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		const query = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=id%2F20300102%2Fauto%2Fs3%2Faws4_request" +
			"&X-Amz-Date=20300102T020405Z&X-Amz-Expires=3600&X-Amz-SignedHeaders="
		e["INPUT_URL"] = "http://s3.test/arke-staging/staging/01BATCH/photo.tif" + query + "host&X-Amz-Signature=ab12"
		// Signatures in base64url, 00ff... and 0000... in hex.
		e["OUTPUT_URLS"] = "PUT_IF_ABSENT arke-staging staging/01BATCH/photo%201.jpg AP8A_wD_AP8A_wD_AP8A_wD_AP8A_wD_AP8A_wD_AP8\n" +
			"PUT arke-cdn v/a.jpg " + strings.Repeat("A", 43) + "\n"
		cfg, err := worker.ParseEnv(worker.KindTIFF, env(e))
		require.NoError(t, err)
		expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		require.Equal(t, []blob.Presigned{{
			Object: blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "arke-staging", Key: "staging/01BATCH/photo 1.jpg"},
			URL:    "http://s3.test/arke-staging/staging/01BATCH/photo%201.jpg" + query + "content-type%3Bhost%3Bif-none-match&X-Amz-Signature=" + strings.Repeat("00ff", 16),
			Header: map[string]string{"Content-Type": "image/jpeg", "If-None-Match": "*"}, Expires: expires,
		}, {
			Object: blob.Object{Method: blob.MethodPut, Bucket: "arke-cdn", Key: "v/a.jpg"},
			URL:    "http://s3.test/arke-cdn/v/a.jpg" + query + "content-type%3Bhost&X-Amz-Signature=" + strings.Repeat("0", 64),
			Header: map[string]string{"Content-Type": "image/jpeg"}, Expires: expires,
		}}, cfg.OutputURLs)
	})

	t.Run("BadURLs", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		e["INPUT_URL"] = "s3://arke-staging/x?X-Amz-Signature=s1gnature"
		e["OUTPUT_URLS"] = "PUT arke-staging staging/01BATCH/photo.jpg"
		_, err := worker.ParseEnv(worker.KindTIFF, env(e))
		var envErr *worker.EnvError
		require.ErrorAs(t, err, &envErr)
		require.Len(t, envErr.Invalid, 2)
		require.ErrorContains(t, err, "INPUT_URL: not an http:// or https:// URL")
		require.ErrorContains(t, err, "OUTPUT_URLS: the URL of s3://arke-staging/staging/01BATCH/photo.tif is not a path-style URL of that object")
		require.NotContains(t, err.Error(), "s1gnature", "a URL's signature is never quoted")

		e = baseEnv()
		e["OUTPUT_URLS"] = `[{"method":"PUT","url":"http://s3.test/arke-staging/x?X-Amz-Signature=s1gnature"}]`
		_, err = worker.ParseEnv(worker.KindTIFF, env(e))
		require.ErrorContains(t, err, "OUTPUT_URLS: ")
		require.NotContains(t, err.Error(), "s1gnature", "a URL's signature is never quoted")
	})

	t.Run("NoStorageCredentials", func(t *testing.T) {
		t.Parallel()
		// The old contract's keys are ignored, not required.
		e := baseEnv()
		e["R2_ACCESS_KEY_ID"], e["R2_SECRET_ACCESS_KEY"] = "", ""
		_, err := worker.ParseEnv(worker.KindTIFF, env(e))
		require.NoError(t, err)
	})

	t.Run("EveryProblemNamed", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		delete(e, "R2_BUCKET")
		delete(e, "INPUT_URL")
		delete(e, "INPUT_R2_KEY")
		e["JPEG_QUALITY"] = "101"
		cfg, err := worker.ParseEnv(worker.KindImage, env(e))
		var envErr *worker.EnvError
		require.ErrorAs(t, err, &envErr)
		require.Equal(t, []string{"INPUT_R2_KEY", "R2_BUCKET", "INPUT_URL", "ARCHIVE_BUCKET", "CDN_PUBLIC_URL"}, envErr.Missing)
		require.Len(t, envErr.Invalid, 1)
		require.Contains(t, err.Error(), "JPEG_QUALITY")
		require.True(t, cfg.Callback.Complete(), "the callback can still report the problem")
	})

	t.Run("NoCallback", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		delete(e, "CALLBACK_TOKEN")
		cfg, err := worker.ParseEnv(worker.KindTIFF, env(e))
		require.ErrorContains(t, err, "CALLBACK_TOKEN")
		require.False(t, cfg.Callback.Complete())
	})
}

// orchestrator is a stand-in for the orchestrator's callback endpoint: it
// records each request and answers with the next status of a script (the
// last one repeating).
type orchestrator struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	bodies   []json.RawMessage
	headers  []http.Header
}

func newOrchestrator(t *testing.T, statuses ...int) *orchestrator {
	o := &orchestrator{statuses: statuses}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		o.bodies = append(o.bodies, body)
		o.headers = append(o.headers, r.Header.Clone())
		status := o.statuses[min(len(o.bodies), len(o.statuses))-1]
		o.mu.Unlock()
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
		if status >= 400 {
			_, _ = w.Write([]byte(`{"error": "scripted ` + http.StatusText(status) + `"}`))
		}
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *orchestrator) requests() []json.RawMessage {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]json.RawMessage(nil), o.bodies...)
}

func (o *orchestrator) callback() worker.Callback {
	return worker.Callback{
		TaskID: "tiff_1", BatchID: "01BATCH", URL: o.URL + "/callback/01BATCH/tiff_1", Token: "tok",
		Backoff: worker.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 4},
	}
}

func TestCallbackPost(t *testing.T) {
	t.Parallel()
	body := map[string]string{"status": "success"}

	t.Run("RetriesAfter503", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 503, 502, 200)
		cb := o.callback()
		require.NoError(t, cb.Post(t.Context(), body))
		reqs := o.requests()
		require.Len(t, reqs, 3)
		require.JSONEq(t, `{"status":"success"}`, string(reqs[2]))
		require.Equal(t, "Bearer tok", o.headers[0].Get("Authorization"))
		require.Equal(t, "application/json", o.headers[0].Get("Content-Type"))
	})

	t.Run("HonoursRetryAfterOn429", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 429, 200)
		cb := o.callback()
		cb.Backoff.Max = 2 * time.Second
		start := time.Now()
		require.NoError(t, cb.Post(t.Context(), body))
		require.GreaterOrEqual(t, time.Since(start), time.Second)
		require.Len(t, o.requests(), 2)
	})

	t.Run("StopsOn409", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 409)
		cb := o.callback()
		err := cb.Post(t.Context(), body)
		require.ErrorIs(t, err, worker.ErrNotWanted)
		require.ErrorContains(t, err, "scripted Conflict")
		require.Len(t, o.requests(), 1)
	})

	t.Run("NoRetryOnOther4xx", func(t *testing.T) {
		t.Parallel()
		for _, code := range []int{400, 401, 404, 413} {
			o := newOrchestrator(t, code)
			cb := o.callback()
			err := cb.Post(t.Context(), body)
			var se *worker.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, code, se.Code)
			require.Equal(t, "scripted "+http.StatusText(code), se.Message)
			require.Len(t, o.requests(), 1, "status %d", code)
		}
	})

	t.Run("GivesUpAfterAttempts", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 500)
		cb := o.callback()
		err := cb.Post(t.Context(), body)
		require.ErrorContains(t, err, "after 4 attempts")
		require.Len(t, o.requests(), 4)
	})

	t.Run("RetriesNetworkErrors", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		cb := o.callback()
		o.Close() // nothing listens any more
		err := cb.Post(t.Context(), body)
		require.ErrorContains(t, err, "after 4 attempts")
		require.ErrorContains(t, err, "connect")
	})

	t.Run("PostCallback", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 204)
		require.NoError(t, worker.PostCallback(t.Context(), o.URL, "tok", json.RawMessage(`{"a":1}`)))
		require.JSONEq(t, `{"a":1}`, string(o.requests()[0]))
	})
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("SuccessBody", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			return struct {
				OutputR2Key string `json:"output_r2_key"`
			}{"staging/01BATCH/photo.jpg"}, nil
		})
		require.NoError(t, err)
		require.JSONEq(t, `{"task_id":"tiff_1","batch_id":"01BATCH","status":"success","output_r2_key":"staging/01BATCH/photo.jpg"}`, string(o.requests()[0]))
	})

	t.Run("ErrorBody", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			return nil, errors.New("decoding TIFF staging/01BATCH/x.tif: bad")
		})
		require.NoError(t, err, "the error was reported")
		require.JSONEq(t, `{"task_id":"tiff_1","batch_id":"01BATCH","status":"error","error":"decoding TIFF staging/01BATCH/x.tif: bad","retryable":false}`, string(o.requests()[0]))
	})

	t.Run("TransientErrorRetryable", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			return nil, fmt.Errorf("downloading input: %w", &worker.HTTPError{StatusCode: http.StatusServiceUnavailable})
		})
		require.NoError(t, err)
		var got worker.ErrorBody
		require.NoError(t, json.Unmarshal(o.requests()[0], &got))
		require.True(t, got.Retryable, "an S3 503 is worth another attempt: %s", got.Error)
	})

	t.Run("PanicReported", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			m := map[string]map[string]int{}
			m["absent"]["boom"] = 1 // a nil map: panics
			return nil, nil
		})
		require.NoError(t, err)
		var got worker.ErrorBody
		require.NoError(t, json.Unmarshal(o.requests()[0], &got))
		require.Equal(t, "error", got.Status)
		require.Contains(t, got.Error, "worker panicked: assignment to entry in nil map")
	})

	t.Run("LongErrorTruncated", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		require.NoError(t, worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			return nil, errors.New(strings.Repeat("é", 5000))
		}))
		var got worker.ErrorBody
		require.NoError(t, json.Unmarshal(o.requests()[0], &got))
		require.Less(t, len(got.Error), 2100)
	})

	t.Run("InterruptedStillReports", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 200)
		ctx, cancel := context.WithCancelCause(t.Context())
		err := worker.Run(ctx, o.callback(), nil, func(ctx context.Context) (any, error) {
			cancel(errors.New("received terminated"))
			<-ctx.Done()
			return nil, ctx.Err()
		})
		require.NoError(t, err)
		var got worker.ErrorBody
		require.NoError(t, json.Unmarshal(o.requests()[0], &got))
		require.Equal(t, "interrupted (received terminated): context canceled", got.Error)
	})

	t.Run("RefusedResultReportedAsError", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 400, 200)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			return map[string]int{"output_file_size": 1}, nil
		})
		require.NoError(t, err)
		reqs := o.requests()
		require.Len(t, reqs, 2)
		var got worker.ErrorBody
		require.NoError(t, json.Unmarshal(reqs[1], &got))
		require.Equal(t, "error", got.Status)
		require.Contains(t, got.Error, "orchestrator refused the worker's result: callback answered 400 Bad Request: scripted Bad Request")
	})

	t.Run("TooLargeResultReportedAsError", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 413, 200)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) {
			return map[string]int{"output_file_size": 1}, nil
		})
		require.NoError(t, err)
		reqs := o.requests()
		require.Len(t, reqs, 2, "the task fails now, not at its timeout")
		var got worker.ErrorBody
		require.NoError(t, json.Unmarshal(reqs[1], &got))
		require.Contains(t, got.Error, "orchestrator refused the worker's result: callback answered 413")
	})

	t.Run("NotWantedIsDone", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 409)
		require.NoError(t, worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) { return nil, nil }))
		require.Len(t, o.requests(), 1)
	})

	t.Run("UndeliveredIsAnError", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 401)
		err := worker.Run(t.Context(), o.callback(), nil, func(context.Context) (any, error) { return nil, nil })
		require.ErrorContains(t, err, "401")
	})
}

func TestPutUnique(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	bucket := srv.NewBucket(t)
	ctx := t.Context()
	put := func(key, content string) {
		require.NoError(t, store.Put(ctx, bucket, key, strings.NewReader(content), int64(len(content)), "image/jpeg"))
	}
	get := func(key string) string {
		b, err := store.Get(ctx, bucket, key)
		require.NoError(t, err)
		return string(b)
	}

	key, err := worker.PutUnique(ctx, store, bucket, "staging/b/free.jpg", []byte("new"), "image/jpeg")
	require.NoError(t, err)
	require.Equal(t, "staging/b/free.jpg", key)

	put("staging/b/photo.jpg", "someone else's")
	put("staging/b/photo-1.jpg", "another")
	key, err = worker.PutUnique(ctx, store, bucket, "staging/b/photo.jpg", []byte("mine"), "image/jpeg")
	require.NoError(t, err)
	require.Equal(t, "staging/b/photo-2.jpg", key)
	require.Equal(t, "someone else's", get("staging/b/photo.jpg"), "never overwritten")
	require.Equal(t, "another", get("staging/b/photo-1.jpg"), "never overwritten")
	require.Equal(t, "mine", get("staging/b/photo-2.jpg"))

	// A retry with the same bytes finds its own earlier upload.
	key, err = worker.PutUnique(ctx, store, bucket, "staging/b/photo.jpg", []byte("mine"), "image/jpeg")
	require.NoError(t, err)
	require.Equal(t, "staging/b/photo-2.jpg", key)
}

func TestDownload(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	bucket := srv.NewBucket(t)
	content := bytes.Repeat([]byte("tiff"), 1000)
	require.NoError(t, store.Put(t.Context(), bucket, "staging/b/x.tif", bytes.NewReader(content), int64(len(content)), ""))

	path, n, err := worker.Download(t.Context(), store, bucket, "staging/b/x.tif", t.TempDir())
	require.NoError(t, err)
	require.Equal(t, int64(len(content)), n)
	require.FileExists(t, path)

	_, _, err = worker.Download(t.Context(), store, bucket, "staging/b/missing.tif", t.TempDir())
	require.EqualError(t, err, "input s3://"+bucket+"/staging/b/missing.tif does not exist")
}
