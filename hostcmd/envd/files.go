package envd

import (
	"compress/gzip"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// uploadedEntry is one file of the upload's answer.
type uploadedEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// download serves GET /files?path=...: the file's bytes, gzip-compressed
// where the client accepts it.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	real, err := s.readable(p)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	f, err := os.Open(real)
	if err != nil {
		writeError(w, httpStatus(err), fileProblem(p, err))
		return
	}
	defer f.Close()
	if err := s.checkOpened(f, p); err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, fileProblem(p, err))
		return
	}
	if fi.IsDir() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(real)}))
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		// Fastest: a client asks for gzip by default (Node's fetch, Go's
		// http.Client), mostly over loopback, where compressing costs more
		// than the bytes it saves.
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer gz.Close()
		out = gz
	} else {
		w.Header().Set("Content-Length", fmt.Sprint(fi.Size()))
	}
	n, _ := io.Copy(out, f)
	s.stats.BytesRead.Add(n)
}

// acceptsGzip says whether an Accept-Encoding header lists gzip.
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// upload serves POST /files: the raw body (application/octet-stream, path
// required) or multipart/form-data parts named "file" (each at path, or at
// its file name when path is not given). Parent directories are made.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var entries []uploadedEntry
	var err error
	switch mediaType {
	case "multipart/form-data":
		entries, err = s.uploadMultipart(r, p, params["boundary"])
	case "application/octet-stream", "":
		var body io.Reader = r.Body
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			gz, gzErr := gzip.NewReader(r.Body)
			if gzErr != nil {
				writeError(w, http.StatusBadRequest, "the gzip body is not gzip: "+gzErr.Error())
				return
			}
			defer gz.Close()
			body = gz
		}
		var e uploadedEntry
		if e, err = s.writeFile(p, body); err == nil {
			entries = append(entries, e)
		}
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unsupported Content-Type %q: want multipart/form-data or application/octet-stream", mediaType))
		return
	}
	if err != nil {
		writeError(w, uploadStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, entries)
}

// uploadMultipart writes each "file" part.
func (s *Server) uploadMultipart(r *http.Request, p, boundary string) ([]uploadedEntry, error) {
	if boundary == "" {
		return nil, fmt.Errorf("%w: a multipart body without a boundary", errInvalid)
	}
	mr := multipart.NewReader(r.Body, boundary)
	var entries []uploadedEntry
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return entries, fmt.Errorf("%w: malformed multipart body: %v", errInvalid, err)
		}
		if part.FormName() != "file" {
			continue
		}
		target := p
		if target == "" {
			// The raw file name: the SDKs send the path there, which
			// part.FileName() would cut to its base name.
			_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			target = params["filename"]
		}
		e, err := s.writeFile(target, part)
		if err != nil {
			return entries, err
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: no part named \"file\" in the multipart body", errInvalid)
	}
	return entries, nil
}

// errTooLarge is an upload past Config.MaxUploadBytes.
var errTooLarge = errors.New("too large")

func uploadStatus(err error) int {
	if errors.Is(err, errTooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	return httpStatus(err)
}

// writeFile writes body to p through a temporary file in the same
// directory, renamed over p once complete: an upload cut short or past the
// limit leaves the old file as it was.
func (s *Server) writeFile(p string, body io.Reader) (uploadedEntry, error) {
	real, err := s.writableDir(p)
	if err != nil {
		return uploadedEntry{}, err
	}
	if fi, err := os.Stat(real); err == nil && fi.IsDir() {
		return uploadedEntry{}, fmt.Errorf("%w: path '%s' is a directory", errInvalid, p)
	}
	root, rel, err := s.inRoot(real)
	if err != nil {
		return uploadedEntry{}, err
	}
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return uploadedEntry{}, fmt.Errorf("make the parent directories of '%s': %w", p, err)
		}
	}
	tmpName := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".upload-"+rand.Text())
	tmp, err := root.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return uploadedEntry{}, fmt.Errorf("create '%s': %w", p, err)
	}
	n, err := io.Copy(tmp, io.LimitReader(body, s.cfg.MaxUploadBytes+1))
	if err == nil && n > s.cfg.MaxUploadBytes {
		err = fmt.Errorf("%w: '%s' is over the upload limit of %d bytes", errTooLarge, p, s.cfg.MaxUploadBytes)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmpName, rel)
	}
	if err != nil {
		_ = root.Remove(tmpName)
		return uploadedEntry{}, err
	}
	s.stats.BytesUploaded.Add(n)
	return uploadedEntry{Path: real, Name: filepath.Base(real), Type: "file"}, nil
}

// fileProblem says what went wrong with p as envd words it.
func fileProblem(p string, err error) string {
	switch {
	case isNotExist(err):
		return fmt.Sprintf("path '%s' does not exist", p)
	case isPermission(err):
		return fmt.Sprintf("error opening file '%s': permission denied", p)
	}
	return fmt.Sprintf("error opening file '%s': %v", p, err)
}
