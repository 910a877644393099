package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/core/engine"
)

// tools holds what the tool handlers share. Each tool is one entry of
// register and one method.
type tools struct {
	opts      Options
	engine    *engine.Engine
	languages []string // the transport's, named in the tools' schemas
}

func (t *tools) register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "run_code",
		Title: "Run code",
		Description: "Run code in a stateful interpreter session (a context) and return what it printed, its result and any error. " +
			"State (variables, imports, files) persists between calls in the same context. " +
			"Without context_id the code runs in the language's default context; give context_id (from create_context or list_contexts) to pick one. " +
			"The value of the last expression is returned as the result (python, javascript, typescript, r and java; bash only prints). " +
			"Charts drawn with matplotlib (plt.show() or a figure as the last expression) and PNG images come back as images, " +
			"and structured results (a chart's data, a DataFrame, JSON, HTML) as structured content. " +
			"An exception comes back as an error with its traceback; the context stays usable. " +
			"Cancelling the call interrupts the code, like Ctrl-C, and keeps the context and its state.",
		InputSchema: withLanguages[RunCodeInput](t.languages),
		Annotations: &mcp.ToolAnnotations{Title: "Run code", OpenWorldHint: ptr(true)},
	}, t.runCode)
	mcp.AddTool(s, &mcp.Tool{
		Name:  "create_context",
		Title: "Create a context",
		Description: "Start a new, empty interpreter session (a context) of a language and return its id, to pass as context_id to run_code. " +
			"Use one to keep your own state apart from the default contexts that every client of the host shares.",
		InputSchema: withLanguages[CreateContextInput](t.languages),
		Annotations: &mcp.ToolAnnotations{Title: "Create a context", IdempotentHint: false},
	}, t.createContext)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_contexts",
		Title:       "List contexts",
		Description: "List the live interpreter sessions (contexts): their ids, languages and working directories. The python and javascript default contexts come first.",
		Annotations: &mcp.ToolAnnotations{Title: "List contexts", ReadOnlyHint: true},
	}, t.listContexts)
	mcp.AddTool(s, &mcp.Tool{
		Name:  "restart_context",
		Title: "Restart a context",
		Description: "Restart a context's interpreter: its state (variables, imports) is lost, its id, language and working directory stay. " +
			"Use it when the interpreter is stuck or its state is broken.",
		Annotations: &mcp.ToolAnnotations{Title: "Restart a context", DestructiveHint: ptr(true), IdempotentHint: true},
	}, t.restartContext)
	mcp.AddTool(s, &mcp.Tool{
		Name:  "fork_context",
		Title: "Fork a context",
		Description: "Copy a context: a new context (its id is returned) holding a copy of the context's state (variables, imports, functions, working directory), made in milliseconds whatever its size. " +
			"The two go their own ways afterwards: try several approaches from one state, or keep a copy before a risky step. " +
			"Waits for code running in the context to finish. Python contexts only. Where the host's interpreters are sandboxed the copy shares its source's sandbox (both then show the same family), and a context the host started without its fork template cannot be copied.",
		Annotations: &mcp.ToolAnnotations{Title: "Fork a context", IdempotentHint: false},
	}, t.forkContext)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "delete_context",
		Title:       "Delete a context",
		Description: "Stop a context's interpreter and forget the context; its state is lost and its id no longer works.",
		Annotations: &mcp.ToolAnnotations{Title: "Delete a context", DestructiveHint: ptr(true), IdempotentHint: true},
	}, t.deleteContext)
}

// CreateContextInput is create_context's arguments.
type CreateContextInput struct {
	Language string `json:"language" jsonschema:"the context's language"`
	Cwd      string `json:"cwd,omitempty" jsonschema:"the working directory to start in (an absolute path); default: the host's default working directory"`
}

// ContextIDInput names a context.
type ContextIDInput struct {
	ContextID string `json:"context_id" jsonschema:"the context's id, from create_context or list_contexts"`
}

// ContextList is list_contexts's result (a tool's structured result is an
// object).
type ContextList struct {
	Contexts []engine.ContextInfo `json:"contexts"`
}

// Done is the structured result of a tool that only acts.
type Done struct {
	ContextID string `json:"context_id"`
	Done      string `json:"done"`
}

func (t *tools) createContext(ctx context.Context, _ *mcp.CallToolRequest, in CreateContextInput) (*mcp.CallToolResult, engine.ContextInfo, error) {
	info, err := t.engine.CreateContext(ctx, in.Language, in.Cwd)
	if err != nil {
		return nil, engine.ContextInfo{}, err
	}
	return text(fmt.Sprintf("Created a %s context with id %s (cwd %s).", info.Language, info.ID, info.Cwd)), info, nil
}

func (t *tools) listContexts(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, ContextList, error) {
	list := ContextList{Contexts: t.engine.Contexts()}
	msg := fmt.Sprintf("%d contexts:", len(list.Contexts))
	for _, c := range list.Contexts {
		msg += fmt.Sprintf("\n- %s: %s, cwd %s", c.ID, c.Language, c.Cwd)
	}
	return text(msg), list, nil
}

func (t *tools) restartContext(ctx context.Context, _ *mcp.CallToolRequest, in ContextIDInput) (*mcp.CallToolResult, Done, error) {
	if err := t.engine.Restart(ctx, in.ContextID); err != nil {
		return nil, Done{}, err
	}
	return text("Restarted context " + in.ContextID + ": its state is gone."), Done{ContextID: in.ContextID, Done: "restarted"}, nil
}

func (t *tools) forkContext(ctx context.Context, _ *mcp.CallToolRequest, in ContextIDInput) (*mcp.CallToolResult, engine.ContextInfo, error) {
	info, err := t.engine.Fork(ctx, in.ContextID)
	if err != nil {
		return nil, engine.ContextInfo{}, err
	}
	return text(fmt.Sprintf("Forked context %s into a new %s context with id %s (cwd %s).", in.ContextID, info.Language, info.ID, info.Cwd)), info, nil
}

func (t *tools) deleteContext(ctx context.Context, _ *mcp.CallToolRequest, in ContextIDInput) (*mcp.CallToolResult, Done, error) {
	if err := t.engine.Delete(ctx, in.ContextID); err != nil {
		return nil, Done{}, err
	}
	return text("Deleted context " + in.ContextID + "."), Done{ContextID: in.ContextID, Done: "deleted"}, nil
}

// text is a result whose content is one text block (the structured result
// is added by the SDK).
func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func ptr[T any](v T) *T { return &v }

// withLanguages is In's input schema, whose "language" property names the
// languages this host runs: the transport's list, not one written here
// that a transport (Jupyter's kernels, a host without a JDK) may not match.
func withLanguages[In any](languages []string) *jsonschema.Schema {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: the schema of %T: %v", *new(In), err)) // a bug in the type, found by any test
	}
	if p := s.Properties["language"]; p != nil && len(languages) > 0 {
		p.Description += ": " + orList(languages, "or")
	}
	return s
}

// orList is "a, b or c" (last: "or", "and").
func orList(words []string, last string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + last + " " + words[len(words)-1]
}
