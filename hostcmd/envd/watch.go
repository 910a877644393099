package envd

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"github.com/google/uuid"

	fspb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem"
)

// watchKeepalive is how often a quiet WatchDir stream sends a keepalive,
// so proxies and the SDK's idle timers do not cut it.
const watchKeepalive = 30 * time.Second

// maxPolledEvents bounds the events a polling watcher keeps between two
// GetWatcherEvents; past it the oldest are dropped.
const maxPolledEvents = 10000

// dirWatch is one watched directory (recursive: with the directories under
// it, those made later included), on fsnotify (inotify).
type dirWatch struct {
	w         *fsnotify.Watcher
	root      string
	recursive bool
	entries   bool
}

// newDirWatch watches the directory p for reading (a context may watch
// what it may read).
func (s *Server) newDirWatch(p string, recursive, entries bool) (*dirWatch, error) {
	real, err := s.readable(p)
	if err != nil {
		return nil, rpcError(err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, rpcError(fmt.Errorf("path '%s': %w", p, err))
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' is not a directory", p))
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch '%s': %w", p, err))
	}
	dw := &dirWatch{w: w, root: real, recursive: recursive, entries: entries}
	if err := dw.add(real); err != nil {
		w.Close()
		return nil, rpcError(fmt.Errorf("watch '%s': %w", p, err))
	}
	return dw, nil
}

// add watches dir, and the directories under it when recursive.
func (dw *dirWatch) add(dir string) error {
	if !dw.recursive {
		return dw.w.Add(dir)
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // gone or unreadable meanwhile: nothing to watch there
		}
		return dw.w.Add(p)
	})
}

// event turns an fsnotify event into the API's, or nil for one it does not
// report. A directory made under a recursive watch is watched from now on.
func (dw *dirWatch) event(ev fsnotify.Event) *fspb.FilesystemEvent {
	rel, err := filepath.Rel(dw.root, ev.Name)
	if err != nil {
		return nil
	}
	out := &fspb.FilesystemEvent{Name: rel}
	switch {
	case ev.Has(fsnotify.Create):
		out.Type = fspb.EventType_EVENT_TYPE_CREATE
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() && dw.recursive {
			_ = dw.add(ev.Name)
		}
	case ev.Has(fsnotify.Write):
		out.Type = fspb.EventType_EVENT_TYPE_WRITE
	case ev.Has(fsnotify.Remove):
		out.Type = fspb.EventType_EVENT_TYPE_REMOVE
	case ev.Has(fsnotify.Rename):
		out.Type = fspb.EventType_EVENT_TYPE_RENAME
	case ev.Has(fsnotify.Chmod):
		out.Type = fspb.EventType_EVENT_TYPE_CHMOD
	default:
		return nil
	}
	if dw.entries {
		if e, err := entryInfo(ev.Name); err == nil {
			out.Entry = e
		}
	}
	return out
}

// run sends each event to emit until ctx ends or the watcher fails.
func (dw *dirWatch) run(ctx context.Context, emit func(*fspb.FilesystemEvent) error, keepalive func() error) error {
	defer dw.w.Close()
	tick := time.NewTicker(watchKeepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-dw.w.Events:
			if !ok {
				return nil
			}
			if e := dw.event(ev); e != nil {
				if err := emit(e); err != nil {
					return err
				}
			}
		case err, ok := <-dw.w.Errors:
			if !ok {
				return nil
			}
			return connect.NewError(connect.CodeInternal, fmt.Errorf("watching '%s': %w", dw.root, err))
		case <-tick.C:
			if keepalive != nil {
				if err := keepalive(); err != nil {
					return err
				}
			}
		}
	}
}

func (f fsService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	dw, err := f.s.newDirWatch(req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return err
	}
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		dw.w.Close()
		return err
	}
	return dw.run(ctx, func(e *fspb.FilesystemEvent) error {
		return stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: e}})
	}, func() error {
		return stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}})
	})
}

// pollWatcher is a watcher read by GetWatcherEvents.
type pollWatcher struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	events []*fspb.FilesystemEvent
	err    error // why the watch ended, if it did
}

func (p *pollWatcher) close() { p.cancel() }

func (f fsService) CreateWatcher(_ context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	dw, err := f.s.newDirWatch(req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	pw := &pollWatcher{cancel: cancel}
	id := uuid.NewString()
	f.s.watchers.Store(id, pw)
	go func() {
		err := dw.run(ctx, func(e *fspb.FilesystemEvent) error {
			pw.mu.Lock()
			defer pw.mu.Unlock()
			if len(pw.events) >= maxPolledEvents {
				pw.events = pw.events[1:]
			}
			pw.events = append(pw.events, e)
			return nil
		}, nil)
		pw.mu.Lock()
		pw.err = err
		pw.mu.Unlock()
	}()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

func (f fsService) GetWatcherEvents(_ context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	v, ok := f.s.watchers.Load(req.Msg.GetWatcherId())
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher '%s' not found", req.Msg.GetWatcherId()))
	}
	pw := v.(*pollWatcher)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	events := pw.events
	pw.events = nil
	if len(events) == 0 && pw.err != nil {
		return nil, pw.err
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
}

func (f fsService) RemoveWatcher(_ context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	v, ok := f.s.watchers.LoadAndDelete(req.Msg.GetWatcherId())
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher '%s' not found", req.Msg.GetWatcherId()))
	}
	v.(*pollWatcher).close()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
