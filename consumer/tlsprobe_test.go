package consumer

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// nop is a handler that is never called: the consumers below do not get
// as far as reading.
type nop struct{}

func (nop) Process(context.Context, *RecordBatch) error { return nil }
func (nop) Positions(context.Context, string, []int32) (map[int32]int64, error) {
	return nil, nil
}

// TestTLSMismatch fails at once, with the remedy, a consumer whose
// kafka.tls does not match its broker's listener, either way round.
func TestTLSMismatch(t *testing.T) {
	plain := startBroker(t, map[string]int32{"t": 1})
	tlsSrv := httptest.NewTLSServer(nil) // a TLS listener that is no broker
	t.Cleanup(tlsSrv.Close)
	for _, tc := range []struct {
		name, broker, want string
		tls                *tls.Config
	}{
		{"tls against plaintext", plain, "does not speak TLS", &tls.Config{InsecureSkipVerify: true}},
		{"plaintext against tls", tlsSrv.Listener.Addr().String(), "speaks TLS: set kafka.tls", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := Consume(context.Background(), Config{Brokers: []string{tc.broker}, Group: "g", Topic: "t", Bounded: true, TLS: tc.tls}, nop{})
			var me *MismatchError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a mismatch saying %q", err, tc.want)
			}
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("took %s to tell", took)
			}
			if (Connecting{}).Retryable(err) {
				t.Error("a mismatch is retried")
			}
		})
	}
}

// TestConnectErrorKinds waits for brokers that are not there, not for
// ones that refuse the client.
func TestConnectErrorKinds(t *testing.T) {
	cfg := Config{Brokers: []string{"b:9092"}}
	for _, tc := range []struct {
		err   error
		retry bool
	}{
		{sarama.Wrap(sarama.ErrOutOfBrokers, io.EOF), true},
		{sarama.Wrap(sarama.ErrOutOfBrokers, syscall.ECONNREFUSED), true},
		{sarama.Wrap(sarama.ErrOutOfBrokers, sarama.ErrSASLAuthenticationFailed), false},
		{sarama.ConfigurationError("bad"), false},
	} {
		if got := (Connecting{}).Retryable(connectError(cfg, tc.err)); got != tc.retry {
			t.Errorf("%v: retryable %v, want %v", tc.err, got, tc.retry)
		}
	}
}
