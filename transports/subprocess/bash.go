package subprocess

import (
	"context"
	_ "embed"
	"errors"
	"strings"

	"github.com/kernelhost/kernelhost/core"
)

// bash runs drivers/driver.sh, given with -c. A request is one
// NUL-terminated record on fd 3; messages are JSON lines on fd 4. Its pool
// serves only kernels in the pool's cwd: a cd would leave OLDPWD (`cd -`)
// unlike a fresh start's.
func init() {
	register(langDef{
		name:        "bash",
		interpreter: Interpreter{Name: "bash", Default: "bash", DebianPackage: "bash", Help: "bash interpreter"},
		newDriver:   func(*Transport, string) (driver, error) { return bashLang{}, nil },
	})
}

//go:embed drivers/driver.sh
var driverBash string

type bashLang struct{}

func (bashLang) command() (args, env []string, err error) {
	return []string{"--noprofile", "--norc", "-c", driverBash, "bash"}, nil, nil
}

// encode frames a request as "0" or "1" (silent), the code, a NUL.
func (bashLang) encode(req core.ExecuteRequest) ([]byte, error) {
	if strings.IndexByte(req.Code, 0) >= 0 {
		return nil, errors.New("bash code cannot contain a NUL byte")
	}
	b := make([]byte, 0, len(req.Code)+2)
	if req.Silent {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, req.Code...)
	return append(b, 0), nil
}

// interrupt sends SIGINT, and again while the request still runs: one that
// lands as bash forks a command substitution is lost (sigintResends).
func (bashLang) interrupt(_ context.Context, s signaller, id string) error {
	return sigintResent(s, id, nil, sigintResends)
}

func (bashLang) cwdRecord(string) []byte { return nil }

func (bashLang) channel() channel { return fd4Lines }
