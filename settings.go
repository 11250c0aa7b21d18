package redlock

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial returns a Client of the masters at addrs, "host:port" or redis://
// URLs, each through a go-redis client that never replays a call and
// ends it at redlock's deadline. It does no I/O; Close closes the
// clients. It returns an error wrapping ErrInvalidArgument for a bad
// list or address, or what New refuses. For Sentinel or pool settings,
// build the clients and call New.
func Dial(addrs []string, opts *Options) (*Client, error) {
	if len(addrs) == 0 {
		return nil, invalidf("no master addresses")
	}
	if opts == nil {
		opts = &Options{}
	}
	mt := opts.MasterTimeout
	if mt == 0 {
		mt = DefaultMasterTimeout
	}
	// New refuses a MasterTimeout out of range; the clients are then closed.
	timeout := lateCallFactor * min(max(mt, 0), maxMasterTimeout)
	clients := make([]*redis.Client, 0, len(addrs))
	closeAll := func() {
		for _, rc := range clients {
			_ = rc.Close()
		}
	}
	for i, addr := range addrs {
		opt, err := dialOptions(addr)
		if err != nil {
			closeAll()
			return nil, invalidf("master %d %s: %v", i, quote(addr), err)
		}
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		opt.DialerRetries = 1
		for _, t := range []*time.Duration{&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout} {
			if *t == 0 {
				*t = timeout
			}
		}
		clients = append(clients, redis.NewClient(opt))
	}
	c, err := New(clients, opts)
	if err != nil {
		closeAll()
		return nil, err
	}
	c.owned = clients
	return c, nil
}

// dialOptions parses addr, a "host:port" or a URL, into go-redis options.
func dialOptions(addr string) (*redis.Options, error) {
	if strings.Contains(addr, "://") {
		return redis.ParseURL(addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, errors.New(`want "host:port" or a redis:// URL`)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("port %s: want 1 to 65535", quote(port))
	}
	if host == "" {
		return nil, errors.New("no host")
	}
	return &redis.Options{Addr: addr}, nil
}

// closeOwned closes the go-redis clients Dial made, once.
func (c *Client) closeOwned() error {
	var errs []error
	c.ownedOnce.Do(func() {
		for _, rc := range c.owned {
			errs = append(errs, rc.Close())
		}
	})
	return errors.Join(errs...)
}

// replaySetting returns the setting, and its value, by which client may
// send a call again after it may have run: after a timeout, a lost
// connection, or an error such as LOADING. It returns "" if none does,
// or if the client is not one of go-redis' own. Only retries replay:
// ContextTimeoutEnabled and the timeouts choose which failures go-redis
// retries, and dial retries happen before anything is sent.
func replaySetting(client redis.Scripter) (string, int) {
	switch c := client.(type) {
	case *redis.Client: // Sentinel-managed ones too
		if n := c.Options().MaxRetries; n > 0 {
			return "MaxRetries", n
		}
	case *redis.Ring:
		if n := c.Options().MaxRetries; n > 0 {
			return "MaxRetries", n
		}
	case *redis.ClusterClient:
		// Lock calls go to its nodes' clients, which take its MaxRetries.
		// Redirects are never followed, so MaxRedirects replays nothing.
		if n := c.Options().MaxRetries; n > 0 {
			return "MaxRetries", n
		}
	}
	return "", 0
}

// replayProblem is Verify's message for a client whose setting may
// replay a call.
func replayProblem(setting string, n int) string {
	value := strconv.Itoa(n)
	if n == 3 {
		value += " (go-redis' default, also for 0)"
	}
	return fmt.Sprintf("%s %s: a lock call that timed out or lost its connection may be sent again, and land after its undo; set %s: -1", setting, value, setting)
}
