package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/arke-institute/orchestrator/config"
)

// The embedded default (`make run`: local storage, local machines) keeps its
// state in LOCAL_DATA_DIR (.data), beside the local S3 server's objects:
//   - admin-token, read-token and ingest-token, the tokens generated on the
//     first start (for those not set in the environment) and reused after:
//     the one place generated credentials live; and webhook-secret-key,
//     WEBHOOK_SECRET_KEY's (webhookKeyFile);
//   - run.env, where the running instance is (DATABASE_URL, ORCHESTRATOR_URL,
//     and ADMIN_TOKEN_FILE, READ_TOKEN_FILE, INGEST_TOKEN_FILE for the
//     generated tokens it uses), which the operator commands read beneath
//     the environment.
const runEnvName = "run.env"

// localTokens are the tokens the embedded default generates: the setting
// and the file in LOCAL_DATA_DIR that keeps it.
var localTokens = []struct{ Setting, File string }{
	{"ADMIN_TOKEN", "admin-token"},
	{"READ_TOKEN", "read-token"},
	{"INGEST_TOKEN", "ingest-token"},
}

// embeddedDefault tells whether serve runs on the embedded default: no
// storage and no compute settings.
func embeddedDefault(cfg *config.Config) bool {
	return cfg.LocalStorage() && cfg.FlyAPIToken == ""
}

// webhookKeyFile keeps the embedded default's WEBHOOK_SECRET_KEY, unless
// the environment sets one: it seals the webhooks' signing secrets, so it
// must stay the same from one start to the next.
const webhookKeyFile = "webhook-secret-key"

// localToken returns the token kept in dir/name, creating the file (mode
// 0600) with a new random token when there is none.
func localToken(dir, name string) (token, path string, err error) {
	return localSecret(dir, name, func(b []byte) string { return hex.EncodeToString(b) }, 24)
}

// localWebhookKey returns the WEBHOOK_SECRET_KEY kept in dir, creating it
// (32 random bytes in base64) when there is none.
func localWebhookKey(dir string) (key, path string, err error) {
	return localSecret(dir, webhookKeyFile, base64.StdEncoding.EncodeToString, 32)
}

// localSecret returns the secret kept in dir/name, creating the file (mode
// 0600) with size new random bytes, as encode writes them, when there is
// none.
func localSecret(dir, name string, encode func([]byte) string, size int) (token, path string, err error) {
	path = filepath.Join(dir, name)
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, path, nil
		}
		return "", path, fmt.Errorf("%s is empty: delete it to have a new token generated", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", path, fmt.Errorf("reading a generated token: %w", err)
	}
	buf := make([]byte, size)
	if _, err := rand.Read(buf); err != nil {
		return "", path, err
	}
	token = encode(buf)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", path, err
	}
	if err := writePrivate(path, []byte(token+"\n")); err != nil {
		return "", path, fmt.Errorf("keeping a generated token: %w", err)
	}
	return token, path, nil
}

// runInstance is what run.env says of the running instance.
type runInstance struct {
	DatabaseURL, OrchestratorURL string
	// TokenFiles are the files of the generated tokens the server uses, by
	// setting (ADMIN_TOKEN, ...); a token from the environment has none.
	TokenFiles map[string]string
	// The local S3 server, for submit.
	S3Addr, S3AccessKey, S3SecretKey string
}

// writeRunEnv writes dir/run.env (mode 0600) for the operator commands: the
// database (unless its URL carries a password, which is no generated
// credential and stays where the operator put it), the API, the local S3
// server, and the files of the generated tokens the server uses.
func writeRunEnv(dir string, in runInstance) (string, error) {
	databaseURL := in.DatabaseURL
	var b bytes.Buffer
	b.WriteString("# Written by `orchestrator serve` on the embedded default (make run), for the\n" +
		"# operator commands (status, reset, retry, report, submit): they read it\n" +
		"# beneath the environment. It is rewritten on every start.\n")
	if u, err := url.Parse(databaseURL); err == nil && u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword {
			databaseURL = ""
		}
	}
	if databaseURL != "" {
		fmt.Fprintf(&b, "DATABASE_URL=%s\n", databaseURL)
	}
	fmt.Fprintf(&b, "ORCHESTRATOR_URL=%s\n", in.OrchestratorURL)
	for _, tok := range localTokens {
		if f := in.TokenFiles[tok.Setting]; f != "" {
			fmt.Fprintf(&b, "%s_FILE=%s\n", tok.Setting, f)
		}
	}
	if in.S3Addr != "" {
		fmt.Fprintf(&b, "LOCAL_S3_ADDR=%s\nLOCAL_S3_ACCESS_KEY=%s\nLOCAL_S3_SECRET_KEY=%s\n", in.S3Addr, in.S3AccessKey, in.S3SecretKey)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, runEnvName)
	return path, writePrivate(path, b.Bytes())
}

// writePrivate replaces path with data, readable by its owner only, through
// a temporary file, so a reader never sees half a file.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails once renamed, as it should
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// readRunEnv parses a run.env: KEY=VALUE lines, # comments.
func readRunEnv(r io.Reader) map[string]string {
	vals := make(map[string]string)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			vals[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return vals
}

// runEnvPaths are where the operator commands look for the run.env of a
// `make run`: in LOCAL_DATA_DIR (.data) of the working directory, then in
// the .data beside the folder of the program (bin/orchestrator of a clone).
func runEnvPaths(lookup func(string) (string, bool)) []string {
	dir, _ := lookup("LOCAL_DATA_DIR")
	if strings.TrimSpace(dir) == "" {
		dir = ".data"
	}
	paths := []string{filepath.Join(dir, runEnvName)}
	if exe, err := os.Executable(); err == nil {
		paths = append(paths, filepath.Join(filepath.Dir(filepath.Dir(exe)), ".data", runEnvName))
	}
	return paths
}

// withRunEnv is lookup with the first run.env found among paths beneath it:
// a setting the environment leaves empty is taken from the file, and a
// generated token (ADMIN_TOKEN, ...) from the file that its _FILE setting
// names. With no file it is lookup.
func withRunEnv(lookup func(string) (string, bool), paths ...string) func(string) (string, bool) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		vals := readRunEnv(f)
		_ = f.Close()
		return func(k string) (string, bool) {
			if v, ok := lookup(k); ok && strings.TrimSpace(v) != "" {
				return v, true
			}
			if f := vals[k+"_FILE"]; f != "" && isLocalToken(k) {
				if b, err := os.ReadFile(f); err == nil {
					return strings.TrimSpace(string(b)), true
				}
			}
			v, ok := vals[k]
			return v, ok
		}
	}
	return lookup
}

// isLocalToken tells whether setting is one the embedded default generates.
func isLocalToken(setting string) bool {
	for _, tok := range localTokens {
		if tok.Setting == setting {
			return true
		}
	}
	return false
}

// operatorEnv is the process environment with the run.env of a `make run`
// beneath it, for the operator commands.
func operatorEnv() func(string) (string, bool) {
	return withRunEnv(os.LookupEnv, runEnvPaths(os.LookupEnv)...)
}

// newcomerBanner is what serve prints, as plain text and never through the
// logger, once the embedded default serves: where everything is and how to
// begin. The secrets (the tokens, the S3 secret key) are shown only on a
// terminal, so that output kept in a file or a log collector holds none.
type newcomerBanner struct {
	URL                            string
	Tokens                         []bannerToken
	S3Endpoint, S3Access, S3Secret string
	Buckets                        []string
	DatabaseURL, RunEnv            string
	// ShowSecrets is set when the banner goes to a terminal.
	ShowSecrets bool
}

// bannerToken is one of the server's tokens, for the banner.
type bannerToken struct {
	Setting, Value string
	// File keeps a generated token; "" for one set in the environment.
	File string
}

// tokenUses says what each token opens, for the banner.
var tokenUses = map[string]string{
	"ADMIN_TOKEN":  `admin routes, River UI, the dashboard (browser user "admin"), every read`,
	"READ_TOKEN":   `status, events, documents, the dashboard without controls (user "reader")`,
	"INGEST_TOKEN": "intake, POST /batches (submit), and POST /documents",
}

func (nb newcomerBanner) write(w io.Writer) {
	var tokens strings.Builder
	for _, t := range nb.Tokens {
		fmt.Fprintf(&tokens, "  %-14s %s\n", t.Setting, tokenUses[t.Setting])
		switch {
		case t.File == "":
			tokens.WriteString("                 the value of " + t.Setting + "\n")
		case nb.ShowSecrets:
			fmt.Fprintf(&tokens, "                 %s   (kept in %s)\n", t.Value, t.File)
		default:
			fmt.Fprintf(&tokens, "                 in %s (shown here on a terminal only)\n", t.File)
		}
	}
	s3Secret := "in " + nb.RunEnv + " (LOCAL_S3_SECRET_KEY)"
	if nb.ShowSecrets {
		s3Secret = nb.S3Secret
	}
	fmt.Fprintf(w, `
The orchestrator is running on its embedded default (local PostgreSQL, S3 and machines).
  API            %[1]s   (OpenAPI: %[1]s/openapi.yaml)
  Dashboard      %[1]s/ui
  River UI       %[1]s/riverui
%[2]s                 API clients send "Authorization: Bearer <token>"; browsers log in
                 with basic auth, the token as password.
  S3             %[3]s   access key %[4]s, secret key %[5]s
                 buckets %[6]s
  Database       %[7]s
Submit the sample batch, from another terminal in this folder:
  go run ./cmd/orchestrator submit examples/sample-batch     (or: bin/orchestrator submit ..., make submit)
orchestrator submit, status, reset, retry and report find this instance and its
tokens through %[8]s.
Ctrl-C stops everything.

`, nb.URL, tokens.String(), nb.S3Endpoint, nb.S3Access, s3Secret, strings.Join(nb.Buckets, ", "), redactedDatabaseURL(nb.DatabaseURL), nb.RunEnv)
}

// redactedDatabaseURL hides a password in a database URL.
func redactedDatabaseURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(set by DATABASE_URL)"
}
