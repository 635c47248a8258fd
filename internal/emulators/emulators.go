// Package emulators runs the Google Cloud emulators that the Google Cloud CLI
// ships (Spanner, Bigtable, Pub/Sub, Firestore) and a Cloud Storage emulator
// (fake-gcs-server, in process) on loopback ports, and provisions them from
// shared/topology: the local stack (make run) and every emulator-backed test
// use it.
//
// Nothing is left behind: no pid files, no fixed ports by default, and the
// emulators die with the process that started them, however it dies.
package emulators

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Emulator names, as used in log file names and errors.
const (
	Spanner   = "spanner"
	Bigtable  = "bigtable"
	PubSub    = "pubsub"
	Firestore = "firestore"
	Storage   = "storage"
)

// Environment variables the client libraries read to reach an emulator.
const (
	EnvSpanner   = "SPANNER_EMULATOR_HOST"
	EnvBigtable  = "BIGTABLE_EMULATOR_HOST"
	EnvPubSub    = "PUBSUB_EMULATOR_HOST"
	EnvFirestore = "FIRESTORE_EMULATOR_HOST"
	EnvStorage   = "STORAGE_EMULATOR_HOST"
)

// Hosts are the host:port addresses of the five emulators (gRPC for Spanner,
// Bigtable and Pub/Sub; gRPC and HTTP for Firestore; HTTP for Cloud Storage).
type Hosts struct {
	Spanner, Bigtable, PubSub, Firestore, Storage string
}

// Options tune Start. The zero value is fine.
type Options struct {
	// Ports fix an emulator's port; zero picks a free loopback port.
	SpannerPort, SpannerHTTPPort, BigtablePort, PubSubPort, FirestorePort, StoragePort int
	// LogDir, when set, receives each emulator's output in <name>.log.
	LogDir string
	// Output, when set and LogDir is not, receives the emulators' output,
	// each line prefixed with "[name] ". Else the output is discarded (the
	// end of it still appears in the error when an emulator fails).
	Output io.Writer
	// StartTimeout bounds the wait for all emulators to answer; default 5
	// minutes: a JVM on a busy machine can take minutes to answer, and an
	// emulator that exits ends the wait at once.
	StartTimeout time.Duration
	// SDKRoot is the Google Cloud CLI root; default SDKRoot().
	SDKRoot string
}

// Stack is a running set of emulators, started by Start or found by Attach.
type Stack struct {
	Hosts Hosts

	spawner  *spawner
	procs    []*process
	storage  *fakestorage.Server // in process
	closeLog func() error        // the storage emulator's log
	stopOnce sync.Once
}

// Env returns the environment variables that point the client libraries at
// the stack.
func (s *Stack) Env() map[string]string {
	return map[string]string{
		EnvSpanner:   s.Hosts.Spanner,
		EnvBigtable:  s.Hosts.Bigtable,
		EnvPubSub:    s.Hosts.PubSub,
		EnvFirestore: s.Hosts.Firestore,
		EnvStorage:   s.Hosts.Storage,
	}
}

// Attach returns the stack named by the five *_EMULATOR_HOST variables when
// all of them are set. Stop on an attached stack does nothing: whoever started
// it owns it.
func Attach() (*Stack, bool) {
	h := Hosts{
		Spanner:   os.Getenv(EnvSpanner),
		Bigtable:  os.Getenv(EnvBigtable),
		PubSub:    os.Getenv(EnvPubSub),
		Firestore: os.Getenv(EnvFirestore),
		Storage:   os.Getenv(EnvStorage),
	}
	if h.Spanner == "" || h.Bigtable == "" || h.PubSub == "" || h.Firestore == "" || h.Storage == "" {
		return nil, false
	}
	return &Stack{Hosts: h}, true
}

// ProcessGroups returns the process group id of each running emulator
// process; each group holds the emulator, whatever it forked, and its
// watchdog. The Cloud Storage emulator runs in this process and has none.
func (s *Stack) ProcessGroups() []int {
	var ids []int
	for _, p := range s.procs {
		ids = append(ids, p.pgid())
	}
	return ids
}

// Stop terminates every emulator the stack started (SIGTERM to each process
// group, SIGKILL after a grace period) and waits for them. It is safe to call
// more than once.
func (s *Stack) Stop() {
	s.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range s.procs {
			wg.Go(p.stop)
		}
		wg.Wait()
		if s.spawner != nil {
			s.spawner.close()
		}
		if s.storage != nil {
			s.storage.Stop()
		}
		if s.closeLog != nil {
			_ = s.closeLog()
		}
	})
}

// Start starts the five emulators in parallel and returns once each answers a
// real request, or fails with the reason and the end of the emulator's output.
// On failure nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("emulators.Start: %w", err)
		}
	}()
	root := opts.SDKRoot
	if root == "" {
		if root, err = SDKRoot(); err != nil {
			return nil, err
		}
	} else if err := checkBinaries(root); err != nil {
		return nil, err
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 5 * time.Minute
	}
	if opts.LogDir != "" {
		if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	s := &Stack{spawner: newSpawner()}
	var outMu sync.Mutex
	out, closeLog, err := output(Storage, opts, &outMu)
	if err != nil {
		return nil, err
	}
	s.closeLog = closeLog
	if s.storage, s.Hosts.Storage, err = startStorage(opts.StoragePort, out); err != nil {
		s.Stop()
		return nil, err
	}
	specs := []emulatorSpec{
		spannerSpec(root, opts.SpannerPort, opts.SpannerHTTPPort),
		bigtableSpec(root, opts.BigtablePort),
		pubsubSpec(root, opts.PubSubPort),
		firestoreSpec(root, opts.FirestorePort),
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	hosts := make([]string, len(specs))
	for i, spec := range specs {
		wg.Go(func() {
			p, host, err := startAndProbe(ctx, s.spawner, spec, opts, &outMu)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if len(errs) == 0 || !errors.Is(err, context.Canceled) {
					errs = append(errs, err)
				}
				cancel() // one failure fails the stack: stop waiting for the others
				return
			}
			s.procs = append(s.procs, p)
			hosts[i] = host
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		s.Stop()
		return nil, errors.Join(errs...)
	}
	s.Hosts.Spanner, s.Hosts.Bigtable, s.Hosts.PubSub, s.Hosts.Firestore = hosts[0], hosts[1], hosts[2], hosts[3]
	return s, nil
}

// emulatorSpec describes how to run and probe one emulator. args receives the
// ports chosen for it.
type emulatorSpec struct {
	name  string
	ports []int // fixed ports, 0 = pick one
	args  func(ports []int) []string
	probe func(ctx context.Context, host string) error
}

// startAndProbe starts one emulator and waits until it answers. When it exits
// early on a port it picked itself (another process took the port between
// the pick and the bind), it tries again on new ports.
func startAndProbe(ctx context.Context, sp *spawner, spec emulatorSpec, opts Options, outMu *sync.Mutex) (*process, string, error) {
	fixed := true
	for _, p := range spec.ports {
		fixed = fixed && p != 0
	}
	for attempt := 1; ; attempt++ {
		ports := make([]int, len(spec.ports))
		for i, p := range spec.ports {
			if p == 0 {
				var err error
				if p, err = FreePort(); err != nil {
					return nil, "", fmt.Errorf("%s emulator: %w", spec.name, err)
				}
			}
			ports[i] = p
		}
		out, closeLog, err := output(spec.name, opts, outMu)
		if err != nil {
			return nil, "", err
		}
		p, err := startProcess(sp, spec.name, spec.args(ports), out, closeLog)
		if err != nil {
			if closeLog != nil {
				_ = closeLog()
			}
			return nil, "", err
		}
		host := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		err = waitReady(ctx, p, host, spec.probe)
		if err == nil {
			return p, host, nil
		}
		p.stop()
		if errors.Is(err, errExited) && !fixed && attempt < 3 && ctx.Err() == nil {
			continue
		}
		return nil, "", err
	}
}

var errExited = errors.New("exited")

// probeTimeout bounds one readiness probe: long enough for an emulator
// that answers slowly on a busy machine to pass.
const probeTimeout = 10 * time.Second

// waitReady probes host until it answers, the emulator exits or ctx ends.
// An exit wins over everything else: it is the real reason, and a probe
// answered after it came from some other process on that port.
func waitReady(ctx context.Context, p *process, host string, probe func(context.Context, string) error) error {
	exited := p.exitError
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		go func() { // an exit ends a probe that would otherwise wait its time out
			select {
			case <-p.exited:
				cancel()
			case <-pctx.Done():
			}
		}()
		last := probe(pctx, host)
		cancel()
		select {
		case <-p.exited:
			return exited()
		default:
		}
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return exited()
		case <-ctx.Done():
			select {
			case <-p.exited:
				return exited()
			default:
			}
			return fmt.Errorf("%s emulator on %s did not answer in time (last probe: %v): %w\n%s", p.name, host, last, ctx.Err(), p.output.String())
		case <-tick.C:
		}
	}
}

func output(name string, opts Options, mu *sync.Mutex) (io.Writer, func() error, error) {
	switch {
	case opts.LogDir != "":
		f, err := os.Create(filepath.Join(opts.LogDir, name+".log"))
		if err != nil {
			return nil, nil, err
		}
		return f, f.Close, nil
	case opts.Output != nil:
		return &prefixWriter{mu: mu, w: opts.Output, prefix: []byte("[" + name + "] ")}, nil, nil
	default:
		return io.Discard, nil, nil
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
