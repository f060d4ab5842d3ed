// Package pgtest runs a private PostgreSQL for tests and scripts: Debian's
// server binaries (initdb, pg_ctl) on a data directory of its own, a
// socket in that directory and a free port of 127.0.0.1, password
// authentication (scram-sha-256) even there. Nothing of the machine's own
// PostgreSQL (its clusters, its port 5432) is touched.
//
// Tests share one server a test binary (started on first use, stopped by
// Main) and get a database of their own each (Database), so a package's
// tests pay initdb once.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Superuser is the name of the server's superuser.
const Superuser = "leasehold"

// Server is a running private PostgreSQL.
type Server struct {
	// Dir holds the data directory (Dir/data), the socket and the log.
	Dir string
	// Port is its TCP port on 127.0.0.1.
	Port     int
	password string
	bin      string
	asUser   *user.User // the user the server runs as (not root)
}

// Binaries returns the directory of the newest installed PostgreSQL
// server's binaries (/usr/lib/postgresql/N/bin), or an error saying that
// none is installed.
func Binaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", errors.New("pgtest: no PostgreSQL server installed (Debian's postgresql: apt-get install postgresql)")
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return filepath.Dir(dirs[0]), nil
}

func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// Start makes a new cluster in dir (which must not exist or be empty) and
// starts it on a free port of 127.0.0.1. As root the server runs as the
// user postgres (PostgreSQL refuses root); dir is handed to that user.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		if s.asUser, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("pgtest: running as root needs the user postgres (made by Debian's postgresql): %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	s.password = hex.EncodeToString(pw)
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := s.chown(dir); err != nil {
		return nil, err
	}
	if err := s.chown(pwfile); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if out, err := s.run(ctx, "initdb", "-D", data, "-U", Superuser, "--pwfile", pwfile, "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v: %s", err, out)
	}
	os.Remove(pwfile)
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		s.Port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c fsync=off -c max_connections=200 -c shared_buffers=64MB", s.Port, dir)
		out, err := s.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput()
		if err == nil {
			return s, nil
		}
		if try == 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			return nil, fmt.Errorf("pgtest: pg_ctl start: %v: %s\n%s", err, out, tail(log))
		}
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// run makes a command of one of the server's binaries, as the server's
// user.
func (s *Server) run(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.asUser == nil {
		return exec.CommandContext(ctx, path, args...)
	}
	return exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=" + s.asUser.Uid, "--regid=" + s.asUser.Gid, "--init-groups", path}, args...)...)
}

func (s *Server) chown(path string) error {
	if s.asUser == nil {
		return nil
	}
	uid, _ := strconv.Atoi(s.asUser.Uid)
	gid, _ := strconv.Atoi(s.asUser.Gid)
	return os.Chown(path, uid, gid)
}

// Stop stops the server at once (pg_ctl stop -m immediate) and removes its
// directory.
func (s *Server) Stop() error {
	out, err := s.run(context.Background(), "pg_ctl", "-D", filepath.Join(s.Dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput()
	os.RemoveAll(s.Dir)
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v: %s", err, out)
	}
	return nil
}

// Kill stops the server at once without removing its data (a crash), for
// fault tests; Restart starts it again on the same port.
func (s *Server) Kill() error {
	out, err := s.run(context.Background(), "pg_ctl", "-D", filepath.Join(s.Dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v: %s", err, out)
	}
	return nil
}

// Restart starts a server stopped by Kill on its port again.
func (s *Server) Restart(ctx context.Context) error {
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c fsync=off -c max_connections=200 -c shared_buffers=64MB", s.Port, s.Dir)
	out, err := s.run(ctx, "pg_ctl", "-D", filepath.Join(s.Dir, "data"), "-l", filepath.Join(s.Dir, "log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %v: %s", err, out)
	}
	return nil
}

// URL is the connection URL of database db as the superuser, over TCP.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(Superuser, s.password), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Password is the superuser's password (for tests of a wrong one).
func (s *Server) Password() string { return s.password }

// CreateDatabase makes database name (with psql, so that this package
// needs no driver) and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		psql = filepath.Join(s.bin, "psql")
	}
	cmd := exec.CommandContext(ctx, psql, "-v", "ON_ERROR_STOP=1", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", Superuser, "-d", "postgres", "-c", `CREATE DATABASE "`+name+`"`)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+s.password)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %v: %s", name, err, out)
	}
	return s.URL(name), nil
}

var (
	shared    *Server
	sharedErr error
	once      sync.Once
	dbs       sync.Mutex
	dbCount   int
	notName   = regexp.MustCompile(`[^a-z0-9_]+`)
)

// Shared returns the test binary's server, starting it on first use.
// Without PostgreSQL the test is skipped, unless CI=true: then it fails.
func Shared(t testing.TB) *Server {
	t.Helper()
	once.Do(func() {
		if _, err := Binaries(); err != nil {
			sharedErr = err
			return
		}
		dir, err := os.MkdirTemp("", "leasehold-pg-")
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx, dir)
		if sharedErr != nil {
			os.RemoveAll(dir)
		}
	})
	if sharedErr != nil {
		if _, err := Binaries(); err != nil && os.Getenv("CI") != "true" {
			t.Skip(sharedErr)
		}
		t.Fatal(sharedErr)
	}
	return shared
}

// Database makes a database of the test's own on the shared server and
// returns its URL.
func Database(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	dbs.Lock()
	dbCount++
	n := dbCount
	dbs.Unlock()
	name := notName.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%s", n, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := s.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Main runs a package's tests (call it from TestMain) and stops the shared
// server, if one was started, after them.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}
