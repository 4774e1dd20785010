package kafkaconf

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// Security protocols, as Kafka's security.protocol names them.
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// SASL mechanisms the clients support.
const (
	ScramSHA512 = "SCRAM-SHA-512"
	ScramSHA256 = "SCRAM-SHA-256"
	PlainSASL   = "PLAIN"
)

// EnvNames are the variables SecurityFromEnv reads.
var EnvNames = []string{
	"KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD",
	"KAFKA_SASL_PASSWORD_FILE", "KAFKA_TLS_CA_FILE", "KAFKA_TLS_CERT_FILE", "KAFKA_TLS_KEY_FILE",
	"KAFKA_TLS_SERVER_NAME",
}

// Security is how the clients reach the brokers: in the clear or over TLS,
// with or without SASL. The zero value is PLAINTEXT.
type Security struct {
	Protocol  string // Plaintext (""), SSL, SASLPlaintext or SASLSSL
	Mechanism string // ScramSHA512, ScramSHA256 or PlainSASL; with SASL only
	Username  string
	Password  string
	// TLS is the client's TLS configuration (roots, client certificate,
	// server name); with SSL and SASL_SSL only. Nil there means the
	// system's roots.
	TLS *tls.Config
}

// String describes s without its secrets, for logs.
func (s Security) String() string {
	p := s.Protocol
	if p == "" {
		p = Plaintext
	}
	if s.sasl() {
		return fmt.Sprintf("%s (%s as %q)", p, s.Mechanism, s.Username)
	}
	return p
}

func (s Security) tls() bool  { return s.Protocol == SSL || s.Protocol == SASLSSL }
func (s Security) sasl() bool { return s.Protocol == SASLPlaintext || s.Protocol == SASLSSL }

// Apply sets c's network security to s, every field of it, so a
// configuration that had TLS or SASL loses them under a PLAINTEXT s.
func (s Security) Apply(c *sarama.Config) {
	c.Net.TLS.Enable = s.tls()
	c.Net.TLS.Config = nil
	if s.tls() {
		if s.TLS != nil {
			c.Net.TLS.Config = s.TLS.Clone()
		} else {
			c.Net.TLS.Config = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	c.Net.SASL.Enable = s.sasl()
	c.Net.SASL.Handshake = true
	c.Net.SASL.User, c.Net.SASL.Password = "", ""
	c.Net.SASL.Mechanism = ""
	c.Net.SASL.SCRAMClientGeneratorFunc = nil
	if !s.sasl() {
		return
	}
	c.Net.SASL.User, c.Net.SASL.Password = s.Username, s.Password
	switch s.Mechanism {
	case ScramSHA512:
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha512.New} }
	case ScramSHA256:
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha256.New} }
	default:
		c.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	}
}

// current is the process's Security, applied by New to every client
// configuration (producers, consumers, admin clients); nil is PLAINTEXT.
var current atomic.Pointer[Security]

// Use makes s the Security of every configuration New and
// NewIdempotentProducer return from now on. A service calls it once at
// start, with what SecurityFromEnv read.
func Use(s Security) { current.Store(&s) }

// Current returns the Security New applies.
func Current() Security {
	if s := current.Load(); s != nil {
		return *s
	}
	return Security{}
}

// SecurityFromEnv reads the clients' security settings:
//
//	KAFKA_SECURITY_PROTOCOL   PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
//	KAFKA_SASL_MECHANISM      SCRAM-SHA-512 (default), SCRAM-SHA-256 or PLAIN
//	KAFKA_SASL_USERNAME       required with SASL
//	KAFKA_SASL_PASSWORD       or KAFKA_SASL_PASSWORD_FILE (one of them), required with SASL
//	KAFKA_TLS_CA_FILE         PEM certificates to trust (default: the system's roots)
//	KAFKA_TLS_CERT_FILE       a client certificate (PEM), with KAFKA_TLS_KEY_FILE
//	KAFKA_TLS_KEY_FILE
//	KAFKA_TLS_SERVER_NAME     the name the brokers' certificates must carry (default: the host dialled)
//
// Inconsistent settings are refused, each problem named by its variable: SASL
// without a user or password, SASL or TLS settings under a protocol that does
// not use them, a CA file without a certificate, a certificate without its
// key. Errors never echo a password.
func SecurityFromEnv(lookup func(string) (string, bool)) (Security, error) {
	r := &envReader{lookup: lookup}
	s := Security{Protocol: strings.ToUpper(r.get("KAFKA_SECURITY_PROTOCOL"))}
	switch s.Protocol {
	case "":
		s.Protocol = Plaintext
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
	default:
		r.fail("KAFKA_SECURITY_PROTOCOL", "want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got %q", s.Protocol)
		return Security{}, errors.Join(r.errs...)
	}
	if s.sasl() {
		r.readSASL(&s)
	} else {
		r.refuseUnused(saslEnvNames, "set, but KAFKA_SECURITY_PROTOCOL=%s uses no SASL (want SASL_SSL or SASL_PLAINTEXT)", s.Protocol)
	}
	if s.tls() {
		s.TLS = r.readTLS()
	} else {
		r.refuseUnused(tlsEnvNames, "set, but KAFKA_SECURITY_PROTOCOL=%s uses no TLS (want SSL or SASL_SSL)", s.Protocol)
	}
	return s, sortedJoin(r.errs)
}

var (
	saslEnvNames = []string{"KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_SASL_PASSWORD_FILE"}
	tlsEnvNames  = []string{"KAFKA_TLS_CA_FILE", "KAFKA_TLS_CERT_FILE", "KAFKA_TLS_KEY_FILE", "KAFKA_TLS_SERVER_NAME"}
)

// envReader reads settings and collects what is wrong with them, each
// problem named by its variable.
type envReader struct {
	lookup func(string) (string, bool)
	errs   []error
}

// get returns the variable name, trimmed.
func (r *envReader) get(name string) string {
	v, _ := r.lookup(name)
	return strings.TrimSpace(v)
}

func (r *envReader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
}

// refuseUnused fails each of names that is set, saying why (format, args).
func (r *envReader) refuseUnused(names []string, format string, args ...any) {
	for _, name := range names {
		if r.get(name) != "" {
			r.fail(name, format, args...)
		}
	}
}

// readSASL reads the mechanism, user and password of s, a SASL protocol.
func (r *envReader) readSASL(s *Security) {
	mechanism := strings.ToUpper(r.get("KAFKA_SASL_MECHANISM"))
	switch mechanism {
	case "":
		mechanism = ScramSHA512
	case ScramSHA512, ScramSHA256, PlainSASL:
	default:
		r.fail("KAFKA_SASL_MECHANISM", "want SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN, got %q", mechanism)
	}
	s.Mechanism, s.Username = mechanism, r.get("KAFKA_SASL_USERNAME")
	if s.Username == "" {
		r.fail("KAFKA_SASL_USERNAME", "required with KAFKA_SECURITY_PROTOCOL=%s", s.Protocol)
	}
	s.Password = r.readPassword(s.Protocol)
	if mechanism == PlainSASL && s.Protocol == SASLPlaintext {
		r.fail("KAFKA_SASL_MECHANISM", "PLAIN sends the password in the clear: use it with SASL_SSL only")
	}
}

// readPassword returns the SASL password, from KAFKA_SASL_PASSWORD (as is)
// or the file KAFKA_SASL_PASSWORD_FILE names, never both.
func (r *envReader) readPassword(protocol string) string {
	password, _ := r.lookup("KAFKA_SASL_PASSWORD")
	file := r.get("KAFKA_SASL_PASSWORD_FILE")
	switch {
	case password != "" && file != "":
		r.fail("KAFKA_SASL_PASSWORD", "set it or KAFKA_SASL_PASSWORD_FILE, not both")
		return ""
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			r.fail("KAFKA_SASL_PASSWORD_FILE", "%v", err)
		}
		p := strings.TrimRight(string(b), "\r\n")
		if err == nil && p == "" {
			r.fail("KAFKA_SASL_PASSWORD_FILE", "%s is empty", file)
		}
		return p
	case password != "":
		return password
	default:
		r.fail("KAFKA_SASL_PASSWORD", "required with KAFKA_SECURITY_PROTOCOL=%s (or KAFKA_SASL_PASSWORD_FILE)", protocol)
		return ""
	}
}

// readTLS reads the TLS configuration: the roots to trust, the client
// certificate and the server name.
func (r *envReader) readTLS() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.get("KAFKA_TLS_SERVER_NAME")}
	if caFile := r.get("KAFKA_TLS_CA_FILE"); caFile != "" {
		c.RootCAs = r.readRoots(caFile)
	}
	certFile, keyFile := r.get("KAFKA_TLS_CERT_FILE"), r.get("KAFKA_TLS_KEY_FILE")
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			r.fail("KAFKA_TLS_CERT_FILE", "with KAFKA_TLS_KEY_FILE: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	case certFile != "":
		r.fail("KAFKA_TLS_KEY_FILE", "required with KAFKA_TLS_CERT_FILE")
	case keyFile != "":
		r.fail("KAFKA_TLS_CERT_FILE", "required with KAFKA_TLS_KEY_FILE")
	}
	return c
}

// readRoots returns the certificates in caFile (nil when it cannot be read).
func (r *envReader) readRoots(caFile string) *x509.CertPool {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		r.fail("KAFKA_TLS_CA_FILE", "%v", err)
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		r.fail("KAFKA_TLS_CA_FILE", "%s holds no PEM certificate", caFile)
	}
	return pool
}

// sortedJoin joins errs in a stable order, whatever order they were found in.
func sortedJoin(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	slices.Sort(msgs)
	out := make([]error, len(msgs))
	for i, m := range msgs {
		out[i] = errors.New(m)
	}
	return errors.Join(out...)
}

// scramClient is sarama's SCRAM conversation, by github.com/xdg-go/scram.
type scramClient struct {
	hash func() hash.Hash
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := scram.HashGeneratorFcn(c.hash).NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }
