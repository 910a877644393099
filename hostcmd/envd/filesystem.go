package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem"
	"github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem/filesystemconnect"
)

// fsService is filesystem.Filesystem.
type fsService struct{ s *Server }

var _ filesystemconnect.FilesystemHandler = fsService{}

// rpcError maps a files error to its Connect code.
func rpcError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case isNotExist(err):
		return connect.NewError(connect.CodeNotFound, err)
	case isPermission(err):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, errInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, fs.ErrExist):
		return connect.NewError(connect.CodeAlreadyExists, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

func (f fsService) Stat(_ context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	real, err := f.s.readable(req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	entry, err := entryInfo(real)
	if err != nil {
		return nil, rpcError(fmt.Errorf("stat '%s': %w", req.Msg.GetPath(), err))
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entry}), nil
}

func (f fsService) MakeDir(_ context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	real, err := f.s.writableDir(req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	if fi, err := os.Stat(real); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory '%s' already exists", req.Msg.GetPath()))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' exists and is not a directory", req.Msg.GetPath()))
	}
	root, rel, err := f.s.inRoot(real)
	if err != nil {
		return nil, rpcError(err)
	}
	defer root.Close()
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return nil, rpcError(fmt.Errorf("make directory '%s': %w", req.Msg.GetPath(), err))
	}
	entry, err := entryInfo(real)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entry}), nil
}

func (f fsService) Move(_ context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	src, err := f.s.writable(req.Msg.GetSource())
	if err != nil {
		return nil, rpcError(err)
	}
	dst, err := f.s.writable(req.Msg.GetDestination())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, rpcError(fmt.Errorf("source '%s': %w", req.Msg.GetSource(), err))
	}
	if err := f.s.moveBeneath(src, dst); err != nil {
		return nil, rpcError(fmt.Errorf("move '%s' to '%s': %w", req.Msg.GetSource(), req.Msg.GetDestination(), err))
	}
	entry, err := entryInfo(dst)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entry}), nil
}

func (f fsService) Remove(_ context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	real, err := f.s.writable(req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := os.Lstat(real); err != nil {
		return nil, rpcError(fmt.Errorf("path '%s': %w", req.Msg.GetPath(), err))
	}
	root, rel, err := f.s.inRoot(real)
	if err != nil {
		return nil, rpcError(err)
	}
	defer root.Close()
	if err := root.RemoveAll(rel); err != nil {
		return nil, rpcError(fmt.Errorf("remove '%s': %w", req.Msg.GetPath(), err))
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// moveBeneath renames src to dst (parents made) within the writable root
// that holds both.
func (s *Server) moveBeneath(src, dst string) error {
	root, srcRel, err := s.inRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	dstRel, err := filepath.Rel(root.Name(), dst)
	if err != nil || !under(dst, []string{root.Name()}) {
		return fmt.Errorf("%w: the source and the destination are in different writable paths", errInvalid)
	}
	if dir := filepath.Dir(dstRel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return root.Rename(srcRel, dstRel)
}

// maxListDepth bounds ListDir's depth (a request's 0 means 1).
const maxListDepth = 32

func (f fsService) ListDir(_ context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	real, err := f.s.readable(req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, rpcError(fmt.Errorf("path '%s': %w", req.Msg.GetPath(), err))
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' is not a directory", req.Msg.GetPath()))
	}
	depth := int(min(max(req.Msg.GetDepth(), 1), maxListDepth))
	var entries []*fspb.EntryInfo
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if p == real {
			return err
		}
		if err != nil || under(p, f.s.cfg.Hidden) {
			return skip(d) // unreadable or a secret: left out
		}
		if e, err := entryInfo(p); err == nil {
			entries = append(entries, e)
		}
		if d.IsDir() && relDepth(real, p) >= depth {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// skip leaves out an entry of a walk (and all below it, for a directory).
func skip(d fs.DirEntry) error {
	if d != nil && d.IsDir() {
		return fs.SkipDir
	}
	return nil
}

// relDepth is how many levels p is below root.
func relDepth(root, p string) int {
	rel, _ := filepath.Rel(root, p)
	n := 1
	for _, c := range rel {
		if c == filepath.Separator {
			n++
		}
	}
	return n
}

// entryInfo describes the entry at p (not following a last symlink).
func entryInfo(p string) (*fspb.EntryInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	e := &fspb.EntryInfo{
		Name:         fi.Name(),
		Path:         p,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Type:         fspb.FileType_FILE_TYPE_FILE,
	}
	switch {
	case fi.IsDir():
		e.Type = fspb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode()&os.ModeSymlink != 0:
		e.Type = fspb.FileType_FILE_TYPE_SYMLINK
		if target, err := os.Readlink(p); err == nil {
			e.SymlinkTarget = &target
		}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = userName(st.Uid), groupName(st.Gid)
	}
	return e, nil
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}
