package flows

import (
	"fmt"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/spec"
)

// kafkaSecurity copies the spec's Kafka connection settings into a consumer
// configuration.
func kafkaSecurity(cfg *consumer.Config, k *spec.Kafka) error {
	cfg.SessionTimeout = k.SessionTimeout
	tc, err := k.TLS.ClientConfig()
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	cfg.TLS = tc
	if k.SASL != nil {
		cfg.SASL = &consumer.SASL{Mechanism: k.SASL.Mechanism, User: k.SASL.User, Password: k.SASL.Password}
	}
	return nil
}
