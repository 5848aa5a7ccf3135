package flows

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/spec"
)

// tlsConfig builds a client TLS configuration from the spec; nil for nil.
func tlsConfig(t *spec.TLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls cert_file/key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// kafkaSecurity copies the spec's Kafka connection settings into a consumer
// configuration.
func kafkaSecurity(cfg *consumer.Config, k *spec.Kafka) error {
	cfg.SessionTimeout = k.SessionTimeout
	tc, err := tlsConfig(k.TLS)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	cfg.TLS = tc
	if k.SASL != nil {
		cfg.SASL = &consumer.SASL{Mechanism: k.SASL.Mechanism, User: k.SASL.User, Password: k.SASL.Password}
	}
	return nil
}
