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
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	var errs []error
	fail := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	s := Security{Protocol: strings.ToUpper(get("KAFKA_SECURITY_PROTOCOL"))}
	switch s.Protocol {
	case "":
		s.Protocol = Plaintext
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
	default:
		fail("KAFKA_SECURITY_PROTOCOL", "want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got %q", s.Protocol)
		return Security{}, errors.Join(errs...)
	}

	mechanism, user := strings.ToUpper(get("KAFKA_SASL_MECHANISM")), get("KAFKA_SASL_USERNAME")
	password, _ := lookup("KAFKA_SASL_PASSWORD")
	passwordFile := get("KAFKA_SASL_PASSWORD_FILE")
	if s.sasl() {
		switch mechanism {
		case "":
			mechanism = ScramSHA512
		case ScramSHA512, ScramSHA256, PlainSASL:
		default:
			fail("KAFKA_SASL_MECHANISM", "want SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN, got %q", mechanism)
		}
		s.Mechanism, s.Username = mechanism, user
		if user == "" {
			fail("KAFKA_SASL_USERNAME", "required with KAFKA_SECURITY_PROTOCOL=%s", s.Protocol)
		}
		switch {
		case password != "" && passwordFile != "":
			fail("KAFKA_SASL_PASSWORD", "set it or KAFKA_SASL_PASSWORD_FILE, not both")
		case passwordFile != "":
			b, err := os.ReadFile(passwordFile)
			if err != nil {
				fail("KAFKA_SASL_PASSWORD_FILE", "%v", err)
			}
			s.Password = strings.TrimRight(string(b), "\r\n")
			if err == nil && s.Password == "" {
				fail("KAFKA_SASL_PASSWORD_FILE", "%s is empty", passwordFile)
			}
		case password != "":
			s.Password = password
		default:
			fail("KAFKA_SASL_PASSWORD", "required with KAFKA_SECURITY_PROTOCOL=%s (or KAFKA_SASL_PASSWORD_FILE)", s.Protocol)
		}
		if mechanism == PlainSASL && s.Protocol == SASLPlaintext {
			fail("KAFKA_SASL_MECHANISM", "PLAIN sends the password in the clear: use it with SASL_SSL only")
		}
	} else {
		for _, name := range []string{"KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_SASL_PASSWORD_FILE"} {
			if v, _ := lookup(name); strings.TrimSpace(v) != "" {
				fail(name, "set, but KAFKA_SECURITY_PROTOCOL=%s uses no SASL (want SASL_SSL or SASL_PLAINTEXT)", s.Protocol)
			}
		}
	}

	caFile, certFile, keyFile, serverName := get("KAFKA_TLS_CA_FILE"), get("KAFKA_TLS_CERT_FILE"), get("KAFKA_TLS_KEY_FILE"), get("KAFKA_TLS_SERVER_NAME")
	if !s.tls() {
		for name, v := range map[string]string{"KAFKA_TLS_CA_FILE": caFile, "KAFKA_TLS_CERT_FILE": certFile, "KAFKA_TLS_KEY_FILE": keyFile, "KAFKA_TLS_SERVER_NAME": serverName} {
			if v != "" {
				fail(name, "set, but KAFKA_SECURITY_PROTOCOL=%s uses no TLS (want SSL or SASL_SSL)", s.Protocol)
			}
		}
		return s, sortedJoin(errs)
	}
	s.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			fail("KAFKA_TLS_CA_FILE", "%v", err)
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				fail("KAFKA_TLS_CA_FILE", "%s holds no PEM certificate", caFile)
			}
			s.TLS.RootCAs = pool
		}
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			fail("KAFKA_TLS_CERT_FILE", "with KAFKA_TLS_KEY_FILE: %v", err)
		}
		s.TLS.Certificates = []tls.Certificate{cert}
	case certFile != "":
		fail("KAFKA_TLS_KEY_FILE", "required with KAFKA_TLS_CERT_FILE")
	case keyFile != "":
		fail("KAFKA_TLS_CERT_FILE", "required with KAFKA_TLS_KEY_FILE")
	}
	return s, sortedJoin(errs)
}

// sortedJoin joins errs in a stable order (map iteration above is not).
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
