package subprocess

import _ "embed"

// The drivers are real files so they can be read, linted and run by hand.
var (
	// driverPython is driver.py with forkserver.py appended (see there).
	//go:embed drivers/driver.py
	driverPythonMain string
	//go:embed drivers/forkserver.py
	driverPythonFork string
	driverPython     = driverPythonMain + driverPythonFork
	//go:embed drivers/driver.sh
	driverBash string
	//go:embed drivers/driver.js
	driverNode string
	// driverR is passed in the environment (rDriverEnv), not with -e: R
	// refuses -e arguments over 10,000 bytes.
	//go:embed drivers/driver.R
	driverR string
	// driverJava is compiled once per host into a cache directory (see
	// javaDriver): a source launch would compile it on every start.
	//go:embed drivers/Driver.java
	driverJava string
)

// rDriverEnv names the variable that carries driverR to Rscript; the driver
// unsets it first thing, so user code and its children do not see it.
const rDriverEnv = "KH_R_DRIVER"

// rDriverArgs run driverR from the environment.
var rDriverArgs = []string{"--no-save", "--no-restore", "-e", `eval(parse(text = Sys.getenv("` + rDriverEnv + `")))`}
