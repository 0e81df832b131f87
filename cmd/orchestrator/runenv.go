package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
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
//   - admin-token, the admin token generated on the first start and reused
//     after: the one place generated credentials live;
//   - run.env, where the running instance is (DATABASE_URL, ORCHESTRATOR_URL,
//     and ADMIN_TOKEN_FILE when it uses the generated token), which the
//     operator commands read beneath the environment.
const (
	adminTokenName = "admin-token"
	runEnvName     = "run.env"
)

// embeddedDefault tells whether serve runs on the embedded default: no
// storage and no compute settings.
func embeddedDefault(cfg *config.Config) bool {
	return cfg.LocalStorage() && cfg.FlyAPIToken == ""
}

// localAdminToken returns the admin token kept in dir/admin-token, creating
// the file (mode 0600) with a new random token when there is none.
func localAdminToken(dir string) (token, path string, err error) {
	path = filepath.Join(dir, adminTokenName)
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, path, nil
		}
		return "", path, fmt.Errorf("%s is empty: delete it to have a new admin token generated", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", path, fmt.Errorf("reading the admin token: %w", err)
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", path, err
	}
	token = hex.EncodeToString(buf)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", path, err
	}
	if err := writePrivate(path, []byte(token+"\n")); err != nil {
		return "", path, fmt.Errorf("keeping the admin token: %w", err)
	}
	return token, path, nil
}

// runInstance is what run.env says of the running instance.
type runInstance struct {
	DatabaseURL, OrchestratorURL string
	// TokenFile is the file of the generated admin token, empty when the
	// server uses ADMIN_TOKEN from its environment.
	TokenFile string
	// The local S3 server, for submit.
	S3Addr, S3AccessKey, S3SecretKey string
}

// writeRunEnv writes dir/run.env (mode 0600) for the operator commands: the
// database (unless its URL carries a password, which is no generated
// credential and stays where the operator put it), the API, the local S3
// server, and the file of the generated admin token when the server uses it.
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
	if in.TokenFile != "" {
		fmt.Fprintf(&b, "ADMIN_TOKEN_FILE=%s\n", in.TokenFile)
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
// a setting the environment leaves empty is taken from the file, and
// ADMIN_TOKEN from the file that its ADMIN_TOKEN_FILE names. With no file
// it is lookup.
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
			if k == "ADMIN_TOKEN" && vals["ADMIN_TOKEN_FILE"] != "" {
				if b, err := os.ReadFile(vals["ADMIN_TOKEN_FILE"]); err == nil {
					return strings.TrimSpace(string(b)), true
				}
			}
			v, ok := vals[k]
			return v, ok
		}
	}
	return lookup
}

// operatorEnv is the process environment with the run.env of a `make run`
// beneath it, for the operator commands.
func operatorEnv() func(string) (string, bool) {
	return withRunEnv(os.LookupEnv, runEnvPaths(os.LookupEnv)...)
}

// newcomerBanner is what serve prints, as plain text and never through the
// logger, once the embedded default serves: where everything is and how to
// begin. The secrets (the admin token, the S3 secret key) are shown only on
// a terminal, so that output kept in a file or a log collector holds none.
type newcomerBanner struct {
	URL, Token, TokenFile            string
	S3Endpoint, S3Access, S3Secret   string
	Buckets                          []string
	DatabaseURL, RunEnv, TokenSource string
	// ShowSecrets is set when the banner goes to a terminal.
	ShowSecrets bool
}

func (nb newcomerBanner) write(w io.Writer) {
	var token, s3Secret string
	switch {
	case nb.TokenSource != "":
		token = "the value of " + nb.TokenSource
	case nb.ShowSecrets:
		token = nb.Token + "\n                 (kept in " + nb.TokenFile + ")"
	default:
		token = "in " + nb.TokenFile + " (shown here on a terminal only)"
	}
	if nb.ShowSecrets {
		s3Secret = nb.S3Secret
	} else {
		s3Secret = "in " + nb.RunEnv + " (LOCAL_S3_SECRET_KEY)"
	}
	fmt.Fprintf(w, `
The orchestrator is running on its embedded default (local PostgreSQL, S3 and machines).
  API            %[1]s   (OpenAPI: %[1]s/openapi.yaml)
  Dashboard      %[1]s/ui
  River UI       %[1]s/riverui
  Admin token    %[2]s
                 Browsers log in as user "admin" with the token as password;
                 API clients send "Authorization: Bearer <token>".
  S3             %[3]s   access key %[4]s, secret key %[5]s
                 buckets %[6]s
  Database       %[7]s
Submit the sample batch, from another terminal in this folder:
  go run ./cmd/orchestrator submit examples/sample-batch     (or: bin/orchestrator submit ..., make submit)
orchestrator status, reset, retry and report find this instance through %[8]s.
Ctrl-C stops everything.

`, nb.URL, token, nb.S3Endpoint, nb.S3Access, s3Secret, strings.Join(nb.Buckets, ", "), redactedDatabaseURL(nb.DatabaseURL), nb.RunEnv)
}

// redactedDatabaseURL hides a password in a database URL.
func redactedDatabaseURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(set by DATABASE_URL)"
}
