package pluginrpc

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// everyKind names every core.ErrorKind; TestEveryKindIsListed keeps it
// complete, so a kind added to core fails here until it crosses the plugin
// boundary too.
var everyKind = map[string]core.ErrorKind{
	"KindInternal":    core.KindInternal,
	"KindInvalid":     core.KindInvalid,
	"KindNotFound":    core.KindNotFound,
	"KindQueueFull":   core.KindQueueFull,
	"KindRejected":    core.KindRejected,
	"KindUnavailable": core.KindUnavailable,
	"KindTooLarge":    core.KindTooLarge,
	"KindGone":        core.KindGone,
	"KindUnsupported": core.KindUnsupported,
}

// TestEveryKindIsListed reads core/errors.go and checks that everyKind holds
// each ErrorKind constant declared there.
func TestEveryKindIsListed(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "../../../../core/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		inBlock := false // an iota block: later specs repeat the first one's type
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			if vs.Type != nil {
				id, ok := vs.Type.(*ast.Ident)
				inBlock = ok && id.Name == "ErrorKind"
			} else if vs.Values != nil {
				inBlock = false
			}
			if inBlock {
				for _, n := range vs.Names {
					declared = append(declared, n.Name)
				}
			}
		}
	}
	var listed []string
	for name := range everyKind {
		listed = append(listed, name)
	}
	sort.Strings(declared)
	sort.Strings(listed)
	if strings.Join(declared, " ") != strings.Join(listed, " ") {
		t.Fatalf("core/errors.go declares the kinds %v; everyKind lists %v", declared, listed)
	}
}

// TestKindTable: every core kind has its own protocol value and comes back
// from it, and every protocol value but KIND_NONE stands for a core kind.
func TestKindTable(t *testing.T) {
	t.Parallel()
	seen := map[pb.ErrorKind]string{}
	for name, kind := range everyKind {
		v := kindToPB(fmt.Errorf("wrapped: %w", &core.Error{Kind: kind, Msg: "m"}))
		if other, dup := seen[v]; dup || v == pb.ErrorKind_KIND_NONE {
			t.Errorf("%s -> %v (also %q)", name, v, other)
		}
		seen[v] = name
		if back, ok := kindFromPB(v); !ok || back != kind {
			t.Errorf("%s -> %v -> %v, %v", name, v, back, ok)
		}
	}
	for v, name := range pb.ErrorKind_name {
		if _, ok := seen[pb.ErrorKind(v)]; !ok && pb.ErrorKind(v) != pb.ErrorKind_KIND_NONE {
			t.Errorf("protocol value %s stands for no core kind", name)
		}
	}
	if v := kindToPB(errors.New("plain")); v != pb.ErrorKind_KIND_NONE {
		t.Errorf("a plain error -> %v, want KIND_NONE", v)
	}
	if _, ok := kindFromPB(pb.ErrorKind_KIND_NONE); ok {
		t.Error("KIND_NONE reads as a kind")
	}
}

// TestErrorKindsCrossThePlugin runs every kind through a real plugin process,
// on both carriers, from StartKernel and from Execute: the host's caller gets
// a *core.Error of the kind the transport returned, with its message, as it
// would with the transport linked in. An error that is not a *core.Error
// stays one that is not.
func TestErrorKindsCrossThePlugin(t *testing.T) {
	t.Parallel()
	for _, carrier := range []struct {
		name string
		grpc bool
	}{{"kernel-socket", false}, {"grpc-streams", true}} {
		t.Run(carrier.name, func(t *testing.T) {
			cfg := selfPlugin(t, "kinds")
			cfg.GRPCKernelStreams = carrier.grpc
			s := launch(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			k, err := s.StartKernel(ctx, core.KernelSpec{Language: "bash", Cwd: t.TempDir()})
			if err != nil {
				t.Fatalf("StartKernel: %v", err)
			}
			defer k.Shutdown(ctx)
			for name, kind := range everyKind {
				_, err := s.StartKernel(ctx, core.KernelSpec{Language: name, Cwd: t.TempDir()})
				checkKind(t, "StartKernel", err, name, kind)
				err = k.Execute(ctx, core.ExecuteRequest{MsgID: "m-" + name, Code: name})
				checkKind(t, "Execute", err, name, kind)
			}
			_, err = s.StartKernel(ctx, core.KernelSpec{Language: "plain", Cwd: t.TempDir()})
			checkPlain(t, "StartKernel", err)
			err = k.Execute(ctx, core.ExecuteRequest{MsgID: "m-plain", Code: "plain"})
			checkPlain(t, "Execute", err)
		})
	}
}

func checkKind(t *testing.T, call string, err error, name string, kind core.ErrorKind) {
	t.Helper()
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Kind != kind {
		t.Errorf("%s returning a %s error: got %v (%#v), want a *core.Error of that kind", call, name, err, err)
		return
	}
	if !strings.Contains(ce.Msg, kindsMessage(name)) {
		t.Errorf("%s returning a %s error: message %q lost the transport's %q", call, name, ce.Msg, kindsMessage(name))
	}
}

func checkPlain(t *testing.T, call string, err error) {
	t.Helper()
	var ce *core.Error
	if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), kindsMessage("plain")) {
		t.Errorf("%s returning a plain error: got %v (%#v), want a plain error with the transport's text", call, err, err)
	}
}

// kindsMessage is what the kinds transport says for the error named name.
func kindsMessage(name string) string { return "the kinds transport returns " + name }

// kindsError is the error the kinds transport returns for name: a
// *core.Error of that kind, or for "plain" an error that is not one.
func kindsError(name string) error {
	if kind, ok := everyKind[name]; ok {
		return &core.Error{Kind: kind, Msg: kindsMessage(name)}
	}
	if name == "plain" {
		return errors.New(kindsMessage(name))
	}
	return nil
}

// kindsTransport fails StartKernel when the language names an error kind
// (or is "plain"), and its kernels fail Execute when the code does.
type kindsTransport struct{}

func (kindsTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "kinds", Version: "0", Languages: []string{"bash"}}
}

func (kindsTransport) StartKernel(_ context.Context, spec core.KernelSpec) (core.Kernel, error) {
	if err := kindsError(spec.Language); err != nil {
		return nil, err
	}
	return &kindsKernel{stubKernel{msgs: make(chan core.Message)}}, nil
}

type kindsKernel struct{ stubKernel }

func (k *kindsKernel) Execute(_ context.Context, req core.ExecuteRequest) error {
	return kindsError(req.Code)
}

// Peers built before CallResult.kind: a plugin still sets Code INVALID for a
// KindInvalid error, for an older host, and a host still reads Code INVALID
// without a kind, from an older plugin, as KindInvalid.
func TestKindInvalidWithoutKindField(t *testing.T) {
	t.Parallel()
	r := result(1, &core.Error{Kind: core.KindInvalid, Msg: "no such cwd"})
	if r.Code != pb.Code_INVALID || r.Kind != pb.ErrorKind_KIND_INVALID {
		t.Errorf("KindInvalid error -> code %v, kind %v; want INVALID, KIND_INVALID", r.Code, r.Kind)
	}
	old := &pb.CallResult{Id: 1, Code: pb.Code_INVALID, Error: []byte("no such cwd")}
	err := (&remoteKernel{}).resultError("start python kernel", time.Second, old)
	if core.KindOf(err) != core.KindInvalid || err.Error() != "start python kernel: no such cwd" {
		t.Errorf("Code INVALID without kind -> %v (kind %v), want a KindInvalid error", err, core.KindOf(err))
	}
	plain := &pb.CallResult{Id: 1, Code: pb.Code_UNKNOWN, Error: []byte("boom")}
	err = (&remoteKernel{}).resultError("execute on python kernel", time.Second, plain)
	var ce *core.Error
	if errors.As(err, &ce) || err.Error() != "execute on python kernel: boom" {
		t.Errorf("a plain error -> %#v, want plain text", err)
	}
}
