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
)
