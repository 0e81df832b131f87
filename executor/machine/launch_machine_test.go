package machine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
)

// TestMachineSpecFollowsTheRegistry: every registered phase's machines get
// its app, image and guest, its own settings (as set in the environment)
// and the shared settings it names, with nothing phase-specific in the launcher.
func TestMachineSpecFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	for _, p := range phases.All() {
		for _, st := range p.Spec().Settings {
			env[st.Name] = strconv.Itoa(st.Max) // not the default
		}
	}
	cfg := loadConfig(t, env)
	shared := map[string]string{"CDN_PUBLIC_URL": "https://cdn.test", "ARCHIVE_BUCKET": "archive-x", "CDN_BUCKET": "arke-cdn"}
	settings := jobs.Settings{CDNPublicURL: shared["CDN_PUBLIC_URL"], CallbackURL: "http://127.0.0.1:8080",
		Buckets: map[phases.Bucket]string{phases.StagingBucket: "arke-staging", phases.ArchiveBucket: shared["ARCHIVE_BUCKET"], phases.CDNBucket: shared["CDN_BUCKET"]}}
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "key-id", SecretAccessKey: "s3cr3t"})
	require.NoError(t, err)
	urls, err := batchurls.New(store, settings.Buckets)
	require.NoError(t, err)
	w := &PhaseLaunchWorker{deps: jobs.Deps{Settings: settings}, cfg: cfg, urls: urls}

	for _, p := range (&jobs.Executors{}).PhasesOf(Kind) {
		spec := p.Spec()
		t.Run(string(spec.Name), func(t *testing.T) {
			t.Parallel()
			pcfg := cfg.Phases[spec.Name]
			row := db.TaskClaimPendingRow{ID: spec.TaskPrefix + "_01jtest", R2Key: "staging/B/x", FileName: "x", ContentType: "application/octet-stream", Token: "tok"}
			m := w.machineSpec("B", spec.Name, pcfg, row, "tok", "")
			require.Equal(t, spec.Defaults.FlyAppName, m.App)
			require.Equal(t, spec.Defaults.WorkerImage, m.Image)
			require.Equal(t, spec.Defaults.Guest.MemoryMB, m.MemoryMB)
			require.Equal(t, string(spec.Name), m.Phase)
			for _, st := range spec.Settings {
				require.Equal(t, strconv.Itoa(st.Max), m.Env[st.Name], st.Name)
			}
			for _, name := range spec.SharedEnv {
				want, ok := shared[name]
				require.True(t, ok, name)
				require.Equal(t, want, m.Env[name], name)
			}
			// Storage through URLs only, valid for the task's timeout
			// plus the margin.
			for _, k := range []string{"R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY", "R2_ACCOUNT_ID", "R2_ENDPOINT"} {
				require.NotContains(t, m.Env, k)
			}
			ttl := int((pcfg.TaskTimeout + batchurls.Margin) / time.Second)
			require.Contains(t, m.Env["INPUT_URL"], "/arke-staging/staging/B/x?")
			require.Contains(t, m.Env["INPUT_URL"], "X-Amz-Expires="+strconv.Itoa(ttl)+"&")
			if planner, plans := p.(phases.OutputPlanner); plans {
				input := blob.Presigned{Object: blob.Object{Method: blob.MethodGet, Bucket: "arke-staging", Key: "staging/B/x"}, URL: m.Env["INPUT_URL"]}
				outs, err := blob.ParseCompact(input, m.Env["OUTPUT_URLS"])
				require.NoError(t, err)
				require.Len(t, outs, len(planner.PlanOutputs("staging/B/x")))
				for _, u := range outs {
					require.Contains(t, u.URL, "X-Amz-Expires="+strconv.Itoa(ttl)+"&")
				}
			} else {
				require.NotContains(t, m.Env, "OUTPUT_URLS")
			}
			require.NotContains(t, fmt.Sprint(m.Env), "s3cr3t")

			// Nothing another phase owns.
			for _, other := range phases.All() {
				if other.Spec().Name == spec.Name {
					continue
				}
				for _, st := range other.Spec().Settings {
					require.NotContains(t, m.Env, st.Name)
				}
			}
		})
	}
}

// BenchmarkMachineSpec is the orchestrator's cost of one image machine's
// spec (six URLs, the most of any phase), presigned and with unsigned URLs
// of the same shape: what presigning adds to each launch.
func BenchmarkMachineSpec(b *testing.B) {
	cfg := loadConfig(b, nil)
	settings := jobs.Settings{Buckets: map[phases.Bucket]string{phases.StagingBucket: "arke-staging", phases.ArchiveBucket: "arke-archive", phases.CDNBucket: "arke-cdn"}}
	store, err := blob.NewS3(blob.S3Config{Endpoint: "https://0123456789abcdef0123456789abcdef.r2.cloudflarestorage.com",
		AccessKeyID: "0123456789abcdef0123456789abcdef", SecretAccessKey: "s3cr3t"})
	require.NoError(b, err)
	pcfg := cfg.Phases[phases.ImageProcessing]
	row := db.TaskClaimPendingRow{ID: "image_01jtest", R2Key: "staging/01K8RNKN488RQCG3YGG72QBZS5/photos/IMG_0001.jpg",
		FileName: "IMG_0001.jpg", ContentType: "image/jpeg", Token: "tok"}
	for _, c := range []struct {
		name string
		p    blob.Presigner
	}{{"Unsigned", unsignedPresigner{}}, {"Presigned", store}} {
		b.Run(c.name, func(b *testing.B) {
			urls, err := batchurls.New(c.p, settings.Buckets)
			require.NoError(b, err)
			w := &PhaseLaunchWorker{deps: jobs.Deps{Settings: settings}, cfg: cfg, urls: urls}
			b.ReportAllocs()
			for b.Loop() {
				w.machineSpec("01K8RNKN488RQCG3YGG72QBZS5", phases.ImageProcessing, pcfg, row, "tok", "")
			}
		})
	}
}

// unsignedPresigner makes URLs of the presigned ones' shape, unsigned.
type unsignedPresigner struct{}

func (u unsignedPresigner) PresignCompact(ctx context.Context, base blob.Object, objs []blob.Object, ttl time.Duration) (blob.Presigned, string, error) {
	urls, err := u.PresignAll(ctx, []blob.Object{base}, ttl)
	var lines []string
	for _, o := range objs {
		lines = append(lines, string(o.Method)+" "+o.Bucket+" "+o.Key)
	}
	return urls[0], strings.Join(lines, "\n"), err
}

func (unsignedPresigner) PresignAll(_ context.Context, objs []blob.Object, ttl time.Duration) ([]blob.Presigned, error) {
	expires := time.Now().Add(ttl)
	out := make([]blob.Presigned, len(objs))
	for i, o := range objs {
		out[i] = blob.Presigned{Object: o, URL: "https://r2/" + o.Bucket + "/" + o.Key, Expires: expires}
		if o.Method == blob.MethodPutIfAbsent {
			out[i].Header = map[string]string{"If-None-Match": "*"}
		}
	}
	return out, nil
}

// loadConfig is the machine executor's configuration read from env.
func loadConfig(t testing.TB, env map[string]string) Config {
	t.Helper()
	var c Config
	require.NoError(t, setting.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Settings(&c)))
	return c
}
