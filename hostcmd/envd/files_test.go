package envd_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kernelhost/kernelhost/hostcmd/envd"
	fspb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem"
	"github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem/filesystemconnect"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// fixture is a sandbox API on 127.0.0.1 whose home is a fresh writable
// directory holding a secret, beside a directory outside the writable set
// (under the host's /tmp, which the sandbox does not see either).
type fixture struct {
	srv      *envd.Server
	url      string
	home     string // writable
	readOnly string // readable, not writable
	secret   string // hidden
	fs       filesystemconnect.FilesystemClient
}

func newFixture(t testing.TB, sandbox func(home string) envd.Wrapper, opts ...func(*envd.Config)) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{home: filepath.Join(base, "home"), readOnly: filepath.Join(base, "ro"), secret: filepath.Join(base, "home", "secrets", "token")}
	for _, d := range []string{f.home, f.readOnly, filepath.Dir(f.secret)} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WriteFile(t, f.secret, "s3cret")
	testkit.WriteFile(t, filepath.Join(f.readOnly, "data.txt"), "read me")
	cfg := envd.Config{Home: f.home, Writable: []string{f.home}, Hidden: []string{f.secret},
		Env: map[string]string{"GLOBAL_VAR": "g"}, MaxUploadBytes: 1 << 20}
	if sandbox != nil {
		cfg.Sandbox = sandbox(f.home)
	}
	for _, o := range opts {
		o(&cfg)
	}
	f.srv = envd.New(cfg)
	hs := httptest.NewServer(f.srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		f.srv.Close()
	})
	f.url = hs.URL
	f.fs = filesystemconnect.NewFilesystemClient(http.DefaultClient, hs.URL)
	return f
}

// upload POSTs body as application/octet-stream to path.
func (f *fixture) upload(t testing.TB, path string, body io.Reader) (int, string) {
	t.Helper()
	resp, err := http.Post(f.url+"/files?path="+url.QueryEscape(path), "application/octet-stream", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// download GETs path.
func (f *fixture) download(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(f.url + "/files?path=" + url.QueryEscape(path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func TestEnvdFilesRoundTrip(t *testing.T) {
	f := newFixture(t, nil)
	if code, body := f.upload(t, "sub/dir/a.txt", strings.NewReader("alpha")); code != 200 || !strings.Contains(body, `"name":"a.txt"`) {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := f.download(t, filepath.Join(f.home, "sub/dir/a.txt")); code != 200 || body != "alpha" {
		t.Fatalf("download: %d %q", code, body)
	}
	// Multipart, two files named by their file names.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, text := range map[string]string{"m1.txt": "one", "deep/m2.txt": "two"} {
		w, _ := mw.CreateFormFile("file", name)
		_, _ = io.WriteString(w, text)
	}
	mw.Close()
	resp, err := http.Post(f.url+"/files", mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("multipart upload: %d", resp.StatusCode)
	}
	if code, body := f.download(t, "deep/m2.txt"); code != 200 || body != "two" {
		t.Fatalf("multipart file: %d %q", code, body)
	}
	// gzip both ways.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, "zipped")
	zw.Close()
	req, _ := http.NewRequest("POST", f.url+"/files?path=z.txt", &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("gzip upload: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, body := f.download(t, "z.txt"); code != 200 || body != "zipped" { // the client un-gzips
		t.Fatalf("gzip round trip: %d %q", code, body)
	}
	if got := f.srv.Stats().BytesUploaded.Load(); got != int64(len("alpha")+len("one")+len("two")+len("zipped")) {
		t.Errorf("bytes uploaded = %d", got)
	}
}

func TestEnvdFilesBadInput(t *testing.T) {
	f := newFixture(t, nil)
	if err := os.Symlink(f.readOnly, filepath.Join(f.home, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.secret, filepath.Join(f.home, "secret-link")); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(f.home, "keep.txt"), "old")
	for _, c := range []struct {
		name, path string
		want       int
	}{
		{"outside the writable set", filepath.Join(f.readOnly, "new.txt"), 403},
		{"through a symlink out", "out/new.txt", 403},
		{"dot-dot out", "../ro/new.txt", 403},
		{"a secret", f.secret, 403},
		{"the host's /etc", "/etc/kernelhost-envd-test", 403},
		{"a directory", ".", 400},
		{"empty path", "", 400},
	} {
		if code, body := f.upload(t, c.path, strings.NewReader("x")); code != c.want {
			t.Errorf("upload %s (%s): %d %s, want %d", c.name, c.path, code, body, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(f.readOnly, "new.txt")); err == nil {
		t.Error("a refused upload wrote its file")
	}
	for _, c := range []struct {
		name, path string
		want       int
		body       string
	}{
		{"readable outside the writable set", "/etc/os-release", 200, "ID="},
		{"the host's /tmp outside the writable set", filepath.Join(f.readOnly, "data.txt"), 403, ""},
		{"a secret", f.secret, 403, ""},
		{"a secret through a symlink", "secret-link", 403, ""},
		{"the host's /proc", "/proc/self/environ", 403, ""},
		{"the host's /tmp", "/tmp", 403, ""},
		{"missing", "nope.txt", 404, "does not exist"},
		{"a directory", ".", 400, "is a directory"},
	} {
		code, body := f.download(t, c.path)
		if code != c.want || !strings.Contains(body, c.body) || strings.Contains(body, "s3cret") {
			t.Errorf("download %s (%s): %d %q, want %d with %q", c.name, c.path, code, body, c.want, c.body)
		}
	}
	// Over the limit: 413, and the old file is kept whole.
	if code, body := f.upload(t, "keep.txt", bytes.NewReader(make([]byte, 1<<20+1))); code != 413 || !strings.Contains(body, "limit") {
		t.Errorf("huge upload: %d %s", code, body)
	}
	if code, body := f.download(t, "keep.txt"); body != "old" {
		t.Errorf("after a refused upload: %d %q, want the old file", code, body)
	}
	if left, _ := filepath.Glob(filepath.Join(f.home, ".keep.txt.upload-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestEnvdFilesystemRPC(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if _, err := f.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "a/b/c"})); err != nil {
		t.Fatal(err)
	}
	_, err := f.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "a/b"}))
	wantCode(t, "MakeDir of an existing dir", err, connect.CodeAlreadyExists)
	testkit.WriteFile(t, filepath.Join(f.home, "a", "f.txt"), "12345")
	testkit.WriteFile(t, filepath.Join(f.home, "a", "b", "c", "x.txt"), "x")
	st, err := f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "a/f.txt"}))
	if err != nil || st.Msg.Entry.Size != 5 || st.Msg.Entry.Type != fspb.FileType_FILE_TYPE_FILE {
		t.Fatalf("Stat: %v %v", st, err)
	}
	for depth, want := range map[uint32]int{0: 2, 1: 2, 2: 3, 3: 4} {
		ls, err := f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "a", Depth: depth}))
		if err != nil {
			t.Errorf("ListDir depth %d: %v", depth, err)
		} else if len(ls.Msg.Entries) != want {
			t.Errorf("ListDir depth %d: %d entries, want %d", depth, len(ls.Msg.Entries), want)
		}
	}
	ls, err := f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: filepath.Dir(f.secret)}))
	if err != nil || len(ls.Msg.Entries) != 0 {
		t.Errorf("ListDir shows the secret or fails: %v %v", ls, err)
	}
	if _, err := f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "a/f.txt", Destination: "g.txt"})); err != nil {
		t.Fatal(err)
	}
	_, err = f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "a/f.txt"}))
	wantCode(t, "Stat of a moved file", err, connect.CodeNotFound)
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "a"})); err != nil {
		t.Fatal(err)
	}
	_, err = f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "a"}))
	wantCode(t, "Remove of a missing path", err, connect.CodeNotFound)
	_, err = f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/etc/os-release"}))
	wantCode(t, "Remove outside the writable set", err, connect.CodePermissionDenied)
	_, err = f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: f.home}))
	wantCode(t, "Remove of the home itself", err, connect.CodePermissionDenied)
	_, err = f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "g.txt", Destination: "/etc/g.txt"}))
	wantCode(t, "Move out of the writable set", err, connect.CodePermissionDenied)
	_, err = f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: f.secret}))
	wantCode(t, "Stat of a secret", err, connect.CodePermissionDenied)
	_, err = f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: filepath.Dir(f.secret), Destination: "plain"}))
	wantCode(t, "Move of the directory holding a secret", err, connect.CodePermissionDenied)
	_, err = f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: filepath.Dir(f.secret)}))
	wantCode(t, "Remove of the directory holding a secret", err, connect.CodePermissionDenied)
	_, err = f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "g.txt"}))
	wantCode(t, "ListDir of a file", err, connect.CodeInvalidArgument)
}

func TestEnvdWatchDir(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := f.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: f.home, Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	if code, body := f.upload(t, "watched.txt", strings.NewReader("w")); code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	for stream.Receive() {
		if e := stream.Msg().GetFilesystem(); e != nil && e.Name == "watched.txt" {
			return // the rename of the upload's temporary file over it
		}
	}
	t.Fatalf("the watch saw no event for watched.txt: %v", stream.Err())
}

func TestEnvdPollingWatcher(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	w, err := f.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: f.home}))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(f.home, "p.txt"), "p")
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := f.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: w.Msg.WatcherId}))
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Msg.Events) > 0 && evs.Msg.Events[0].Name == "p.txt" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no event for p.txt in 30 s")
		}
		time.Sleep(20 * time.Millisecond) // the API is polled by design
	}
	if _, err := f.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: w.Msg.WatcherId})); err != nil {
		t.Fatal(err)
	}
	_, err = f.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: w.Msg.WatcherId}))
	wantCode(t, "a removed watcher", err, connect.CodeNotFound)
	_, err = f.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "missing"}))
	wantCode(t, "watching a missing dir", err, connect.CodeNotFound)
}

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Errorf("%s: %v, want code %v", what, err, code)
	}
}
