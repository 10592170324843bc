package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/sqlitestore"
)

// helperEnv, when set to a database path, makes the test binary a helper
// process of TestOtherProcessesShareTheLimit instead of running the tests.
const helperEnv = "SQLITESTORE_TEST_HELPER_DB"

const attemptsPerProcess = 100

// processBusyTimeout: three processes take turns at the write lock on a
// machine that may be running other builds; a turn that waits longer than
// the default 5 s there is load, not what the test is about.
var processBusyTimeout = sqlitestore.WithBusyTimeout(time.Minute)

var (
	processLog   = policy("check", limiter.SlidingLog, 10)
	processFixed = policy("ping", limiter.FixedWindow, 50)
	processKey   = limiter.Key{Subject: "42", Scope: "/search"}
)

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		if err := helper(path, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper opens path, says "ready", waits for a line on in, makes its
// attempts at once and prints how many of each policy were allowed.
func helper(path string, in io.Reader, out io.Writer) error {
	s, err := sqlitestore.Open(path, processBusyTimeout)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return err
	}
	logAllowed, fixedAllowed, err := attempts(s)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, logAllowed, fixedAllowed)
	return s.Close()
}

// attempts makes attemptsPerProcess concurrent attempts on each policy.
func attempts(s *sqlitestore.Store) (logAllowed, fixedAllowed int64, err error) {
	type answer struct {
		log, fixed bool
		err        error
	}
	answers := make(chan answer, attemptsPerProcess)
	for range attemptsPerProcess {
		go func() {
			var a answer
			for _, c := range []struct {
				p       limiter.Policy
				allowed *bool
			}{{processLog, &a.log}, {processFixed, &a.fixed}} {
				d, err := s.Allow(context.Background(), c.p, limiter.Request{Key: processKey, Cost: 1, Now: t0})
				if err != nil {
					a.err = err
				}
				*c.allowed = d.Allowed
			}
			answers <- a
		}()
	}
	for range attemptsPerProcess {
		a := <-answers
		if a.err != nil {
			err = a.err
			continue
		}
		if a.log {
			logAllowed++
		}
		if a.fixed {
			fixedAllowed++
		}
	}
	return logAllowed, fixedAllowed, err
}

// Two helper processes and this one decide on one file at once: together
// they admit exactly the limit. This is the cross-process guarantee, with
// real processes and their own SQLite locks.
func TestOtherProcessesShareTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	s := open(t, path, processBusyTimeout)
	type child struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	children := make([]child, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+path)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		require.NoError(t, err)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children[i] = child{cmd: cmd, in: in, out: bufio.NewReader(out)}
	}
	for _, c := range children {
		line, err := c.out.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
	}
	for _, c := range children {
		_, err := io.WriteString(c.in, "go\n")
		require.NoError(t, err)
	}
	logAllowed, fixedAllowed, err := attempts(s)
	require.NoError(t, err)
	for _, c := range children {
		var l, f int64
		_, err := fmt.Fscan(c.out, &l, &f)
		require.NoError(t, err)
		require.NoError(t, c.cmd.Wait())
		logAllowed += l
		fixedAllowed += f
	}
	assert.Equal(t, processLog.Limit, logAllowed)
	assert.Equal(t, processFixed.Limit, fixedAllowed)
	db := rawDB(t, path)
	assert.Equal(t, int64(3*attemptsPerProcess), queryInt(t, db, "SELECT count FROM rate_limit_windows"))
	assert.Equal(t, processLog.Limit, queryInt(t, db, "SELECT COUNT(*) FROM rate_events"))
}
