package checkpoint_test

import (
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/checkpoint/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func() checkpoint.Store {
		m := checkpoint.NewMemory()
		return func() checkpoint.Store { return m }
	})
}
