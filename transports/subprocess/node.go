package subprocess

import (
	"context"
	_ "embed"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/jscompile"
)

// node runs drivers/driver.js, given with -e, for javascript and
// typescript: the host compiles each cell (internal/jscompile), so node is
// all either needs. A request is a JSON line on fd 3; messages are JSON
// lines on fd 4. It can move into a kernel's cwd on hand-out.
func init() {
	node := Interpreter{Name: "node", Default: "node", DebianPackage: "nodejs", Help: "Node.js interpreter (javascript contexts)"}
	register(langDef{
		name:        "javascript",
		interpreter: node,
		newDriver:   func(*Transport, string) (driver, error) { return nodeLang{}, nil },
	})
	register(langDef{
		name:        "typescript",
		interpreter: node,
		newDriver:   func(*Transport, string) (driver, error) { return nodeLang{typescript: true}, nil },
	})
}

//go:embed drivers/driver.js
var driverNode string

type nodeLang struct{ typescript bool }

func (nodeLang) command() (args, env []string, err error) {
	return []string{"-e", driverNode}, nil, nil
}

func (d nodeLang) encode(req core.ExecuteRequest) ([]byte, error) {
	var c jscompile.Cell
	if d.typescript {
		c = jscompile.TypeScript(req.Code)
	} else {
		c = jscompile.JavaScript(req.Code)
	}
	return jsonRequest{MsgID: req.MsgID, Code: c.Code, Silent: req.Silent, Imports: c.Imports, SourceMap: c.SourceMap, Error: c.Err}.line()
}

// nodeSigintGrace is how long node has to end a request on the interrupt
// record before it gets SIGINT.
const nodeSigintGrace = 50 * time.Millisecond

// interrupt: for node the signal itself is the hazard. Around each
// runInContext with breakOnSigint, node swaps its SIGINT handlers, and a
// SIGINT landing in that gap kills node. So node gets an interrupt record
// on fd 3 first, which ends the request at once unless it is in
// synchronous code; only a request still running after nodeSigintGrace
// (synchronous code, deep inside runInContext, away from the gap, or a
// child process it waits for) gets the SIGINT, followed by a {"sigint"}
// record on fd 3 (see sigintNoted).
func (nodeLang) interrupt(ctx context.Context, s signaller, id string) error {
	if id == "" || !s.alive() {
		return nil // nothing runs: the driver would ignore it anyway
	}
	if err := s.send(ctx, jsonRecord("interrupt", id)); err != nil {
		// A driver that does not read fd 3 is stuck in synchronous code:
		// the signal is what stops it.
		return s.sigint()
	}
	s.later(nodeSigintGrace, id, func() { _ = sigintNoted(s, id, nodeLang{}.sigintRecord) })
	return nil
}

func (nodeLang) sigintRecord(id string) []byte { return jsonRecord("sigint", id) }

func (nodeLang) cwdRecord(dir string) []byte { return jsonRecord("cwd", dir) }

func (nodeLang) channel() channel { return fd4Lines }
