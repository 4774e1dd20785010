package kafkabroker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// ApacheOptions configures StartApache.
type ApacheOptions struct {
	// Dir holds the broker's log dirs (Dir/kraft-logs), server.properties
	// and the broker's output (Dir/broker.log). If it already holds a
	// formatted broker, that broker starts again with its data. Empty means
	// a new temporary directory, removed by Close.
	Dir string
	// Port is the PLAINTEXT listener port and ControllerPort the KRaft
	// controller port, both on 127.0.0.1; zero picks free ports.
	Port, ControllerPort int
	// AdvertisedAddr is the host:port the broker tells clients to connect
	// to, e.g. a faultproxy listener in front of Port. Empty means
	// 127.0.0.1:Port.
	AdvertisedAddr string
	// Partitions is num.partitions, the partition count of topics created
	// without one; zero means DefaultPartitions.
	Partitions int
	// CacheDir is the jar cache (see EnsureJars); empty means
	// DefaultCacheDir(Version).
	CacheDir string
	// Version is the Apache Kafka version; empty means DefaultVersion.
	Version string
	// HeapMB is the JVM heap size; zero means 512.
	HeapMB int
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// SASLSSL, when set, adds a SASL_SSL listener beside the PLAINTEXT
	// one, which the broker itself, Addrs and the readiness checks keep
	// using. Nil (the default): PLAINTEXT only.
	SASLSSL *SASLSSLListener
}

// SASLSSLListener is a SASL_SSL listener on 127.0.0.1, authenticating
// clients with SCRAM over TLS.
type SASLSSLListener struct {
	// Port is the listener's port; zero picks a free one.
	Port int
	// CertFile and KeyFile are the broker's certificate (chain) and its
	// unencrypted PKCS #8 private key, in PEM. The certificate must name
	// 127.0.0.1 (or whatever name the clients verify).
	CertFile, KeyFile string
	// Mechanisms are the SASL mechanisms enabled, SCRAM-SHA-512 and
	// SCRAM-SHA-256; empty means SCRAM-SHA-512.
	Mechanisms []string
	// Users are the SCRAM credentials, name to password, for every
	// mechanism, added when the storage is formatted (kafka-storage format
	// --add-scram): a broker started again on formatted storage keeps the
	// ones it was formatted with.
	Users map[string]string
	// Authorize, when set, turns on the KRaft StandardAuthorizer: a SASL
	// principal may do only what an ACL allows it (no ACL: refused). The
	// PLAINTEXT listener's principal, User:ANONYMOUS (the broker itself,
	// the readiness checks, an admin client over Addrs), is a super user
	// and creates the ACLs.
	Authorize bool
}

// readyTimeout bounds one start, on top of the caller's context: a JVM
// start on a loaded two-core machine can take tens of seconds.
const readyTimeout = 2 * time.Minute

// Apache is a single-node Apache Kafka broker (combined broker and KRaft
// controller) running as a child JVM. The JVM dies with the Go process
// (SIGKILL on parent death). Its methods are safe for concurrent use.
type Apache struct {
	opts       ApacheOptions
	dir        string
	created    bool
	libDir     string
	java       string
	listenAddr string
	advertised string
	saslAddr   string // the SASL_SSL listener's address; empty without one
	logFile    string
	log        *slog.Logger

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited; nil when not started
	output *os.File
}

// StartApache fetches the Kafka jars if needed (EnsureJars), formats the
// storage on first use, starts the broker and waits until it answers
// metadata requests.
func StartApache(ctx context.Context, opts ApacheOptions) (*Apache, error) {
	log := orDiscard(opts.Logger)
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if opts.Partitions == 0 {
		opts.Partitions = DefaultPartitions
	}
	if opts.HeapMB == 0 {
		opts.HeapMB = 512
	}
	java, err := findJava()
	if err != nil {
		return nil, err
	}
	libDir, err := EnsureJars(ctx, opts.CacheDir, opts.Version, log)
	if err != nil {
		return nil, err
	}
	a := &Apache{opts: opts, libDir: libDir, java: java, log: log}
	if opts.Dir == "" {
		if a.dir, err = os.MkdirTemp("", "kafka-"); err != nil {
			return nil, fmt.Errorf("create kafka dir: %w", err)
		}
		a.created = true
	} else {
		if a.dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("kafka dir %q: %w", opts.Dir, err)
		}
		if err := os.MkdirAll(a.dir, 0o755); err != nil {
			return nil, fmt.Errorf("create kafka dir: %w", err)
		}
	}
	fail := func(err error) (*Apache, error) {
		if a.created {
			_ = os.RemoveAll(a.dir)
		}
		return nil, err
	}
	a.logFile = filepath.Join(a.dir, "broker.log")
	if a.opts.Port == 0 {
		if a.opts.Port, err = freePort(); err != nil {
			return fail(err)
		}
	}
	if a.opts.ControllerPort == 0 {
		if a.opts.ControllerPort, err = freePort(); err != nil {
			return fail(err)
		}
	}
	a.listenAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.opts.Port))
	if l := a.opts.SASLSSL; l != nil {
		if l.CertFile == "" || l.KeyFile == "" {
			return fail(errors.New("kafka SASL_SSL listener: CertFile and KeyFile are required"))
		}
		if len(l.Mechanisms) == 0 {
			l.Mechanisms = []string{"SCRAM-SHA-512"}
		}
		if l.Port == 0 {
			if l.Port, err = freePort(); err != nil {
				return fail(err)
			}
		}
		a.saslAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port))
	}
	a.advertised = a.opts.AdvertisedAddr
	if a.advertised == "" {
		a.advertised = a.listenAddr
	}
	if err := a.writeConfig(); err != nil {
		return fail(err)
	}
	if err := a.format(ctx); err != nil {
		return fail(err)
	}
	if err := a.Start(ctx); err != nil {
		return fail(err)
	}
	return a, nil
}

// Addrs returns the advertised broker address, the one clients bootstrap
// from.
func (a *Apache) Addrs() []string { return []string{a.advertised} }

// SASLSSLAddr returns the address of the SASL_SSL listener (see
// ApacheOptions.SASLSSL), or "" without one.
func (a *Apache) SASLSSLAddr() string { return a.saslAddr }

// ListenAddr returns the address the broker really listens on, the one a
// proxy in front of it forwards to.
func (a *Apache) ListenAddr() string { return a.listenAddr }

// Dir returns the directory holding the broker's data, config and output.
func (a *Apache) Dir() string { return a.dir }

// LogFile returns the file holding the broker's stdout and stderr.
func (a *Apache) LogFile() string { return a.logFile }

// Start starts the broker again after Kill or Stop, with the same
// directory and ports, and waits until it is ready. Starting a running
// broker is a no-op.
func (a *Apache) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runningLocked() {
		return nil
	}
	err := a.startLocked(ctx)
	if err != nil && ctx.Err() == nil {
		// A JVM on a loaded machine occasionally wedges on start, or loses
		// a port to another process starting at the same moment; one more
		// try is cheaper than a failed test run.
		a.log.Warn("kafka broker did not become ready, retrying once", "err", err)
		err = a.startLocked(ctx)
	}
	return err
}

var errNotReady = errors.New("kafka broker not ready")

// explainLog picks from a failed start's log the lines that say why (errors
// and exceptions, which the shutdown that follows them buries), then its
// last lines.
func explainLog(file, log string) string {
	var why []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, " ERROR ") || strings.Contains(line, "FATAL") || strings.Contains(line, "Exception:") {
			why = append(why, line)
			if len(why) == 15 {
				break
			}
		}
	}
	return fmt.Sprintf("error lines of %s:\n%s\nlast lines:\n%s", file, strings.Join(why, "\n"), lastLines(log, 15))
}

func (a *Apache) startLocked(ctx context.Context) error {
	if err := checkPortFree("kafka broker", a.opts.Port); err != nil {
		return err
	}
	if err := checkPortFree("kafka controller", a.opts.ControllerPort); err != nil {
		return err
	}
	if a.opts.SASLSSL != nil {
		if err := checkPortFree("kafka SASL_SSL", a.opts.SASLSSL.Port); err != nil {
			return err
		}
	}
	out, err := os.OpenFile(a.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open kafka broker log: %w", err)
	}
	logStart, _ := out.Seek(0, io.SeekEnd)
	fmt.Fprintf(out, "=== kafkabroker: starting broker at %s ===\n", time.Now().Format(time.RFC3339))

	args := append(a.jvmArgs(), "kafka.Kafka", filepath.Join(a.dir, "server.properties"))
	cmd := exec.Command(a.java, args...)
	cmd.Dir = a.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	a.log.Info("starting kafka broker", "addr", a.listenAddr, "advertised", a.advertised, "dir", a.dir)
	began := time.Now()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start kafka broker (%s): %w", a.java, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	a.cmd, a.exited, a.output = cmd, exited, out

	if err := a.waitReady(ctx, exited); err != nil {
		a.killLocked()
		return fmt.Errorf("start kafka broker on %s: %w\n%s", a.listenAddr, err, explainLog(a.logFile, readFrom(a.logFile, logStart)))
	}
	a.log.Info("kafka broker ready", "addr", a.listenAddr, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// waitReady polls the broker's own listener with metadata requests until
// it lists a broker (itself, registered and unfenced).
func (a *Apache) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	cfg := adminConfig()
	cfg.Net.DialTimeout = time.Second
	var last error
	for {
		if last = brokerAnswers(a.listenAddr, cfg); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("kafka broker exited during start: %s", a.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("%w after %s: %v (last: %v)", errNotReady, readyTimeout, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func brokerAnswers(addr string, cfg *sarama.Config) error {
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		return err
	}
	defer b.Close()
	resp, err := b.GetMetadata(sarama.NewMetadataRequest(cfg.Version, nil))
	if err != nil {
		return err
	}
	if len(resp.Brokers) == 0 {
		return errors.New("metadata lists no brokers yet")
	}
	return nil
}

// Kill kills the broker with SIGKILL, as a crash would, and waits for it
// to exit. Killing a stopped broker is a no-op.
func (a *Apache) Kill() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return nil
	}
	a.log.Info("killing kafka broker", "addr", a.listenAddr)
	a.killLocked()
	return nil
}

func (a *Apache) killLocked() {
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	<-a.exited
	a.releaseLocked()
}

func (a *Apache) releaseLocked() {
	_ = a.output.Close()
	a.cmd, a.exited, a.output = nil, nil, nil
}

func (a *Apache) runningLocked() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.exited: // died on its own
		a.releaseLocked()
		return false
	default:
		return true
	}
}

// Stop shuts the broker down with SIGTERM (a controlled shutdown) and waits
// for it to exit, killing it if ctx ends or it takes over a minute.
// Stopping a stopped broker is a no-op.
func (a *Apache) Stop(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.runningLocked() {
		return nil
	}
	a.log.Info("stopping kafka broker", "addr", a.listenAddr)
	began := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		a.killLocked()
		return nil
	}
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case <-a.exited:
		a.releaseLocked()
		a.log.Info("kafka broker stopped", "addr", a.listenAddr, "took", time.Since(began).Round(time.Millisecond))
		return nil
	case <-ctx.Done():
		a.killLocked()
		return fmt.Errorf("stop kafka broker: %w; killed it", ctx.Err())
	case <-timer.C:
		a.killLocked()
		return errors.New("stop kafka broker: no exit within a minute of SIGTERM; killed it")
	}
}

// Close stops the broker and removes its directory if StartApache created
// it as a temporary directory.
func (a *Apache) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := a.Stop(ctx)
	if a.created {
		if rerr := os.RemoveAll(a.dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove kafka dir: %w", rerr))
		}
	}
	return err
}

func (a *Apache) jvmArgs() []string {
	heap := strconv.Itoa(a.opts.HeapMB) + "m"
	return []string{
		"-Xms" + heap, "-Xmx" + heap,
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
		"-Djava.awt.headless=true",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-cp", filepath.Join(a.libDir, "*"),
	}
}

// format writes meta.properties into the log dir (kafka-storage format)
// unless it is there already.
func (a *Apache) format(ctx context.Context) error {
	logDirs := filepath.Join(a.dir, "kraft-logs")
	if _, err := os.Stat(filepath.Join(logDirs, "meta.properties")); err == nil {
		return nil
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return fmt.Errorf("make kafka cluster id: %w", err)
	}
	// A base64url id may start with '-': passed as --cluster-id=<id>, it
	// cannot be taken for an option.
	clusterID := base64.RawURLEncoding.EncodeToString(id)
	args := []string{"-Xmx256m", "-cp", filepath.Join(a.libDir, "*"),
		"kafka.tools.StorageTool", "format",
		"--cluster-id=" + clusterID, "-c", filepath.Join(a.dir, "server.properties"), "--ignore-formatted"}
	if l := a.opts.SASLSSL; l != nil {
		for _, mech := range l.Mechanisms {
			for _, user := range slices.Sorted(maps.Keys(l.Users)) {
				args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mech, user, l.Users[user]))
			}
		}
	}
	cmd := exec.CommandContext(ctx, a.java, args...)
	cmd.Dir = a.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	a.log.Info("formatting kafka storage", "dir", logDirs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("format kafka storage in %s: %w\n%s", logDirs, err, lastLines(string(out), 20))
	}
	return nil
}

func (a *Apache) writeConfig() error {
	props := []string{
		"# Written by kafkabroker on start; edits are lost.",
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", a.opts.ControllerPort),
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", a.opts.Port, a.opts.ControllerPort),
		"advertised.listeners=PLAINTEXT://" + a.advertised,
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs=" + filepath.Join(a.dir, "kraft-logs"),
		fmt.Sprintf("num.partitions=%d", a.opts.Partitions),
		"default.replication.factor=1",
		"auto.create.topics.enable=false",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=1",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"share.coordinator.state.topic.num.partitions=1",
		"group.initial.rebalance.delay.ms=0",
		"log.cleaner.dedupe.buffer.size=2097152",
		// A broker restarted after a crash cannot register until the
		// controller has fenced its previous incarnation, after the
		// session timeout (default 9 s): keep that wait short.
		"broker.session.timeout.ms=4500",
		"broker.heartbeat.interval.ms=1000",
		"num.network.threads=2",
		"num.io.threads=4",
	}
	if l := a.opts.SASLSSL; l != nil {
		keystore, err := a.writeKeystore(l)
		if err != nil {
			return err
		}
		props = slices.DeleteFunc(props, func(p string) bool {
			return strings.HasPrefix(p, "listeners=") || strings.HasPrefix(p, "advertised.listeners=") ||
				strings.HasPrefix(p, "listener.security.protocol.map=")
		})
		mechs := strings.Join(l.Mechanisms, ",")
		props = append(props,
			fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d,SASL_SSL://%s", a.opts.Port, a.opts.ControllerPort, a.saslAddr),
			"advertised.listeners=PLAINTEXT://"+a.advertised+",SASL_SSL://"+a.saslAddr,
			"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
			"sasl.enabled.mechanisms="+mechs,
			"listener.name.sasl_ssl.ssl.keystore.type=PEM",
			"listener.name.sasl_ssl.ssl.keystore.location="+keystore,
			"listener.name.sasl_ssl.ssl.client.auth=none",
		)
		if l.Authorize {
			props = append(props,
				"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
				"super.users=User:ANONYMOUS",
				"allow.everyone.if.no.acl.found=false")
		}
		for _, mech := range l.Mechanisms {
			props = append(props, "listener.name.sasl_ssl."+strings.ToLower(mech)+
				".sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;")
		}
	}
	// The shared settings (message.max.bytes, see kafkaconf's Size limits),
	// in a stable order.
	shared := BrokerConfigs()
	for _, k := range slices.Sorted(maps.Keys(shared)) {
		props = append(props, k+"="+shared[k])
	}
	path := filepath.Join(a.dir, "server.properties")
	if err := os.WriteFile(path, []byte(strings.Join(props, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeKeystore writes the SASL_SSL listener's key and certificate chain
// into one PEM file, the form Kafka's PEM key store reads.
func (a *Apache) writeKeystore(l *SASLSSLListener) (string, error) {
	key, err := os.ReadFile(l.KeyFile)
	if err != nil {
		return "", fmt.Errorf("kafka SASL_SSL key: %w", err)
	}
	cert, err := os.ReadFile(l.CertFile)
	if err != nil {
		return "", fmt.Errorf("kafka SASL_SSL certificate: %w", err)
	}
	path := filepath.Join(a.dir, "sasl-ssl-keystore.pem")
	if err := os.WriteFile(path, append(append(key, '\n'), cert...), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// findJava returns $JAVA_HOME/bin/java, or java from PATH.
func findJava() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("find java: Apache Kafka needs Java 17 or newer; install a JDK or set JAVA_HOME: %w", err)
	}
	return p, nil
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
