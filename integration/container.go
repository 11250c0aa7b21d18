package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/go-redlock/redlock/internal/harness"
)

// Container backend settings.
const (
	// EnvImage names the Redis image StartContainers uses when
	// ContainerOptions.Image is empty.
	EnvImage = "REDLOCK_REDIS_IMAGE"
	// EnvContainerNetwork sets ContainerOptions.Network when it is empty.
	EnvContainerNetwork = "REDLOCK_CONTAINER_NETWORK"
	// DefaultImage is the image used when neither ContainerOptions.Image nor
	// REDLOCK_REDIS_IMAGE is set: the public image real users pull. Machines
	// without registry access build a local one with scripts/build-image.sh.
	DefaultImage = "redis:7"
	// ContainerLabel is set (to the master's name) on every container
	// StartContainers creates. Leftovers of a crashed test binary can be
	// removed with: docker rm -f $(docker ps -aq --filter label=org.go-redlock.integration)
	ContainerLabel = "org.go-redlock.integration"
)

// Errors returned (wrapped) by StartContainers when the backend cannot be
// used at all, as opposed to a master that fails to start.
var (
	// ErrNoDocker means the Docker daemon is not reachable.
	ErrNoDocker = errors.New("docker daemon not reachable (the container backend needs Docker and a Redis image, see `make image` / scripts/build-image.sh)")
	// ErrNoImage means the Redis image is not present locally and
	// ContainerOptions.Pull is false.
	ErrNoImage = errors.New("redis image not found locally; build one with `make image` (scripts/build-image.sh) and set " + EnvImage + "=redlock-redis:local")
)

// ContainerOptions configures StartContainers. The zero value is ready to use.
type ContainerOptions struct {
	// Image is the Redis image; default $REDLOCK_REDIS_IMAGE, else DefaultImage.
	// Its entrypoint must accept redis-server options as arguments (the
	// official image and the one from scripts/build-image.sh both do).
	Image string
	// Args are extra redis-server arguments, appended after the harness's
	// own so they can override them.
	Args []string
	// Pull lets testcontainers pull a missing image. Without it a missing
	// image is reported as ErrNoImage and nothing is pulled.
	Pull bool
	// Network is NetworkPublished or NetworkHost; default
	// $REDLOCK_CONTAINER_NETWORK, else NetworkPublished.
	Network string
	// Logf, if not nil, receives testcontainers' progress messages.
	Logf func(format string, args ...any)
}

// Container networking modes (ContainerOptions.Network).
const (
	// NetworkPublished runs each container on Docker's default bridge and
	// publishes its port on a 127.0.0.1 host port. Portable (Docker Desktop
	// too), but every byte passes Docker's userland proxy, which adds
	// latency: tail latencies of tens to hundreds of milliseconds were seen
	// on a loaded 2-core machine.
	NetworkPublished = "published"
	// NetworkHost runs each container in the host's network namespace with
	// redis bound to 127.0.0.1 on the chosen port: no proxy, no NAT. Linux
	// only (the daemon must share the client's network namespace).
	NetworkHost = "host"
)

const (
	containerPort   = "6379/tcp"
	dockerTimeout   = 5 * time.Second  // reaching the daemon and checking the image
	removeTimeout   = 30 * time.Second // removing every container of a cluster
	dataDir         = "/data"          // tmpfs in the container: empty at every start
	containerPollIv = 10 * time.Millisecond
)

// containerEnvOnce applies the testcontainers settings this harness needs.
var containerEnvOnce sync.Once

// setContainerEnv sets, where unset, the testcontainers settings that make
// it work without registry access and inside a container: no reaper (Ryuk
// would have to be pulled; Close removes the containers instead) and, where
// /.dockerenv exists, 127.0.0.1 as the host of published ports. It must run
// before testcontainers reads its configuration (once per process).
func setContainerEnv() {
	containerEnvOnce.Do(func() {
		if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
			_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
		if _, err := os.Stat("/.dockerenv"); err == nil {
			if _, ok := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !ok {
				_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
			}
		}
	})
}

// StartContainers starts n Redis containers with testcontainers-go, each
// reachable on a fixed, free 127.0.0.1 port that is kept across Restart
// (published from the bridge network, or bound directly with NetworkHost),
// with no persistence, protected mode off and /data on a tmpfs. The
// containers start in parallel; it blocks until every master answers PING,
// each bounded by ctx and by 10s. The containers outlive ctx: remove them
// with Cluster.Close. On failure every container already created is
// removed. Containers of a process that dies before Close stay behind;
// they carry ContainerLabel.
//
// It fails with ErrNoDocker if the daemon is unreachable and with ErrNoImage
// if the image is missing and opts.Pull is false. Unless already set, it
// sets TESTCONTAINERS_RYUK_DISABLED=true and, inside a container,
// TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 in the process environment.
func StartContainers(ctx context.Context, n int, opts ContainerOptions) (*Cluster, error) {
	setContainerEnv()
	image := opts.Image
	if image == "" {
		image = os.Getenv(EnvImage)
	}
	if image == "" {
		image = DefaultImage
	}
	netMode := opts.Network
	if netMode == "" {
		netMode = os.Getenv(EnvContainerNetwork)
	}
	if netMode == "" {
		netMode = NetworkPublished
	}
	if netMode != NetworkPublished && netMode != NetworkHost {
		return nil, fmt.Errorf("integration: unknown container network %q (known: %q, %q)", netMode, NetworkPublished, NetworkHost)
	}
	logger := tclog.NewNoopLogger()
	if opts.Logf != nil {
		logger = logfLogger(opts.Logf)
	}

	docker, err := dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	if !opts.Pull {
		if err := checkImage(ctx, docker, image); err != nil {
			return nil, errors.Join(err, docker.Close())
		}
	}

	masters := make([]*containerMaster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			masters[i], errs[i] = startContainerMaster(ctx, docker, logger, fmt.Sprintf("m%d", i), image, netMode, opts.Args)
		})
	}
	wg.Wait()

	c := harness.New(make([]Master, 0, n), func() error { return removeContainers(docker, masters) })
	for _, m := range masters {
		if m != nil {
			c.Masters = append(c.Masters, m)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// dockerClient connects to the daemon testcontainers would use and checks
// that it answers, bounded by ctx and dockerTimeout.
func dockerClient(ctx context.Context) (*testcontainers.DockerClient, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	docker, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDocker, err)
	}
	if _, err := docker.Ping(ctx, client.PingOptions{}); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: %w", ErrNoDocker, err), docker.Close())
	}
	return docker, nil
}

// checkImage fails with ErrNoImage if image is not present locally.
func checkImage(ctx context.Context, docker *testcontainers.DockerClient, image string) error {
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	_, err := docker.ImageInspect(ctx, image)
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w (%s=%q)", ErrNoImage, EnvImage, image)
	case err != nil:
		return fmt.Errorf("%w: inspecting image %s: %w", ErrNoDocker, image, err)
	}
	return nil
}

// startContainerMaster creates and starts one container on a free port,
// trying another port if the chosen one is taken before Docker binds it.
// A container that fails to start is removed.
func startContainerMaster(ctx context.Context, docker *testcontainers.DockerClient, logger tclog.Logger, name, image, netMode string, extraArgs []string) (*containerMaster, error) {
	var err error
	for range harness.StartAttempts {
		var lease *harness.PortLease
		if lease, err = harness.LeasePort(); err != nil {
			return nil, err
		}
		port := lease.Port()
		m := &containerMaster{
			lease:  lease,
			name:   name,
			addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			docker: docker,
		}
		err = m.create(ctx, logger, image, netMode, port, extraArgs)
		if err == nil {
			return m, nil
		}
		err = errors.Join(err, lease.Release())
		if !errors.Is(err, harness.ErrAddrInUse) {
			return nil, err
		}
	}
	return nil, err
}

// containerMaster is a Master backed by a Docker container. Kill stops the
// container, Restart starts the same container again (its port bindings and
// so its Addr are kept; its tmpfs /data is new and redis has no
// persistence, so it starts empty), Pause and Resume freeze and thaw its
// cgroup with docker pause/unpause.
type containerMaster struct {
	name, addr string
	docker     *testcontainers.DockerClient // shared by the cluster
	lease      *harness.PortLease           // keeps addr's port ours until the container is removed

	mu      sync.Mutex // serialises Kill, Restart, Pause and Resume
	ctr     testcontainers.Container
	id      string
	running atomic.Bool
	paused  bool // guarded by mu
}

func (m *containerMaster) Name() string { return m.name }
func (m *containerMaster) Addr() string { return m.addr }

// Running reports whether the container was started and not killed since.
// It does not block; it does not notice a container that exits on its own.
func (m *containerMaster) Running() bool { return m.running.Load() }

// create creates and starts the container, bounded by ctx and harness.StartTimeout.
// On failure the container is removed; the error wraps harness.ErrAddrInUse if the
// port was taken.
func (m *containerMaster) create(ctx context.Context, logger tclog.Logger, image, netMode string, port int, extraArgs []string) error {
	ctx, cancel := context.WithTimeout(ctx, harness.StartTimeout)
	defer cancel()
	args := []string{
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dataDir,
	}
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:      image,
			Labels:     map[string]string{ContainerLabel: m.name},
			Tmpfs:      map[string]string{dataDir: "rw,mode=1777"},
			WaitingFor: pingStrategy{addr: m.addr},
		},
		Started: true,
		Logger:  logger,
	}
	if netMode == NetworkHost {
		args = append(args, "--bind", "127.0.0.1", "--port", strconv.Itoa(port))
		req.HostConfigModifier = func(hc *container.HostConfig) { hc.NetworkMode = "host" }
	} else {
		bindings := network.PortMap{network.MustParsePort(containerPort): {{
			HostIP:   netip.AddrFrom4([4]byte{127, 0, 0, 1}),
			HostPort: strconv.Itoa(port),
		}}}
		req.ExposedPorts = []string{containerPort}
		req.HostConfigModifier = func(hc *container.HostConfig) { hc.PortBindings = bindings }
	}
	req.Cmd = append(args, extraArgs...)
	ctr, err := testcontainers.GenericContainer(ctx, req)
	if ctr != nil {
		m.ctr, m.id = ctr, ctr.GetContainerID()
	}
	if err == nil {
		m.running.Store(true)
		return nil
	}
	err = m.startError(ctx, err)
	if m.ctr != nil {
		rmCtx, cancelRm := context.WithTimeout(context.Background(), harness.KillTimeout)
		defer cancelRm()
		err = errors.Join(err, m.remove(rmCtx))
	}
	return err
}

// startError describes a failed start: it names the master and address,
// marks a port conflict with harness.ErrAddrInUse and quotes the container's log.
func (m *containerMaster) startError(ctx context.Context, err error) error {
	tail := ""
	if m.ctr != nil {
		logCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerTimeout)
		defer cancel()
		tail = m.logTail(logCtx, harness.LogTailLines)
	}
	// Docker reports a published port that is taken; with host networking
	// redis itself fails to bind and logs it.
	if isAddrInUse(err.Error()) || isAddrInUse(lastRun(tail)) {
		err = fmt.Errorf("%w: %w", harness.ErrAddrInUse, err)
	}
	err = fmt.Errorf("%s: redis container on %s did not start: %w", m.name, m.addr, err)
	if m.ctr == nil {
		return err
	}
	return fmt.Errorf("%w\n--- end of its log ---\n%s", err, tail)
}

// isAddrInUse reports whether a Docker error or a redis log line says the
// port was taken.
func isAddrInUse(msg string) bool {
	s := strings.ToLower(msg)
	return strings.Contains(s, "address already in use") || strings.Contains(s, "port is already allocated")
}

// lastRun returns the part of a log written by the last start of redis.
func lastRun(log string) string {
	return log[max(0, strings.LastIndex(log, "Redis is starting")):]
}

// logTail returns up to n last lines of the container's log.
func (m *containerMaster) logTail(ctx context.Context, n int) string {
	rc, err := m.ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil && len(b) == 0 {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Kill sends SIGKILL to the container (paused or not) and blocks until
// Docker reports it stopped, bounded by ctx. Its published port is released.
func (m *containerMaster) Kill(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kill(ctx)
}

// kill implements Kill; m.mu must be held.
func (m *containerMaster) kill(ctx context.Context) error {
	if !m.running.Load() {
		return nil
	}
	if _, err := m.docker.ContainerKill(ctx, m.id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		// Not running (it exited on its own) is fine: the wait below sees it.
		if !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "is not running") {
			return fmt.Errorf("%s: docker kill: %w", m.name, err)
		}
	}
	if err := m.waitState(ctx, func(s *container.State) bool { return !s.Running }); err != nil {
		return fmt.Errorf("%s: waiting for the container to stop: %w", m.name, err)
	}
	m.running.Store(false)
	m.paused = false
	return nil
}

// waitState polls the container's state until ok returns true, bounded by ctx.
func (m *containerMaster) waitState(ctx context.Context, ok func(*container.State) bool) error {
	for {
		res, err := m.docker.ContainerInspect(ctx, m.id, client.ContainerInspectOptions{})
		if err != nil {
			return err
		}
		if s := res.Container.State; s != nil && ok(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(containerPollIv):
		}
	}
}

// Restart kills the container if needed and starts it again on the same
// host port with empty data. It blocks until redis answers PING, bounded by
// ctx and by 10s per attempt; a busy port is retried for a few seconds.
func (m *containerMaster) Restart(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return harness.Restart(ctx, m.kill, m.start)
}

// start starts the stopped container and waits until it answers PING,
// bounded by ctx and harness.StartTimeout. On failure the container is stopped
// again. m.mu must be held and the container must not be running.
func (m *containerMaster) start(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, harness.StartTimeout)
	defer cancel()
	err := m.ctr.Start(startCtx)
	// Running from now on, so that kill stops whatever did start.
	m.running.Store(true)
	if err == nil {
		return nil
	}
	err = m.startError(startCtx, err)
	killCtx, cancelKill := context.WithTimeout(context.WithoutCancel(ctx), harness.KillTimeout)
	defer cancelKill()
	return errors.Join(err, m.kill(killCtx))
}

// Pause freezes the container with docker pause; it blocks until Docker
// reports it frozen, bounded by ctx. Pausing a paused master is a no-op.
func (m *containerMaster) Pause(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running.Load() {
		return fmt.Errorf("%s: pause: %w", m.name, ErrNotRunning)
	}
	if m.paused {
		return nil
	}
	if _, err := m.docker.ContainerPause(ctx, m.id, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("%s: docker pause: %w", m.name, err)
	}
	m.paused = true
	return nil
}

// Resume thaws a paused container with docker unpause, bounded by ctx.
// Resuming a master that is not paused is a no-op.
func (m *containerMaster) Resume(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running.Load() {
		return fmt.Errorf("%s: resume: %w", m.name, ErrNotRunning)
	}
	if !m.paused {
		return nil
	}
	if _, err := m.docker.ContainerUnpause(ctx, m.id, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("%s: docker unpause: %w", m.name, err)
	}
	m.paused = false
	return nil
}

// remove force-removes the container with its volumes, bounded by ctx. A
// container that is already gone is not an error.
func (m *containerMaster) remove(ctx context.Context) error {
	m.running.Store(false)
	_, err := m.docker.ContainerRemove(ctx, m.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s: docker rm %.12s: %w", m.name, m.id, err)
	}
	return nil
}

// removeContainers removes the masters' containers in parallel and closes
// the Docker client. It is the cluster's cleanup, run after the kills.
func removeContainers(docker *testcontainers.DockerClient, masters []*containerMaster) error {
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, m := range masters {
		if m == nil {
			continue
		}
		wg.Go(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.id != "" {
				errs[i] = m.remove(ctx)
			}
			// Once removed, the container no longer publishes the port.
			errs[i] = errors.Join(errs[i], m.lease.Release())
		})
	}
	wg.Wait()
	return errors.Join(append(errs, docker.Close())...)
}

// pingStrategy is a testcontainers wait strategy: ready once redis answers
// PING on addr (the published port). It needs nothing inside the image, not
// even a shell, and is bounded by the context testcontainers passes.
type pingStrategy struct{ addr string }

var _ wait.Strategy = pingStrategy{}

func (s pingStrategy) String() string { return "PING on " + s.addr }

// WaitUntilReady polls until PING succeeds, the container stops running or
// ctx is done.
func (s pingStrategy) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	for i := 0; ; i++ {
		err := ping(ctx, s.addr)
		if err == nil {
			return nil
		}
		// Now and then, check that the container is still alive.
		if i%10 == 9 {
			if st, stErr := target.State(ctx); stErr == nil && !st.Running {
				return fmt.Errorf("container stopped (exit code %d) before answering PING: %w", st.ExitCode, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last PING: %v)", ctx.Err(), err)
		case <-time.After(harness.PollInterval):
		}
	}
}

// ping sends PING on a fresh connection to addr and expects +PONG.
func ping(ctx context.Context, addr string) error {
	return harness.PingThen(ctx, addr, "", nil)
}

// logfLogger adapts a Printf-like function to testcontainers' Logger.
type logfLogger func(format string, args ...any)

func (f logfLogger) Printf(format string, args ...any) { f(format, args...) }
