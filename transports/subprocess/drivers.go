package subprocess

import _ "embed"

// The drivers are real files so they can be read, linted and run by hand.
var (
	//go:embed drivers/driver.py
	driverPython string
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
