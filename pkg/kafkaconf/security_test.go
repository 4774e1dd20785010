package kafkaconf_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/testkit/kafkabroker"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestSecurityFromEnvRefusesInconsistentSettings(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, _, _ := writePKI(t, dir)
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string // each a substring of the error; none: valid
	}{
		{"nothing set is PLAINTEXT", map[string]string{}, nil},
		{"unknown protocol", map[string]string{"KAFKA_SECURITY_PROTOCOL": "TLS"}, []string{"KAFKA_SECURITY_PROTOCOL: want PLAINTEXT"}},
		{"SASL without user or password", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
			[]string{"KAFKA_SASL_USERNAME: required", "KAFKA_SASL_PASSWORD: required"}},
		{"SASL with both password forms", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u",
			"KAFKA_SASL_PASSWORD": "p", "KAFKA_SASL_PASSWORD_FILE": pwFile}, []string{"not both"}},
		{"SASL password file missing", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u",
			"KAFKA_SASL_PASSWORD_FILE": filepath.Join(dir, "absent")}, []string{"KAFKA_SASL_PASSWORD_FILE:"}},
		{"unknown mechanism", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u",
			"KAFKA_SASL_PASSWORD": "p", "KAFKA_SASL_MECHANISM": "GSSAPI"}, []string{"KAFKA_SASL_MECHANISM: want SCRAM-SHA-512"}},
		{"PLAIN in the clear", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_USERNAME": "u",
			"KAFKA_SASL_PASSWORD": "p", "KAFKA_SASL_MECHANISM": "PLAIN"}, []string{"SASL_SSL only"}},
		{"SASL settings without SASL", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SASL_PASSWORD": "p"},
			[]string{"KAFKA_SASL_PASSWORD: set, but KAFKA_SECURITY_PROTOCOL=SSL uses no SASL"}},
		{"TLS settings without TLS", map[string]string{"KAFKA_TLS_CA_FILE": ca},
			[]string{"KAFKA_TLS_CA_FILE: set, but KAFKA_SECURITY_PROTOCOL=PLAINTEXT uses no TLS"}},
		{"CA file that does not parse", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_TLS_CA_FILE": notPEM},
			[]string{"KAFKA_TLS_CA_FILE: " + notPEM + " holds no PEM certificate"}},
		{"CA file missing", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_TLS_CA_FILE": filepath.Join(dir, "absent.pem")},
			[]string{"KAFKA_TLS_CA_FILE:"}},
		{"certificate without key", map[string]string{"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_TLS_CERT_FILE": ca},
			[]string{"KAFKA_TLS_KEY_FILE: required with KAFKA_TLS_CERT_FILE"}},
		{"SASL_SSL complete", map[string]string{"KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "KAFKA_SASL_USERNAME": "u",
			"KAFKA_SASL_PASSWORD_FILE": pwFile, "KAFKA_TLS_CA_FILE": ca}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := kafkaconf.SecurityFromEnv(lookup(tt.env))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				c := kafkaconf.New("test")
				s.Apply(c)
				if err := c.Validate(); err != nil {
					t.Fatalf("sarama refuses the configuration: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %v, want an error naming %q", tt.env, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, secret := range []string{"from-file", "=p"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows a password", err)
				}
			}
		})
	}
	s, err := kafkaconf.SecurityFromEnv(lookup(map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD_FILE": pwFile}))
	if err != nil || s.Password != "from-file" || s.Mechanism != kafkaconf.ScramSHA512 {
		t.Fatalf("password file: got %q, mechanism %q, err %v; want from-file, SCRAM-SHA-512", s.Password, s.Mechanism, err)
	}
	if strings.Contains(s.String(), "from-file") {
		t.Fatalf("String() shows the password: %s", s)
	}
}

// TestSASLSSLAgainstApacheKafka starts a real Apache Kafka broker with a
// SASL_SSL listener (a CA and broker certificate made here, SCRAM
// credentials added at format time) and connects to it through kafkaconf as
// the services do: with the right password a producer and a consumer
// work; a wrong password, no TLS, and TLS without the CA are refused.
func TestSASLSSLAgainstApacheKafka(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writePKI(t, dir)
	const user, password = "billing", "right-secret-4d9a"
	a, err := kafkabroker.StartApache(t.Context(), kafkabroker.ApacheOptions{
		SASLSSL: &kafkabroker.SASLSSLListener{CertFile: certFile, KeyFile: keyFile, Users: map[string]string{user: password}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	const topic = "secured"
	if err := kafkabroker.CreateTopics(t.Context(), a.Addrs(), 1, topic); err != nil { // over PLAINTEXT
		t.Fatal(err)
	}
	addrs := []string{a.SASLSSLAddr()}
	env := map[string]string{
		"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
		"KAFKA_SASL_USERNAME": user, "KAFKA_SASL_PASSWORD": password, "KAFKA_TLS_CA_FILE": caFile,
	}
	security := func(t *testing.T, change map[string]string) kafkaconf.Security {
		t.Helper()
		m := map[string]string{}
		for k, v := range env {
			m[k] = v
		}
		for k, v := range change {
			m[k] = v
		}
		s, err := kafkaconf.SecurityFromEnv(lookup(m))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("right password", func(t *testing.T) {
		// Through the process-wide setting, as a service uses it: every
		// configuration New returns carries it.
		kafkaconf.Use(security(t, nil))
		t.Cleanup(func() { kafkaconf.Use(kafkaconf.Security{}) })
		p, err := sarama.NewSyncProducer(addrs, kafkaconf.NewIdempotentProducer("sasl-test"))
		if err != nil {
			t.Fatalf("producer over SASL_SSL: %v", err)
		}
		defer p.Close()
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("over-sasl-ssl")}); err != nil {
			t.Fatalf("produce over SASL_SSL: %v", err)
		}
		c, err := sarama.NewConsumer(addrs, kafkaconf.New("sasl-test-consumer"))
		if err != nil {
			t.Fatalf("consumer over SASL_SSL: %v", err)
		}
		defer c.Close()
		pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		select {
		case m := <-pc.Messages():
			if string(m.Value) != "over-sasl-ssl" {
				t.Fatalf("consumed %q, want over-sasl-ssl", m.Value)
			}
		case err := <-pc.Errors():
			t.Fatalf("consume over SASL_SSL: %v", err)
		case <-t.Context().Done():
			t.Fatal("no message before the test's deadline")
		}
	})

	refused := func(t *testing.T, s kafkaconf.Security, want string) {
		t.Helper()
		for name, cfg := range map[string]*sarama.Config{
			"producer": kafkaconf.NewIdempotentProducer("sasl-test"), "consumer": kafkaconf.New("sasl-test-consumer"),
		} {
			s.Apply(cfg)
			cfg.Metadata.Retry.Max = 0
			var err error
			if name == "producer" {
				var p sarama.SyncProducer
				if p, err = sarama.NewSyncProducer(addrs, cfg); err == nil {
					p.Close()
				}
			} else {
				var c sarama.Consumer
				if c, err = sarama.NewConsumer(addrs, cfg); err == nil {
					c.Close()
				}
			}
			if err == nil {
				t.Fatalf("%s connected with %s", name, s)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: error %q, want one saying %q", name, err, want)
			}
		}
	}
	t.Run("wrong password", func(t *testing.T) {
		s := security(t, map[string]string{"KAFKA_SASL_PASSWORD": "wrong-secret"})
		refused(t, s, sarama.ErrSASLAuthenticationFailed.Error())
	})
	t.Run("no TLS", func(t *testing.T) {
		s := security(t, map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_TLS_CA_FILE": ""})
		refused(t, s, "run out of available brokers")
	})
	t.Run("TLS without the CA", func(t *testing.T) {
		s := security(t, map[string]string{"KAFKA_TLS_CA_FILE": ""})
		refused(t, s, "certificate signed by unknown authority")
	})
	t.Run("PLAINTEXT to the SASL_SSL port", func(t *testing.T) {
		refused(t, kafkaconf.Security{}, "run out of available brokers")
	})
}

// writePKI makes a CA and a broker certificate for 127.0.0.1 signed by it,
// and writes the CA certificate, the broker certificate and its PKCS #8
// key as PEM files into dir.
func writePKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kafka"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("broker.pem", "CERTIFICATE", der), write("broker.key", "PRIVATE KEY", pkcs8)
}

// TestACLsRefuseAnotherServicesTopic starts Apache Kafka with a SASL_SSL
// listener and its StandardAuthorizer, grants each service's principal WRITE
// on the topics events.Writers gives it (as deploy/k8s/README.md says to),
// and checks that usage's principal writing billing.events.v1 is refused
// TopicAuthorizationFailed while billing's may, and usage's may write its
// own topic: only billing can publish what invoice bills.
func TestACLsRefuseAnotherServicesTopic(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writePKI(t, dir)
	users := map[string]string{}
	for _, s := range events.Services {
		users[s] = s + "-secret-7c1e"
	}
	a, err := kafkabroker.StartApache(t.Context(), kafkabroker.ApacheOptions{
		SASLSSL: &kafkabroker.SASLSSLListener{CertFile: certFile, KeyFile: keyFile, Users: users, Authorize: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	if err := kafkabroker.CreateTopics(t.Context(), a.Addrs(), 1, events.AllTopics...); err != nil { // over PLAINTEXT
		t.Fatal(err)
	}
	// The ACLs, as the super user over PLAINTEXT: each principal WRITE and
	// DESCRIBE on the topics it may publish on, nothing else.
	admin, err := sarama.NewClusterAdmin(a.Addrs(), kafkaconf.New("acl-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var acls []*sarama.ResourceAcls
	for _, topic := range events.AllTopics {
		for _, s := range events.Writers(topic) {
			for _, op := range []sarama.AclOperation{sarama.AclOperationWrite, sarama.AclOperationDescribe} {
				acls = append(acls, &sarama.ResourceAcls{
					Resource: sarama.Resource{ResourceType: sarama.AclResourceTopic, ResourceName: topic, ResourcePatternType: sarama.AclPatternLiteral},
					Acls:     []*sarama.Acl{{Principal: "User:" + s, Host: "*", Operation: op, PermissionType: sarama.AclPermissionAllow}},
				})
			}
		}
	}
	if err := admin.CreateACLs(acls); err != nil {
		t.Fatalf("create ACLs: %v", err)
	}
	send := func(t *testing.T, user, topic string) error {
		t.Helper()
		s, err := kafkaconf.SecurityFromEnv(lookup(map[string]string{
			"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": user, "KAFKA_SASL_PASSWORD": users[user], "KAFKA_TLS_CA_FILE": caFile,
		}))
		if err != nil {
			t.Fatal(err)
		}
		cfg := kafkaconf.NewIdempotentProducer("acl-test-" + user)
		s.Apply(cfg)
		cfg.Producer.Retry.Max = 1
		cfg.Metadata.Retry.Max = 1
		p, err := sarama.NewSyncProducer([]string{a.SASLSSLAddr()}, cfg)
		if err != nil {
			return err
		}
		defer p.Close()
		_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(`{"eventType":"ChargeRated"}`)})
		return err
	}
	// The ACLs take a moment to reach the authorizer: wait for billing's
	// own write to pass before judging the refusals.
	deadline := time.Now().Add(time.Minute)
	for err := send(t, events.ServiceBilling, events.TopicBilling); err != nil; err = send(t, events.ServiceBilling, events.TopicBilling) {
		if time.Now().After(deadline) {
			t.Fatalf("billing writing %s: %v", events.TopicBilling, err)
		}
		time.Sleep(500 * time.Millisecond) // polled: the broker tells no one when its ACLs apply
	}
	if err := send(t, events.ServiceUsage, events.TopicUsage); err != nil {
		t.Fatalf("usage writing its own topic: %v", err)
	}
	for _, s := range []string{events.ServiceUsage, events.ServiceMeter, events.ServiceInvoice, events.ServiceQuery} {
		err := send(t, s, events.TopicBilling)
		if !errors.Is(err, sarama.ErrTopicAuthorizationFailed) {
			t.Errorf("%s writing %s: %v, want %v", s, events.TopicBilling, err, sarama.ErrTopicAuthorizationFailed)
		}
	}
}
