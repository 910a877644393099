package settings_test

import (
	"fmt"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// pluginDir holds the transport plugins built for the tests: their
// settings are part of the host's.
var pluginDir string

func TestMain(m *testing.M) {
	testkit.Main(m, func(string) error {
		var err error
		if pluginDir, err = testkit.Plugins(); err != nil {
			return fmt.Errorf("build the transport plugins: %w", err)
		}
		return nil
	})
}
