package envd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The files side has the walls of a context: it reads what a context's
// interpreter may read (the host's files) and writes only under the
// writable set a context has. A context sees a /proc, /dev and /tmp of its
// own, never the host's, so those are refused here; so are the host's
// secrets (Config.Hidden) wherever they are. Every path is resolved
// (relative to the home, "..", symlinks) before it is checked, so a symlink
// out of the writable set is refused, not followed.

// errPermission and errNotFound are what the Connect and HTTP answers map.
var (
	errPermission = errors.New("permission denied")
	errInvalid    = errors.New("invalid argument")
)

// privateRoots are the host's directories a context never sees (it has
// its own).
var privateRoots = []string{"/proc", "/dev", "/tmp"}

// resolve makes p absolute (relative to the home), cleans it and resolves
// the symlinks of the part that exists; the rest is appended as is (a file
// about to be made). It returns the resolved path.
func (s *Server) resolve(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: the path is empty", errInvalid)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: the path holds a NUL byte", errInvalid)
	}
	if strings.HasPrefix(p, "~/") || p == "~" {
		p = filepath.Join(s.cfg.Home, strings.TrimPrefix(p, "~"))
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.cfg.Home, p)
	}
	p = filepath.Clean(p)
	existing, rest := p, ""
	for {
		real, err := filepath.EvalSymlinks(existing)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}

// readable resolves p for reading: anything a context sees, not the host's
// secrets.
func (s *Server) readable(p string) (string, error) {
	real, err := s.resolve(p)
	if err != nil {
		return "", err
	}
	if under(real, s.cfg.Hidden) || (under(real, privateRoots) && !under(real, s.cfg.Writable)) {
		return "", fmt.Errorf("%w: %s is not visible to the sandbox", errPermission, p)
	}
	return real, nil
}

// writable resolves p for writing: only under the writable set.
func (s *Server) writable(p string) (string, error) {
	real, err := s.resolve(p)
	if err != nil {
		return "", err
	}
	if under(real, s.cfg.Hidden) || !under(real, s.cfg.Writable) {
		return "", fmt.Errorf("%w: %s is outside the sandbox's writable paths (%s)", errPermission, p, strings.Join(s.cfg.Writable, ", "))
	}
	if s.isRoot(real) {
		return "", fmt.Errorf("%w: %s is a root of the writable paths, which cannot be moved or removed", errPermission, p)
	}
	for _, h := range s.cfg.Hidden {
		if under(h, []string{real}) {
			// Moved, a secret below would be at a path no longer hidden.
			return "", fmt.Errorf("%w: %s holds a file the sandbox may not touch", errPermission, p)
		}
	}
	return real, nil
}

// isRoot says whether real is one of the writable roots themselves.
func (s *Server) isRoot(real string) bool {
	for _, w := range s.cfg.Writable {
		if real == w {
			return true
		}
	}
	return false
}

// writableDir resolves p for making or writing into: like writable, but a
// writable root itself is allowed (it exists and is not replaced).
func (s *Server) writableDir(p string) (string, error) {
	real, err := s.resolve(p)
	if err != nil {
		return "", err
	}
	if s.isRoot(real) {
		return real, nil
	}
	return s.writable(p)
}

// under says whether path is one of dirs or below one.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// realPaths returns paths absolute, cleaned and, where they exist, with
// their symlinks resolved.
func realPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		out = append(out, abs)
	}
	return out
}

// statusError tells an os error apart for the answers.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func isPermission(err error) bool {
	return errors.Is(err, errPermission) || errors.Is(err, fs.ErrPermission)
}

// inRoot opens the writable root holding real (the deepest) and returns
// real relative to it. Writes go through it (os.Root, openat2 beneath the
// root): a symlink a command swaps in after the checks cannot lead a write
// out of the writable set.
func (s *Server) inRoot(real string) (*os.Root, string, error) {
	best := ""
	for _, w := range s.cfg.Writable {
		if under(real, []string{w}) && len(w) > len(best) {
			best = w
		}
	}
	if best == "" {
		return nil, "", fmt.Errorf("%w: %s is outside the sandbox's writable paths", errPermission, real)
	}
	root, err := os.OpenRoot(best)
	if err != nil {
		return nil, "", err
	}
	rel, err := filepath.Rel(best, real)
	if err != nil {
		root.Close()
		return nil, "", err
	}
	return root, rel, nil
}

// checkOpened checks what f really is, once open: a path swapped for a
// symlink between the check and the open must not have led to a secret.
func (s *Server) checkOpened(f *os.File, p string) error {
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return err
	}
	if under(real, s.cfg.Hidden) || (under(real, privateRoots) && !under(real, s.cfg.Writable)) {
		return fmt.Errorf("%w: %s is not visible to the sandbox", errPermission, p)
	}
	return nil
}
