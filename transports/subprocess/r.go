package subprocess

import (
	"context"
	_ "embed"

	"github.com/kernelhost/kernelhost/core"
)

// r runs drivers/driver.R under Rscript, passed in the environment
// (rDriverEnv): R refuses -e arguments over 10,000 bytes. Base R has no
// JSON parser, so a request is a header line and the code (encodeHeader);
// messages are JSON lines on fd 4. Its pool serves only kernels in the
// pool's cwd: the driver has no cwd record.
func init() {
	register(langDef{
		name:        "r",
		interpreter: Interpreter{Name: "rscript", Default: "Rscript", DebianPackage: "r-base-core", Help: "R's Rscript (r contexts; Debian r-base-core)"},
		newDriver:   func(*Transport, string) (driver, error) { return rLang{}, nil },
	})
}

// driverR is passed in the environment (rDriverEnv), not with -e: R
// refuses -e arguments over 10,000 bytes.
//
//go:embed drivers/driver.R
var driverR string

// rDriverEnv names the variable that carries driverR to Rscript; the driver
// unsets it first thing, so user code and its children do not see it.
const rDriverEnv = "KH_R_DRIVER"

// rDriverArgs run driverR from the environment.
var rDriverArgs = []string{"--no-save", "--no-restore", "-e", `eval(parse(text = Sys.getenv("` + rDriverEnv + `")))`}

type rLang struct{}

func (rLang) command() (args, env []string, err error) {
	return rDriverArgs, []string{rDriverEnv + "=" + driverR}, nil
}

func (rLang) encode(req core.ExecuteRequest) ([]byte, error) { return encodeHeader(req) }

// interrupt sends SIGINT, and again while the request still runs: R keeps
// a SIGINT that lands while it reads fd 3 pending and the driver drops it
// once the request is read, so one sent just before the code started is
// lost.
func (rLang) interrupt(_ context.Context, s signaller, id string) error {
	return sigintResent(s, id, nil, sigintResends)
}

func (rLang) cwdRecord(string) []byte { return nil }

func (rLang) channel() channel { return fd4Lines }
