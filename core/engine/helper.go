package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kernelhost/kernelhost/core"
)

// helper runs one silent request of the engine's own (cwd, env set/reset) and
// waits, bounded by Config.HelperTimeout, for the kernel to finish it.
func (c *Context) helper(code string) error {
	return c.silentRequest(helperCode(c.info.Language, code), nil, nil)
}

// silentRequest runs code as a request of the engine's own (silent where
// the language allows, see helperSilent) and waits, bounded by
// Config.HelperTimeout, for the kernel to finish it. What the code prints to
// stdout and stderr goes to stdout and stderr, where they are not nil. An
// error says why the kernel
// did not finish it well: the error the code raised, or what happened to
// the kernel.
func (c *Context) silentRequest(code string, stdout, stderr *strings.Builder) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.e.cfg.HelperTimeout)
	defer cancel()
	// The router calls this on its goroutine; what it sets is read once
	// wait has returned endFinished (the router is done with the request
	// then), and the builders after close.
	var reply, firstErr core.Message // firstErr.Type is "" until an error came
	onMessage := func(m core.Message) {
		switch {
		case m.Type == core.MsgExecuteReply:
			reply = m
		case m.Type == core.MsgError && firstErr.Type == "":
			firstErr = m
		case m.Type == core.MsgStream && m.Name == "stdout" && stdout != nil:
			stdout.WriteString(m.Text)
		case m.Type == core.MsgStream && m.Name == "stderr" && stderr != nil:
			stderr.WriteString(m.Text)
		}
	}
	q, err := c.send(ctx, code, helperSilent(c.info.Language), onMessage, nil)
	if err != nil {
		return err
	}
	defer q.close()
	end := q.wait(&watch{deadline: ctx.Done()})
	switch end {
	case endFinished:
		return helperResult(reply, firstErr)
	case endLost:
		return errors.New("the connection to the kernel was lost")
	case endDeadline:
		c.mu.Lock()
		c.needsRestart = true // whatever it is doing, it is not trusted any more
		c.mu.Unlock()
		return fmt.Errorf("the kernel did not answer within %s", c.e.cfg.HelperTimeout)
	}
	return fmt.Errorf("the kernel reported %q", end.kernelState())
}

// helperResult is what a finished helper request's reply (and its first
// error message, if any) says: nil for ok, else the error it raised.
func helperResult(reply, firstErr core.Message) error {
	if reply.Status == core.ReplyOK {
		return nil
	}
	if firstErr.Type == "" {
		firstErr = reply
	}
	if firstErr.EName == "" {
		return fmt.Errorf("the kernel answered %q", reply.Status)
	}
	return fmt.Errorf("%s: %s", firstErr.EName, firstErr.EValue)
}
