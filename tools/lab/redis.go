package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNoRedis says that redis-server is not installed.
var errNoRedis = errors.New("redis-server is not on PATH (install it, e.g. apt-get install redis-server, to measure the Redis store)")

// redisServer is a private redis-server on a free loopback port, without
// persistence, for `lab cost`.
type redisServer struct {
	cmd    *exec.Cmd
	exited chan struct{}
	url    string
	client *redis.Client
}

// startRedis starts redis-server with its files in dir.
func startRedis(dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	var last error
	for range 3 { // another process may take the free port first
		s, err := launchRedis(bin, dir)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, fmt.Errorf("lab: redis-server: %w", last)
}

func launchRedis(bin, dir string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "redis.conf")
	text := fmt.Sprintf("bind 127.0.0.1\nport %d\nsave \"\"\nappendonly no\ndaemonize no\ndir %q\nlogfile %q\n",
		port, dir, filepath.Join(dir, "redis.log"))
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	s := &redisServer{cmd: exec.Command(bin, conf), exited: make(chan struct{})}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.url = "redis://" + addr + "/0"
	s.client = redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		pid, err := s.client.Do(ctx, "INFO", "server").Text()
		cancel()
		if err == nil && infoField(pid, "process_id") == strconv.Itoa(s.cmd.Process.Pid) {
			return s, nil
		}
		select {
		case <-s.exited:
			s.stop()
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("exited at start: %s", strings.TrimSpace(string(log)))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("not answering on %s", addr)
		}
	}
}

// stop kills the server and waits for it to exit.
func (s *redisServer) stop() {
	_ = s.client.Close()
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// infoField returns the value of name in an INFO answer.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// changes returns the number of keyspace changes since the server started
// (it never saves, so the counter never resets).
func (s *redisServer) changes(ctx context.Context) (int64, error) {
	info, err := s.client.Info(ctx, "persistence").Result()
	if err != nil {
		return 0, fmt.Errorf("lab: redis: %w", err)
	}
	n, err := strconv.ParseInt(infoField(info, "rdb_changes_since_last_save"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lab: redis: rdb_changes_since_last_save: %w", err)
	}
	return n, nil
}

// memoryUsage sums MEMORY USAGE (every element counted: SAMPLES 0) over the
// keys matching pattern and returns the sum and the number of keys.
func (s *redisServer) memoryUsage(ctx context.Context, pattern string) (bytes, keys int64, err error) {
	iter := s.client.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		n, err := s.client.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			return 0, 0, fmt.Errorf("lab: redis: memory usage: %w", err)
		}
		bytes += n
		keys++
	}
	if err := iter.Err(); err != nil {
		return 0, 0, fmt.Errorf("lab: redis: scan: %w", err)
	}
	return bytes, keys, nil
}
