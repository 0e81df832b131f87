// Package pgcluster runs a throwaway PostgreSQL cluster that its caller
// controls, for tests and the chaos driver that stop, start and restart
// Postgres under a running orchestrator (pg_ctl -m immediate: every
// connection dropped, as in a crash or a failover). It finds initdb and
// pg_ctl as scripts/postgres.sh does; as root the cluster runs as the
// "postgres" user, since initdb refuses root.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Cluster is a running throwaway cluster, reached through a Unix socket in
// its own folder.
type Cluster struct {
	// URL is a postgres:// URL of its "postgres" database.
	URL string
	// Dir holds the data, the socket and the server's log.
	Dir string

	pgctl, data, sock, logFile, opts string
	owner                            *user.User // nil: the invoking user
}

// Options configure a cluster.
type Options struct {
	// Dir is the folder to create it in; empty makes one under the
	// system's temporary folder.
	Dir string
	// MaxConnections is the server's max_connections (default 300).
	MaxConnections int
}

// Start creates and starts a cluster. fsync is off (the machine does not
// crash, only Postgres does), but synchronous_commit stays on, unlike the
// test clusters of scripts/postgres.sh: with it off, an immediate stop
// loses the last commits, which a production server would have kept, and
// a test would see callbacks answered 200 and then lost.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	initdb, err := findBin("initdb")
	if err != nil {
		return nil, err
	}
	pgctl, err := findBin("pg_ctl")
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "orchpg-chaos."); err != nil {
			return nil, err
		}
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 300
	}
	c := &Cluster{Dir: dir, pgctl: pgctl, data: filepath.Join(dir, "data"), sock: filepath.Join(dir, "sock"), logFile: filepath.Join(dir, "postgres.log")}
	if err := os.MkdirAll(c.sock, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if c.owner, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root needs a 'postgres' user to own the cluster: %w", err)
		}
		uid, _ := strconv.Atoi(c.owner.Uid)
		gid, _ := strconv.Atoi(c.owner.Gid)
		for _, d := range []string{dir, c.sock} {
			if err := os.Chown(d, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	if out, err := c.run(ctx, initdb, "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	c.opts = fmt.Sprintf("-c listen_addresses='' -c port=5432 -c unix_socket_directories='%s' -c max_connections=%d -c shared_buffers=128MB -c fsync=off -c full_page_writes=off",
		c.sock, opts.MaxConnections)
	c.URL = fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=5432&sslmode=disable", c.sock)
	if err := c.StartServer(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Socket is the path of the server's Unix socket, for a proxy to dial.
func (c *Cluster) Socket() string { return filepath.Join(c.sock, ".s.PGSQL.5432") }

// StartServer starts the server again after StopServer, and returns once it
// accepts connections.
func (c *Cluster) StartServer(ctx context.Context) error {
	if out, err := c.run(ctx, c.pgctl, "-D", c.data, "-l", c.logFile, "-o", c.opts, "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w: %s (log: %s)", err, out, c.logFile)
	}
	return nil
}

// StopServer stops the server with the pg_ctl shutdown mode ("immediate":
// no clean shutdown, every connection dropped, crash recovery at the next
// start; "fast": connections ended, clean).
func (c *Cluster) StopServer(ctx context.Context, mode string) error {
	if out, err := c.run(ctx, c.pgctl, "-D", c.data, "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %w: %s", mode, err, out)
	}
	return nil
}

// Restart is `pg_ctl restart -m immediate`: every connection dropped, and
// the server back after crash recovery.
func (c *Cluster) Restart(ctx context.Context) error {
	if out, err := c.run(ctx, c.pgctl, "-D", c.data, "-l", c.logFile, "-o", c.opts, "-m", "immediate", "-w", "-t", "60", "restart"); err != nil {
		return fmt.Errorf("pg_ctl restart -m immediate: %w: %s (log: %s)", err, out, c.logFile)
	}
	return nil
}

// Close stops the server and removes its folder.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.StopServer(ctx, "fast")
	return errors.Join(err, os.RemoveAll(c.Dir))
}

// run runs a PostgreSQL program as the cluster's owner, from a folder that
// owner can enter.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) (string, error) {
	var cmd *exec.Cmd
	if c.owner != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.owner.Username, "--", prog}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, prog, args...)
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// findBin finds a PostgreSQL program on PATH or in the usual folders of
// Debian and Homebrew, the newest version first.
func findBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: install PostgreSQL (Debian/Ubuntu: apt-get install postgresql)", name)
}
