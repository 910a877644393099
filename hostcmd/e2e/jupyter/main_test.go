package jupyter_test

import (
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
)

func TestMain(m *testing.M) { hosttest.Main(m) }
