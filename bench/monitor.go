package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Monitor counts the commands clients send to one master, with MONITOR.
// Unlike INFO's counters it tells a client's own commands from those its
// Lua scripts run. MONITOR slows the master down: use it only where timings
// do not matter. Not safe for concurrent use.
type Monitor struct {
	addr   string
	conn   net.Conn
	marker string

	mu       sync.Mutex // guards the counts below
	top      map[string]int64
	inScript int64
	seen     chan struct{} // closed when the marker was read
	err      error         // the reader's error, once done is closed
	done     chan struct{}
}

var markerSeq atomic.Int64

// shaPrefix is how many hex digits of a script's SHA1 name its EVALSHA
// calls in MonitorCounts.Top ("evalsha:4c7f6587").
const shaPrefix = 8

// functionScript returns the script that redlock's function fn runs: fn
// without its library's name, "redlock_<16 hex digits>_".
func functionScript(fn string) string {
	if lib, script, ok := strings.Cut(strings.TrimPrefix(fn, "redlock_"), "_"); ok && len(lib) == 16 {
		return script
	}
	return fn
}

// monitorDial bounds the connection set-up of StartMonitor.
const monitorDial = 2 * time.Second

// StartMonitor connects to addr, issues MONITOR and counts what follows in
// the background until Stop.
func StartMonitor(ctx context.Context, addr string) (*Monitor, error) {
	ctx, cancel := context.WithTimeout(ctx, monitorDial)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
		_ = conn.Close()
		return nil, fmt.Errorf("MONITOR on %s: %q %v", addr, line, err)
	}
	_ = conn.SetDeadline(time.Time{})
	m := &Monitor{
		addr:   addr,
		conn:   conn,
		marker: fmt.Sprintf("redlock-bench-marker-%d", markerSeq.Add(1)),
		top:    map[string]int64{},
		seen:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go m.read(r)
	return m, nil
}

// read parses lines like
//
//	+1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" "abc" "1" "k"
//	+1700000000.123470 [0 lua] "SET" "k" "v"
func (m *Monitor) read(r *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			m.err = err
			return
		}
		_, rest, ok := strings.Cut(line, " [")
		if !ok {
			continue
		}
		who, cmd, ok := strings.Cut(rest, "] ")
		if !ok {
			continue
		}
		name, args, _ := strings.Cut(strings.TrimPrefix(cmd, `"`), `"`)
		name = strings.ToLower(name)
		switch name {
		case "evalsha": // tell the scripts apart: evalsha:<sha prefix>
			if _, sha, ok := strings.Cut(args, `"`); ok && len(sha) >= shaPrefix {
				name += ":" + sha[:shaPrefix]
			}
		case "fcall": // and the functions: fcall:<script>
			if _, fn, ok := strings.Cut(args, `"`); ok {
				fn, _, _ = strings.Cut(fn, `"`)
				name += ":" + functionScript(fn)
			}
		}
		if strings.Contains(cmd, m.marker) {
			close(m.seen)
			continue
		}
		m.mu.Lock()
		if strings.HasSuffix(who, " lua") {
			m.inScript++
		} else {
			m.top[name]++
		}
		m.mu.Unlock()
	}
}

// MonitorCounts is what a Monitor saw.
type MonitorCounts struct {
	// Top counts the commands clients sent, by lower-case name.
	Top map[string]int64
	// InScript counts the commands Lua scripts ran.
	InScript int64
}

// Sum returns the number of client commands, without the names in except.
func (c MonitorCounts) Sum(except ...string) int64 {
	var n int64
	for name, k := range c.Top {
		if !contains(except, name) {
			n += k
		}
	}
	return n
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Stop makes sure every command sent before it was counted (it sends a
// marker ECHO on its own connection and waits to see it), ends MONITOR and
// returns the counts. It blocks until then, bounded by ctx.
func (m *Monitor) Stop(ctx context.Context) (MonitorCounts, error) {
	defer m.conn.Close()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return MonitorCounts{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(c, "ECHO %s\r\n", m.marker); err != nil {
		return MonitorCounts{}, err
	}
	select {
	case <-m.seen:
	case <-m.done:
		return MonitorCounts{}, fmt.Errorf("MONITOR on %s ended before the marker: %w", m.addr, m.err)
	case <-ctx.Done():
		return MonitorCounts{}, fmt.Errorf("MONITOR on %s: waiting for the marker: %w", m.addr, ctx.Err())
	}
	_ = m.conn.Close()
	<-m.done // the reader stops on the closed connection
	m.mu.Lock()
	defer m.mu.Unlock()
	top := make(map[string]int64, len(m.top))
	for k, v := range m.top {
		top[k] = v
	}
	return MonitorCounts{Top: top, InScript: m.inScript}, nil
}

// Monitors is a Monitor per master.
type Monitors []*Monitor

// StartMonitors starts a Monitor on every address; on error it stops those
// already started.
func StartMonitors(ctx context.Context, addrs []string) (Monitors, error) {
	ms := make(Monitors, 0, len(addrs))
	for _, a := range addrs {
		m, err := StartMonitor(ctx, a)
		if err != nil {
			_, serr := ms.Stop(ctx)
			return nil, errors.Join(err, serr)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// Stop stops every Monitor and returns the counts summed over masters.
func (ms Monitors) Stop(ctx context.Context) (MonitorCounts, error) {
	sum := MonitorCounts{Top: map[string]int64{}}
	var errs []error
	for _, m := range ms {
		c, err := m.Stop(ctx)
		errs = append(errs, err)
		for k, v := range c.Top {
			sum.Top[k] += v
		}
		sum.InScript += c.InScript
	}
	return sum, errors.Join(errs...)
}
