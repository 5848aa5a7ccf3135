package consumer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// A TLS client against a plaintext Kafka port waits for a handshake the
// broker never answers (the broker reads the ClientHello as the length of
// a huge request), and a plaintext client against a TLS port gets its
// requests refused as bad records: sarama sees both as a broker that does
// not answer and retries for minutes. probeTLS tells them apart in
// seconds, so that a start with the wrong kafka.tls fails at once, saying
// which it is.

// probeTimeout bounds each probe's handshake.
const probeTimeout = 5 * time.Second

// MismatchError is a broker that speaks TLS while the client does not, or
// the reverse: trying again cannot help.
type MismatchError struct {
	Broker string
	TLS    bool // the client asked for TLS
	Err    error
}

func (e *MismatchError) Error() string {
	if e.TLS {
		return fmt.Sprintf("consumer: broker %s does not speak TLS (%v): it looks like a plaintext listener; remove kafka.tls, or use the broker's TLS port", e.Broker, e.Err)
	}
	return fmt.Sprintf("consumer: broker %s speaks TLS: set kafka.tls (tls: {} for the system's roots), or use the broker's plaintext port", e.Broker)
}

func (e *MismatchError) Unwrap() error { return e.Err }

// probeTLS tries a TLS handshake with the brokers in turn until one
// answers. With tlsCfg set it returns a *MismatchError when a broker
// reached does not complete it, and the handshake's own error when it
// fails otherwise (a certificate refused); without, a *MismatchError when
// a broker does complete one. Brokers it cannot reach say nothing: nil.
func probeTLS(ctx context.Context, brokers []string, tlsCfg *tls.Config) error {
	for _, addr := range brokers {
		d := net.Dialer{Timeout: probeTimeout}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue // down: the consumer's own retries wait for it
		}
		cfg := &tls.Config{InsecureSkipVerify: true} // only: does it speak TLS?
		if tlsCfg != nil {
			cfg = tlsCfg.Clone()
		}
		if cfg.ServerName == "" {
			// As sarama sends it: endpoints routed by SNI need it.
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err = tc.HandshakeContext(hctx)
		cancel()
		conn.Close()
		if ctx.Err() != nil {
			return nil
		}
		var rh tls.RecordHeaderError
		var ne net.Error
		handshook := err == nil
		// A plaintext broker answers a ClientHello with nothing, by closing,
		// or with bytes that are no TLS record.
		notTLS := errors.As(err, &rh) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) ||
			errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
		switch {
		case tlsCfg == nil && handshook:
			return &MismatchError{Broker: addr}
		case tlsCfg == nil:
			return nil
		case handshook:
			return nil
		case errors.As(err, &rh):
			return &MismatchError{Broker: addr, TLS: true, Err: err} // it answered, not in TLS
		case notTLS && speaksPlaintext(addr):
			// Silence or a closed connection is no proof by itself (a
			// broker starting, or limiting connections): a plaintext
			// request it answers is.
			return &MismatchError{Broker: addr, TLS: true, Err: err}
		case notTLS:
			return nil
		default:
			return fmt.Errorf("consumer: TLS with broker %s: %w", addr, err)
		}
	}
	return nil
}

// speaksPlaintext reports whether addr answers a plaintext Kafka
// ApiVersions request.
func speaksPlaintext(addr string) bool {
	conf := sarama.NewConfig()
	conf.Version = kafkaVersion
	conf.Net.DialTimeout, conf.Net.ReadTimeout, conf.Net.WriteTimeout = probeTimeout, probeTimeout, probeTimeout
	conf.ApiVersionsRequest = false
	b := sarama.NewBroker(addr)
	if err := b.Open(conf); err != nil {
		return false
	}
	defer b.Close()
	_, err := b.ApiVersions(&sarama.ApiVersionsRequest{})
	return err == nil
}
